"""The Batch message (proto/sluice/v1/service.proto) as numpy arrays, without copying the images.

gRPC hands the client each message as one `bytes` object. The top-level fields are walked by hand
so that `images` (field 15, which the server writes last) is never copied: the images array is a
read-only numpy view of that slice of the message. The small remaining fields are re-joined and
parsed by protobuf itself, so packed or unpacked labels, negative values and unknown fields are
handled exactly as any protobuf client would. Fields may come in any order.

The images come as the batch's dtype says (Batch.dtype, service.proto DType): uint8, float16,
float32, or bfloat16, which numpy lacks: `ml_dtypes.bfloat16` where ml_dtypes is importable
(TensorFlow installs it), else uint16 holding each value's bits (the high half of its float32);
Batch.dtype names the type either way. Their shape is the layout's (Batch.layout): [N, H, W, 3]
(NHWC) or [N, 3, H, W] (NCHW).
"""
import math
from types import MappingProxyType
from typing import NamedTuple

import grpc
import numpy as np

from sluice._errors import SluiceError
from sluice.v1 import service_pb2

try:
    from ml_dtypes import bfloat16 as _BFLOAT16
except ImportError:  # numpy has no bfloat16: its bits, as uint16
    _BFLOAT16 = None

# service.proto DType -> (name, numpy dtype of the received bytes, little-endian).
DTYPES = {0: ("uint8", np.dtype(np.uint8)), 1: ("float16", np.dtype("<f2")),
          2: ("bfloat16", np.dtype(_BFLOAT16) if _BFLOAT16 is not None else np.dtype("<u2")),
          3: ("float32", np.dtype("<f4"))}
DTYPE_VALUES = {name: value for value, (name, _) in DTYPES.items()}
LAYOUTS = {0: "NHWC", 1: "NCHW"}
LAYOUT_VALUES = {name: value for value, name in LAYOUTS.items()}

_IMAGES_FIELD = 15
_WIRETYPE_VARINT, _WIRETYPE_I64, _WIRETYPE_LEN, _WIRETYPE_I32 = 0, 1, 2, 5


class _PositionFields(NamedTuple):
    epoch: int
    index: int
    end_record: int


class Position(_PositionFields):
    """A batch's place in its stream (sluice.v1.Position): an (epoch, index, end_record) tuple.

    end_record: records of the epoch consumed up to this batch's last image, skipped ones included.
    shuffle_bytes (an attribute, not a tuple field, so that code unpacking or comparing three
        fields keeps working): the shuffle buffer's byte share the epoch's order depended on up to
        this batch, 0 when it did not. Pass the Position itself (or its after()) as a
        start_position and it travels along; a resume under another share is refused.
    """

    def __new__(cls, epoch, index, end_record, shuffle_bytes=0):
        self = super().__new__(cls, epoch, index, end_record)
        self.shuffle_bytes = int(shuffle_bytes)
        return self

    def __getnewargs__(self):
        return (self.epoch, self.index, self.end_record, self.shuffle_bytes)

    def __repr__(self):
        return "Position(epoch=%d, index=%d, end_record=%d, shuffle_bytes=%d)" % (
            self.epoch, self.index, self.end_record, self.shuffle_bytes)

    def after(self):
        """The start_position that resumes a stream right after this batch."""
        return Position(self.epoch, self.index + 1, self.end_record, self.shuffle_bytes)


# service.proto FeatureType -> (name, numpy dtype of its values, little-endian; None: bytes).
FEATURE_TYPES = {1: ("int64", np.dtype("<i8")), 2: ("float32", np.dtype("<f4")),
                 3: ("bytes", None)}
_FEATURES_FIELD = 12
# service.proto's bounds (formats/feature_schema.h): the arrays a batch carries, a row_shape's
# dimensions and each one's range, and the values a row holds.
MAX_FEATURE_ARRAYS = 4096
MAX_ROW_DIMENSIONS = 4
MAX_ROW_DIMENSION = 65536
MAX_ROW_VALUES = 2**31 - 1


class Ragged:
    """A ragged feature of a batch: sample i has row_lengths[i] rows (any number, 0 too).

    values: the rows of every sample in order, [total_rows, *row_shape] numpy (int64 or
        float32), or for bytes a list of total_rows bytes objects.
    row_lengths: int64 [N]. row_splits: int64 [N + 1], sample i's rows are
        values[row_splits[i]:row_splits[i + 1]] (batch.features["boxes"][i]: the [k, 4] boxes of
        sample i). len() is N; to_list() gives every sample's rows as Python lists.
    The same pair makes tf.RaggedTensor.from_row_lengths(values, row_lengths).
    """

    __slots__ = ("values", "row_lengths", "row_splits")

    def __init__(self, values, row_lengths):
        self.values = values
        self.row_lengths = np.asarray(row_lengths, dtype=np.int64)
        self.row_splits = np.zeros(len(self.row_lengths) + 1, dtype=np.int64)
        np.cumsum(self.row_lengths, out=self.row_splits[1:])
        if self.row_splits[-1] != len(values):
            raise ValueError("row_lengths add up to %d rows, values has %d"
                             % (self.row_splits[-1], len(values)))

    def __getstate__(self):
        return self.values, self.row_lengths

    def __setstate__(self, state):
        self.__init__(*state)

    def __len__(self):
        return len(self.row_lengths)

    def __getitem__(self, i):
        n = len(self.row_lengths)
        if not -n <= i < n:
            raise IndexError("sample %d of a batch of %d" % (i, n))
        i %= n
        return self.values[self.row_splits[i]:self.row_splits[i + 1]]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def to_list(self):
        """[sample's rows] per sample: nested lists of numbers, or lists of bytes."""
        return [rows.tolist() if isinstance(rows, np.ndarray) else list(rows) for rows in self]

    def __eq__(self, other):
        return (isinstance(other, Ragged) and np.array_equal(self.row_lengths, other.row_lengths)
                and self.to_list() == other.to_list())

    def __repr__(self):
        return "Ragged(%r)" % (self.to_list(),)


class _BatchFields(NamedTuple):
    images: np.ndarray
    labels: np.ndarray
    position: Position


class Batch(_BatchFields):
    """One batch: an (images, labels, position) tuple.

    images: RGB, a read-only view of the received message (or of a shared-memory slot), of the
        stream's transform set's output: by default uint8 [N, H, W, 3] (NHWC); see `dtype` and
        `layout`.
    labels: int32 [N]; None for an unlabeled dataset (StreamPlan.unlabeled).
    Attributes, not tuple fields (so that code unpacking three fields keeps working):
    dtype: the images' element type, "uint8", "float16", "bfloat16" or "float32". bfloat16
        images are ml_dtypes.bfloat16 where ml_dtypes is importable, else uint16 holding the
        values' bits (images.view(np.uint16) either way; torch: .view(torch.bfloat16) of them
        as int16, as sluice.torch does).
    layout: "NHWC" (images [N, H, W, 3]) or "NCHW" ([N, 3, H, W], PyTorch's).
    valid: bool [N], False for a padding sample (a repeat that metrics and losses should ignore,
        service.proto Batch.valid), or None when every sample is real.
    record_ids: int64 [N, 2] of (file, record) per sample, the file's index in the dataset's
        sorted file list and the record's index in that file, or None unless the stream asked for
        record ids. A padding sample names the record it repeats.
    mixed_labels, label_weights: int32 [N] and float32 [N] with mixup or cutmix in the
        stream's transform set, else None: sample i is label_weights[i] of labels[i] and the
        rest of mixed_labels[i] (soft_labels() makes the N x classes matrix).
    features: {name: array} of the dataset's features (StreamPlan.features, in that order;
        empty without any): a fixed-size one an int64 or float32 numpy array [N] (scalar) or
        [N, *row_shape], or for bytes a list of N bytes objects (scalar) or of N lists; a
        ragged one (a list feature, "boxes" [k, 4] normalized xmin, ymin, xmax, ymax of the
        output image, "box_labels") a sluice.Ragged. A padding sample has the features of the
        sample it repeats.
    """

    # What _make() and other tuple constructors leave: every sample real, uint8 NHWC.
    valid = None
    record_ids = None
    mixed_labels = None
    label_weights = None
    dtype = "uint8"
    layout = "NHWC"
    features = MappingProxyType({})
    # decode_batch's: ((name, type, row_shape, ragged), ...) of Batch.features, ragged None
    # with 0 samples (no row_lengths to show it); None for a batch made otherwise.
    _feature_format = None

    def __new__(cls, images, labels, position, valid=None, record_ids=None, mixed_labels=None,
                label_weights=None, dtype="uint8", layout="NHWC", features=None):
        self = super().__new__(cls, images, labels, position)
        self.features = {} if features is None else features
        self.valid = valid
        self.record_ids = record_ids
        self.mixed_labels = mixed_labels
        self.label_weights = label_weights
        self.dtype = dtype
        self.layout = layout
        return self

    def _extras(self):
        return dict(valid=self.valid, record_ids=self.record_ids, mixed_labels=self.mixed_labels,
                    label_weights=self.label_weights, dtype=self.dtype, layout=self.layout,
                    features=self.features)

    def __getnewargs_ex__(self):
        return (self.images, self.labels, self.position), self._extras()

    def _replace(self, **fields):
        return Batch(*super()._replace(**fields), **self._extras())

    def soft_labels(self, num_classes):
        """float32 [N, num_classes]: one-hot labels, or with mixed labels
        w * onehot(labels) + (1 - w) * onehot(mixed_labels). ValueError naming a label outside
        [0, num_classes); for an unlabeled batch (labels None)."""
        if self.labels is None:
            raise ValueError("an unlabeled batch (its dataset is unlabeled) has no soft labels")
        return soft_labels(self.labels, self.mixed_labels, self.label_weights, num_classes)


def soft_labels(labels, mixed_labels, label_weights, num_classes):
    """float32 [N, num_classes] from a batch's labels and, when not None, its mixed labels and
    weights (Batch.soft_labels). ValueError when only one of mixed_labels and label_weights is
    given (a soft label needs both)."""
    if (mixed_labels is None) != (label_weights is None):
        raise ValueError("soft labels need mixed_labels and label_weights both or neither, got "
                         "only %s" % ("mixed_labels" if label_weights is None else
                                      "label_weights"))
    num_classes = int(num_classes)
    if num_classes < 1:
        raise ValueError("soft labels need the dataset's num_classes (at least 1), got %d"
                         % num_classes)
    labels = np.asarray(labels)
    rows = np.arange(len(labels))
    out = np.zeros((len(labels), num_classes), dtype=np.float32)
    pairs = [(labels, np.ones(len(labels), dtype=np.float32))]
    if mixed_labels is not None:
        w = np.asarray(label_weights, dtype=np.float32)
        pairs = [(labels, w), (np.asarray(mixed_labels), 1 - w)]
    for name, (values, weights) in zip(("labels", "mixed_labels"), pairs):
        bad = np.flatnonzero((values < 0) | (values >= num_classes))
        if len(bad):
            raise ValueError("%s[%d] is %d, outside the dataset's %d classes" % (
                name, bad[0], values[bad[0]], num_classes))
        np.add.at(out, (rows, values), weights)
    return out


# The images field sits wherever the fields before it end in the message, often at an offset
# that is no multiple of a float's size; torch (torch.py wraps the array without a copy) and
# vectorized kernels assume aligned elements. A misaligned array is copied once (a view keeps
# the common aligned case free) to a start on a cache line, _ALIGNMENT bytes.
_ALIGNMENT = 64


def _aligned_copy(images):
    """A read-only copy of `images` starting at a multiple of _ALIGNMENT bytes."""
    raw = np.empty(images.nbytes + _ALIGNMENT, dtype=np.uint8)
    skip = -raw.ctypes.data % _ALIGNMENT
    out = raw[skip:skip + images.nbytes].view(images.dtype).reshape(images.shape)
    out[...] = images
    out.flags.writeable = False
    return out


def _malformed(what):
    return SluiceError(grpc.StatusCode.DATA_LOSS, "malformed Batch message: " + what)


def _varint(data, pos, end):
    result = 0
    shift = 0
    while pos < end:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            break
    raise _malformed("truncated or overlong varint at byte %d" % pos)


def decode_batch(data, segment=None, token=None, plan=None):
    """Parses a serialized sluice.v1.Batch. Returns (Batch, skipped_records).

    A batch whose images are in a shared-memory slot (Batch.shared_memory) gets them as a view of
    `segment` (sluice._shm.Segment), setting token.attached; token.release() is called when that
    view is gone. Otherwise they are a read-only view of `data`, or, when that view would not start
    at a multiple of the dtype's size (float images after an odd number of header bytes), a
    read-only copy starting on a 64-byte boundary.

    plan: the stream's sluice.v1.StreamPlan, if known: a batch of 0 samples, which has no
    row_lengths to show it, then has its plan's ragged features as sluice.Ragged (with no rows),
    not as plain arrays.

    Raises SluiceError(DATA_LOSS) naming what is wrong when the message is malformed or its shape
    disagrees with its images, labels or per-sample fields: an unknown dtype or layout, a shape
    other than [N, H, W, 3] (NHWC) or [N, 3, H, W] (NCHW), images of other than N*H*W*3 values
    of the dtype, valid, record_files, record_indexes, mixed_labels and label_weights each N
    values or none, the record ids both or neither, mixed_labels and label_weights both or
    neither, each weight finite and in [0, 1]; labels N values or none (an unlabeled dataset:
    Batch.labels None); at most 4096 features (refused as read), each as
    decode_feature checks it.
    """
    end = len(data)
    pos = 0
    header = []  # serialized fields other than images, in wire order
    images_offset = images_length = None
    features = 0
    while pos < end:
        start = pos
        tag, pos = _varint(data, pos, end)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise _malformed("field number 0 at byte %d" % start)
        if field == _FEATURES_FIELD:
            features += 1
            if features > MAX_FEATURE_ARRAYS:
                raise _malformed("features: over %d arrays" % MAX_FEATURE_ARRAYS)
        if wire_type == _WIRETYPE_VARINT:
            _, pos = _varint(data, pos, end)
        elif wire_type == _WIRETYPE_I64:
            pos += 8
        elif wire_type == _WIRETYPE_I32:
            pos += 4
        elif wire_type == _WIRETYPE_LEN:
            length, pos = _varint(data, pos, end)
            if field == _IMAGES_FIELD:
                images_offset, images_length = pos, length  # a repeated field: the last wins
            pos += length
        else:
            raise _malformed("field %d has wire type %d" % (field, wire_type))
        if pos > end:
            raise _malformed("field %d runs past the end of the message (%d bytes)" % (field, end))
        if field == _IMAGES_FIELD:
            if wire_type != _WIRETYPE_LEN:
                raise _malformed("images is not a bytes field")
        else:
            header.append(data[start:pos])
    try:
        message = service_pb2.Batch.FromString(b"".join(header))
    except Exception as e:  # protobuf's DecodeError, whichever implementation is loaded
        raise _malformed(str(e) or "cannot parse the fields before images") from None
    if message.dtype not in DTYPES:
        raise _malformed("dtype %d is not a known DType" % message.dtype)
    if message.layout not in LAYOUTS:
        raise _malformed("layout %d is not a known Layout" % message.layout)
    dtype_name, dtype = DTYPES[message.dtype]
    layout = LAYOUTS[message.layout]
    nchw = layout == "NCHW"
    shape = list(message.shape)
    # Images are RGB: the channel dimension, where the layout puts it, is 3.
    if (len(shape) != 4 or shape[0] < 0 or min(shape[1:]) <= 0
            or shape[1 if nchw else 3] != 3):
        raise _malformed("shape must be %s for layout %s, got %s"
                         % ("[N, 3, H, W]" if nchw else "[N, H, W, 3]", layout, shape))
    n = shape[0]
    count = n * shape[1] * shape[2] * shape[3]
    shared = message.HasField("shared_memory")
    if shared:
        if images_offset is not None:
            raise _malformed("both images and shared_memory")
        if segment is None:
            raise _malformed("shared_memory on a stream without a mapped segment")
        images_length = message.shared_memory.length
    elif images_offset is None:
        images_offset, images_length = 0, 0
    if images_length != count * dtype.itemsize:
        raise _malformed("images holds %d bytes, shape %s needs %d (%s)" %
                         (images_length, shape, count * dtype.itemsize, dtype_name))
    # None: an unlabeled dataset's batch.
    if len(message.labels) not in (0, n):
        raise _malformed("%d labels for %d images" % (len(message.labels), n))
    if not message.labels and message.mixed_labels:
        raise _malformed("mixed_labels without labels")
    for name in ("valid", "record_files", "record_indexes", "mixed_labels", "label_weights"):
        values = len(getattr(message, name))
        if values not in (0, n):
            raise _malformed("%s holds %d values for %d images" % (name, values, n))
    if len(message.record_files) != len(message.record_indexes):
        raise _malformed("record_indexes without record_files" if not message.record_files
                         else "record_files without record_indexes")
    if len(message.mixed_labels) != len(message.label_weights):
        raise _malformed("label_weights without mixed_labels" if not message.mixed_labels
                         else "mixed_labels without label_weights")
    # A weight is the share of labels[i] in a soft label: anything else trains on garbage.
    for i, weight in enumerate(message.label_weights):
        if not (math.isfinite(weight) and 0 <= weight <= 1):
            raise _malformed("label_weights[%d] is %r, not in [0, 1]" % (i, weight))
    if shared:
        images = segment.view(message.shared_memory.slot, tuple(shape), token, dtype)
    else:
        images = np.frombuffer(data, dtype=dtype, count=count,
                               offset=images_offset).reshape(shape)
        if images.ctypes.data % dtype.itemsize:
            images = _aligned_copy(images)
    labels = np.array(message.labels, dtype=np.int32) if message.labels or n == 0 else None
    ragged = {i.name for i in plan.features if i.ragged} if plan is not None and n == 0 else ()
    features = {f.name: decode_feature(f, n, f.name in ragged) for f in message.features}
    valid = np.array(message.valid, dtype=np.bool_) if message.valid else None
    record_ids = None
    if message.record_files:
        record_ids = np.empty((n, 2), dtype=np.int64)
        record_ids[:, 0] = message.record_files
        record_ids[:, 1] = message.record_indexes
    mixed_labels = label_weights = None
    if message.mixed_labels:
        mixed_labels = np.array(message.mixed_labels, dtype=np.int32)
        label_weights = np.array(message.label_weights, dtype=np.float32)
    p = message.position
    batch = Batch(images, labels, Position(p.epoch, p.index, p.end_record, p.shuffle_bytes),
                  valid, record_ids, mixed_labels, label_weights, dtype_name, layout, features)
    batch._feature_format = tuple(
        (f.name, FEATURE_TYPES[f.type][0], tuple(f.row_shape),
         bool(f.row_lengths) if n else (f.name in ragged if plan is not None else None))
        for f in message.features)
    return batch, message.skipped_records


def decode_feature(f, n, ragged_when_empty=False):
    """One sluice.v1.FeatureArray of a batch of n samples as Batch.features holds it (with n = 0
    a sluice.Ragged when ragged_when_empty, the plan saying it is ragged). Raises
    SluiceError(DATA_LOSS) naming the feature and what is wrong: an unknown type, a row_shape of
    over 4 dimensions, a dimension outside [1, 65536] or over 2^31 - 1 values a row, a negative
    row_lengths value, row_lengths of other than 0 or n values, values of other than
    rows x prod(row_shape) elements of the type, value_lengths that do not add up to the values'
    bytes or are not one per element (or present on a numeric array)."""
    def bad(what):
        return _malformed("feature '%s': %s" % (f.name, what))

    if f.type not in FEATURE_TYPES:
        raise bad("type %d is not a known FeatureType" % f.type)
    type_name, dtype = FEATURE_TYPES[f.type]
    row_shape = list(f.row_shape)
    if len(row_shape) > MAX_ROW_DIMENSIONS:
        raise bad("row_shape has %d dimensions, over %d" % (len(row_shape), MAX_ROW_DIMENSIONS))
    for d, size in enumerate(row_shape):
        if not 1 <= size <= MAX_ROW_DIMENSION:
            raise bad("row_shape[%d] is %d, outside [1, %d]" % (d, size, MAX_ROW_DIMENSION))
    row_values = math.prod(row_shape)
    if row_values > MAX_ROW_VALUES:
        raise bad("row_shape holds over %d values a row" % MAX_ROW_VALUES)
    row_lengths = list(f.row_lengths)
    ragged = bool(row_lengths) or (n == 0 and ragged_when_empty)
    if ragged and len(row_lengths) != n:
        raise bad("row_lengths holds %d values for %d samples" % (len(row_lengths), n))
    for i, length in enumerate(row_lengths):
        if length < 0:
            raise bad("row_lengths[%d] is %d" % (i, length))
    rows = sum(row_lengths) if ragged else n
    elements = rows * row_values
    if dtype is not None:
        if f.value_lengths:
            raise bad("value_lengths on a %s array" % ("int64" if f.type == 1 else "float"))
        if len(f.values) != elements * dtype.itemsize:
            raise bad("values holds %d bytes, %d rows of %d %s values need %d" % (
                len(f.values), rows, row_values, "int64" if f.type == 1 else "float",
                elements * dtype.itemsize))
        values = np.frombuffer(f.values, dtype=dtype).reshape([rows] + row_shape).copy()
    else:
        lengths = list(f.value_lengths)
        if len(lengths) != elements:
            raise bad("value_lengths holds %d values for %d rows of %d bytes values"
                      % (len(lengths), rows, row_values))
        for k, length in enumerate(lengths):
            if length < 0:
                raise bad("value_lengths[%d] is %d" % (k, length))
        if sum(lengths) != len(f.values):
            raise bad("value_lengths add up to %d bytes, values holds %d"
                      % (sum(lengths), len(f.values)))
        data, flat, at = f.values, [], 0
        for length in lengths:
            flat.append(data[at:at + length])
            at += length
        values = flat if not row_shape else [flat[r * row_values:(r + 1) * row_values]
                                             for r in range(rows)]
    return Ragged(values, row_lengths) if ragged else values


def empty_feature(info, n):
    """What a padding batch of n samples with no record to repeat carries for the feature
    `info` (a sluice.v1.FeatureInfo): no rows in a ragged one, zeros or empty bytes in a
    fixed-size one."""
    type_name, dtype = FEATURE_TYPES.get(info.type, ("bytes", None))
    row_shape = list(info.row_shape)
    if info.ragged:
        values = (np.zeros([0] + row_shape, dtype=dtype) if dtype is not None else [])
        return Ragged(values, np.zeros(n, dtype=np.int64))
    if dtype is not None:
        return np.zeros([n] + row_shape, dtype=dtype)
    if not row_shape:
        return [b""] * n
    return [[b""] * math.prod(row_shape) for _ in range(n)]

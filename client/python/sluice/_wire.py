"""The Batch message (proto/sluice/v1/service.proto) as numpy arrays, without copying the images.

gRPC hands the client each message as one `bytes` object. The top-level fields are walked by hand
so that `images` (field 15, which the server writes last) is never copied: the images array is a
read-only numpy view of that slice of the message. The small remaining fields are re-joined and
parsed by protobuf itself, so packed or unpacked labels, negative values and unknown fields are
handled exactly as any protobuf client would. Fields may come in any order.
"""
from typing import NamedTuple

import grpc
import numpy as np

from sluice._errors import SluiceError
from sluice.v1 import service_pb2

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


class _BatchFields(NamedTuple):
    images: np.ndarray
    labels: np.ndarray
    position: Position


class Batch(_BatchFields):
    """One batch: an (images, labels, position) tuple.

    images: uint8 [N, H, W, 3] (NHWC, RGB), a read-only view of the received message;
    labels: int32 [N].
    Attributes, not tuple fields (so that code unpacking three fields keeps working):
    valid: bool [N], False for a padding sample (a repeat that metrics and losses should ignore,
        service.proto Batch.valid), or None when every sample is real.
    record_ids: int64 [N, 2] of (file, record) per sample, the file's index in the dataset's
        sorted file list and the record's index in that file, or None unless the stream asked for
        record ids. A padding sample names the record it repeats.
    """

    valid = None  # what _make() and other tuple constructors leave: every sample real
    record_ids = None

    def __new__(cls, images, labels, position, valid=None, record_ids=None):
        self = super().__new__(cls, images, labels, position)
        self.valid = valid
        self.record_ids = record_ids
        return self

    def __getnewargs__(self):
        return (self.images, self.labels, self.position, self.valid, self.record_ids)

    def _replace(self, **fields):
        return Batch(*super()._replace(**fields), valid=self.valid, record_ids=self.record_ids)


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


def decode_batch(data, segment=None, token=None):
    """Parses a serialized sluice.v1.Batch. Returns (Batch, skipped_records).

    A batch whose images are in a shared-memory slot (Batch.shared_memory) gets them as a view of
    `segment` (sluice._shm.Segment), setting token.attached; token.release() is called when that
    view is gone.

    Raises SluiceError(DATA_LOSS) naming what is wrong when the message is malformed or its shape
    disagrees with its images, labels or per-sample fields (valid, record_files and record_indexes
    each hold N values or none; the record ids come both or neither).
    """
    end = len(data)
    pos = 0
    header = []  # serialized fields other than images, in wire order
    images_offset = images_length = None
    while pos < end:
        start = pos
        tag, pos = _varint(data, pos, end)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise _malformed("field number 0 at byte %d" % start)
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
    shape = list(message.shape)
    if len(shape) != 4 or shape[0] < 0 or min(shape[1:]) <= 0:
        raise _malformed("shape must be [N, H, W, C], got %s" % shape)
    n, h, w, c = shape
    shared = message.HasField("shared_memory")
    if shared:
        if images_offset is not None:
            raise _malformed("both images and shared_memory")
        if segment is None:
            raise _malformed("shared_memory on a stream without a mapped segment")
        images_length = message.shared_memory.length
    elif images_offset is None:
        images_offset, images_length = 0, 0
    if images_length != n * h * w * c:
        raise _malformed("images holds %d bytes, shape %s needs %d" %
                         (images_length, shape, n * h * w * c))
    if len(message.labels) != n:
        raise _malformed("%d labels for %d images" % (len(message.labels), n))
    for name in ("valid", "record_files", "record_indexes"):
        count = len(getattr(message, name))
        if count not in (0, n):
            raise _malformed("%s holds %d values for %d images" % (name, count, n))
    if len(message.record_files) != len(message.record_indexes):
        raise _malformed("record_indexes without record_files" if not message.record_files
                         else "record_files without record_indexes")
    if shared:
        images = segment.view(message.shared_memory.slot, (n, h, w, c), token)
    else:
        images = np.frombuffer(data, dtype=np.uint8, count=images_length,
                               offset=images_offset).reshape(n, h, w, c)
    labels = np.array(message.labels, dtype=np.int32)
    valid = np.array(message.valid, dtype=np.bool_) if message.valid else None
    record_ids = None
    if message.record_files:
        record_ids = np.empty((n, 2), dtype=np.int64)
        record_ids[:, 0] = message.record_files
        record_ids[:, 1] = message.record_indexes
    p = message.position
    batch = Batch(images, labels, Position(p.epoch, p.index, p.end_record, p.shuffle_bytes),
                  valid, record_ids)
    return batch, message.skipped_records

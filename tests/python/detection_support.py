"""Shared by the detection tests (test_detection_tfrecord.py, test_detection_torch.py): a small
detection data set (records of several sizes with Object Detection API boxes, an image label, a
multi-label list and a caption), what torchvision's geometry makes of its boxes, and a server
that serves it as an EVAL dataset "det" (with a transform set "flip"), a TRAIN one and an
unlabeled one. No framework is imported here."""
import struct

import numpy as np

from client_support import Server

OUT = 48          # output images are OUT x OUT
SHORTER = 56      # the EVAL list resizes the shorter side to this, then center-crops OUT
CLASSES = 5       # of the multi-label list
# (height, width) per record, and its boxes (xmin, ymin, xmax, ymax) normalized with their class.
RECORDS = [
    ((60, 80), [((0.10, 0.20, 0.40, 0.60), 1), ((0.50, 0.05, 0.95, 0.90), 2)]),
    ((90, 50), [((0.00, 0.00, 1.00, 0.08), 3)]),       # cut off by the crop at the top
    ((64, 64), []),
    ((50, 120), [((0.01, 0.30, 0.05, 0.70), 4), ((0.30, 0.10, 0.70, 0.90), 0),
                 ((0.80, 0.40, 1.00, 0.60), 2)]),
    ((70, 70), [((0.25, 0.25, 0.75, 0.75), 1)]),
    ((45, 100), [((0.00, 0.00, 1.00, 1.00), 3), ((0.40, 0.40, 0.45, 0.45), 1)]),
]


def expected_boxes(r, flip):
    """torchvision's Resize(SHORTER) then CenterCrop(OUT) (and a horizontal flip) of record r's
    boxes, each clamped to the crop, those under 1 output pixel a side dropped; normalized."""
    (h, w), boxes = RECORDS[r]
    if h <= w:
        new_h, new_w = SHORTER, int(SHORTER * w / h)
    else:
        new_h, new_w = int(SHORTER * h / w), SHORTER
    top, left = int(round((new_h - OUT) / 2.0)), int(round((new_w - OUT) / 2.0))
    out, labels = [], []
    for (x0, y0, x1, y1), c in boxes:
        px = np.clip(np.array([x0 * new_w - left, x1 * new_w - left]), 0, OUT)
        py = np.clip(np.array([y0 * new_h - top, y1 * new_h - top]), 0, OUT)
        if px[1] - px[0] < 1 or py[1] - py[0] < 1:
            continue
        if flip:
            px = OUT - px[::-1]
        out.append([px[0] / OUT, py[0] / OUT, px[1] / OUT, py[1] / OUT])
        labels.append(c)
    return np.array(out, dtype=np.float64).reshape(-1, 4), labels


class DetectionServer(Server):
    def datasets(self):
        files = f'files: "{self.data}/detection.tfrecord"'
        features = """
    features { key: "image/labels" name: "labels" type: FEATURE_TYPE_INT64
               shape: FEATURE_SHAPE_MULTI_HOT length: %d }
    features { key: "image/caption" name: "caption" type: FEATURE_TYPE_BYTES
               shape: FEATURE_SHAPE_SCALAR }
    boxes { enabled: true }""" % CLASSES
        eval_list = ("transforms { resize { shorter_side: %d } } "
                     "transforms { center_crop { size: %d } }" % (SHORTER, OUT))
        return f"""datasets {{
  name: "det"
  num_classes: 3
  pipeline {{
    {files} mode: MODE_EVAL batch_size: 4 image_height: {OUT} epochs: 1
    {eval_list}{features}
  }}
  transform_sets {{ name: "flip" {eval_list} transforms {{ flip {{ horizontal_p: 1 }} }} }}
}}
datasets {{
  name: "det_train"
  num_classes: 3
  pipeline {{ {files} batch_size: 4 image_height: {OUT} seed: 5{features} }}
}}
datasets {{
  name: "det_unlabeled"
  pipeline {{
    {files} mode: MODE_EVAL batch_size: 4 image_height: {OUT} epochs: 1 unlabeled: true
    {eval_list}
    features {{ key: "image/caption" name: "caption" type: FEATURE_TYPE_BYTES
               shape: FEATURE_SHAPE_SCALAR }}
  }}
}}
"""




def _varint(n):
    n &= (1 << 64) - 1  # negative int64: ten bytes, as protobuf writes it
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _len_field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example_bytes(r, jpeg):
    """Record r as a serialized tf.train.Example, written by hand with the keys
    test_detection_tfrecord.py has TensorFlow write (for a venv without TensorFlow)."""
    (_, _), boxes = RECORDS[r]
    coords = np.array([b for b, _ in boxes], dtype="<f4").reshape(-1, 4)

    def bytes_list(values):
        return _len_field(1, b"".join(_len_field(1, v) for v in values))

    def float_list(values):
        return _len_field(2, _len_field(1, np.asarray(values, "<f4").tobytes()) if len(values)
                          else b"")

    def int64_list(values):
        return _len_field(3, _len_field(1, b"".join(_varint(int(v)) for v in values))
                          if len(values) else b"")

    feature = {
        "image/encoded": bytes_list([jpeg]),
        "image/class/label": int64_list([r % 3]),
        "image/labels": int64_list(sorted({r % CLASSES, (r * 2) % CLASSES})),
        "image/caption": bytes_list([("record %d" % r).encode() * (r % 2)]),
        "image/object/bbox/xmin": float_list(coords[:, 0]),
        "image/object/bbox/ymin": float_list(coords[:, 1]),
        "image/object/bbox/xmax": float_list(coords[:, 2]),
        "image/object/bbox/ymax": float_list(coords[:, 3]),
        "image/object/class/label": int64_list([c for _, c in boxes]),
    }
    entries = b"".join(_len_field(1, _len_field(1, k.encode()) + _len_field(2, v))
                       for k, v in feature.items())
    return _len_field(1, entries)


def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data):
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path, records):
    """TFRecord framing (length, masked CRC-32C of it, data, masked CRC-32C of that)."""
    with open(path, "wb") as out:
        for data in records:
            length = struct.pack("<Q", len(data))
            out.write(length + struct.pack("<I", _masked(length)) + data +
                      struct.pack("<I", _masked(data)))

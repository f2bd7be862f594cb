"""The feature extractor (formats/sample_features.h) against tf.io.parse_example: TensorFlow writes
TFRecords of tf.train.Examples with features of every kind, length and presence; the extractor
(through tests/formats/feature_extract_probe) must read the same values as tf.io.parse_example
does with the equivalent FixedLenFeature / VarLenFeature / RaggedFeature specs, and refuse exactly
the records TensorFlow refuses (a required feature missing, a wrong count or list kind)."""
import base64
import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

PROBE = os.environ.get("FEATURE_EXTRACT_PROBE")
BOX_KEYS = ["image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax",
            "image/object/bbox/ymax"]
BOX_LABEL_KEY = "image/object/class/label"
CLASSES = 10


@pytest.fixture(scope="module")
def probe_bin():
    if not PROBE or not os.path.exists(PROBE):
        pytest.fail("FEATURE_EXTRACT_PROBE must point at the built feature_extract_probe")
    return PROBE


def b64(data):
    return base64.b64encode(data).decode()


def int64s(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def bytes_(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def run_probe(probe_bin, tmp_path, spec, examples):
    """The probe's reading of each example: None where it refused it, else {name: (rows, values)}
    with values as numpy arrays (float32 from their bits) or lists of bytes."""
    records = tmp_path / "records.tfrecord"
    with tf.io.TFRecordWriter(str(records)) as writer:
        for e in examples:
            writer.write(e.SerializeToString())
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.run([probe_bin, str(spec_path), str(records)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == len(examples)
    types = array_types(spec)
    out = []
    for line in lines:
        if not line["ok"]:
            out.append(line["error"])
            continue
        arrays = {}
        for a in line["arrays"]:
            kind = types[a["name"]]
            if kind == "bytes":
                values = [bytes.fromhex(v) for v in a["values"]]
            elif kind == "int64":
                values = np.array(a["values"], dtype=np.int64)
            else:
                values = np.array(a["values"], dtype=np.uint32).view(np.float32)
            arrays[a["name"]] = (a["rows"], values)
        out.append(arrays)
    return out


def array_types(spec):
    types = {}
    for f in spec.get("features", []):
        name = f.get("name") or f["key"]
        if f.get("shape") == "FEATURE_SHAPE_MULTI_HOT":
            types[name] = "float"
        else:
            types[name] = {"FEATURE_TYPE_INT64": "int64", "FEATURE_TYPE_FLOAT": "float",
                           "FEATURE_TYPE_BYTES": "bytes"}[f["type"]]
    if spec.get("boxes", {}).get("enabled"):
        types["boxes"] = "float"
        types["box_labels"] = "int64"
    return types


def tf_parse(example, tf_spec):
    """tf.io.parse_example of one record, as numpy; the error message where TensorFlow refuses."""
    try:
        parsed = tf.io.parse_example(tf.constant([example.SerializeToString()]), tf_spec)
    except tf.errors.InvalidArgumentError as e:
        return e.message
    out = {}
    for key, value in parsed.items():
        if isinstance(value, tf.SparseTensor):
            value = value.values
        elif isinstance(value, tf.RaggedTensor):
            value = value.flat_values
        else:
            value = value[0]
        value = np.asarray(value.numpy())
        out[key] = list(value.reshape(-1)) if value.dtype == object else value.reshape(-1)
    return out


def same(ours, theirs):
    """Values equal, floats bit for bit (NaN, -0.0 and subnormals included)."""
    if isinstance(theirs, list):
        return list(ours) == [bytes(v) for v in theirs]
    theirs = np.asarray(theirs)
    if theirs.dtype == np.float32:
        return np.array_equal(np.asarray(ours, dtype=np.float32).view(np.uint32),
                              theirs.view(np.uint32))
    return np.array_equal(np.asarray(ours), theirs)


# Every shape and type, each missing feature with a default (or as an empty row), multi-label both
# as a list and multi-hot, and boxes: every record is read, none refused.
LENIENT_SPEC = {
    "features": [
        {"key": "ids", "type": "FEATURE_TYPE_INT64"},
        {"key": "scores", "type": "FEATURE_TYPE_FLOAT"},
        {"key": "tags", "type": "FEATURE_TYPE_BYTES"},
        {"key": "count", "type": "FEATURE_TYPE_INT64", "shape": "FEATURE_SHAPE_SCALAR",
         "default_value": -1},
        {"key": "weight", "type": "FEATURE_TYPE_FLOAT", "shape": "FEATURE_SHAPE_SCALAR",
         "default_value": 0.5},
        {"key": "caption", "type": "FEATURE_TYPE_BYTES", "shape": "FEATURE_SHAPE_SCALAR",
         "default_bytes": b64(b"(none)")},
        {"key": "pos", "type": "FEATURE_TYPE_INT64", "shape": "FEATURE_SHAPE_FIXED", "length": 2,
         "default_value": 7},
        {"key": "rgb", "type": "FEATURE_TYPE_FLOAT", "shape": "FEATURE_SHAPE_FIXED", "length": 3,
         "default_value": -2.5},
        {"key": "pair", "type": "FEATURE_TYPE_BYTES", "shape": "FEATURE_SHAPE_FIXED",
         "length": 2, "default_bytes": b64(b"?")},
        {"key": "labels", "name": "labels_hot", "type": "FEATURE_TYPE_INT64",
         "shape": "FEATURE_SHAPE_MULTI_HOT", "length": CLASSES, "allow_missing": True},
        {"key": "labels", "type": "FEATURE_TYPE_INT64"},
    ],
    "boxes": {"enabled": True, "max_boxes": 8},
    "max_feature_bytes": 1 << 20,
}

LENIENT_TF_SPEC = {
    "ids": tf.io.VarLenFeature(tf.int64),
    "scores": tf.io.VarLenFeature(tf.float32),
    "tags": tf.io.RaggedFeature(tf.string),
    "count": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "weight": tf.io.FixedLenFeature([], tf.float32, default_value=0.5),
    "caption": tf.io.FixedLenFeature([], tf.string, default_value=b"(none)"),
    "pos": tf.io.FixedLenFeature([2], tf.int64, default_value=[7, 7]),
    "rgb": tf.io.FixedLenFeature([3], tf.float32, default_value=[-2.5] * 3),
    "pair": tf.io.FixedLenFeature([2], tf.string, default_value=[b"?", b"?"]),
    "labels": tf.io.VarLenFeature(tf.int64),
    **{k: tf.io.VarLenFeature(tf.float32) for k in BOX_KEYS},
    BOX_LABEL_KEY: tf.io.VarLenFeature(tf.int64),
}

SPECIAL_FLOATS = [np.nan, np.inf, -np.inf, -0.0, 1e-40, 3.4028235e38, -1.5]
SPECIAL_INTS = [0, -1, 2**62, -(2**63), 2**63 - 1, 9007199254740993]


def random_float(rng):
    if rng.random() < 0.3:
        return float(SPECIAL_FLOATS[rng.integers(len(SPECIAL_FLOATS))])
    return float(rng.normal() * 10)


def random_int(rng):
    if rng.random() < 0.3:
        return int(SPECIAL_INTS[rng.integers(len(SPECIAL_INTS))])
    return int(rng.integers(-1000, 1000))


def random_bytes(rng):
    n = int(rng.integers(0, 12))
    return bytes(rng.integers(0, 256, size=n, dtype=np.uint8))


def lenient_example(rng):
    f = {"image/encoded": bytes_([b"jpeg"]), "other": floats([1.0])}

    def maybe(key, make):
        if rng.random() < 0.75:
            f[key] = make()
        elif rng.random() < 0.2:
            f[key] = tf.train.Feature()  # present, with no list: read as missing

    maybe("ids", lambda: int64s([random_int(rng) for _ in range(rng.integers(0, 6))]))
    maybe("scores", lambda: floats([random_float(rng) for _ in range(rng.integers(0, 5))]))
    maybe("tags", lambda: bytes_([random_bytes(rng) for _ in range(rng.integers(0, 4))]))
    maybe("count", lambda: int64s([random_int(rng)]))
    maybe("weight", lambda: floats([random_float(rng)]))
    maybe("caption", lambda: bytes_([random_bytes(rng)]))
    maybe("pos", lambda: int64s([random_int(rng) for _ in range(2)]))
    maybe("rgb", lambda: floats([random_float(rng) for _ in range(3)]))
    maybe("pair", lambda: bytes_([random_bytes(rng) for _ in range(2)]))
    # Multi-label: any number of classes, repeats included.
    maybe("labels", lambda: int64s(list(rng.integers(0, CLASSES, size=rng.integers(0, 5)))))
    if rng.random() < 0.8:
        n = int(rng.integers(0, 6))
        # Corners past the image's edges on both sides, ordered (after clamping too).
        x = np.sort(rng.uniform(-0.3, 1.3, size=(n, 2)).astype(np.float32), axis=1)
        y = np.sort(rng.uniform(-0.3, 1.3, size=(n, 2)).astype(np.float32), axis=1)
        for key, values in zip(BOX_KEYS, [x[:, 0], y[:, 0], x[:, 1], y[:, 1]]):
            f[key] = floats(values.tolist())
        if rng.random() < 0.6:
            f[BOX_LABEL_KEY] = int64s(list(rng.integers(0, 90, size=n)))
    return tf.train.Example(features=tf.train.Features(feature=f))


def test_every_shape_and_type_reads_as_tf_parse_example(probe_bin, tmp_path):
    rng = np.random.default_rng(17)
    examples = [lenient_example(rng) for _ in range(300)]
    ours = run_probe(probe_bin, tmp_path, LENIENT_SPEC, examples)
    for i, (example, got) in enumerate(zip(examples, ours)):
        want = tf_parse(example, LENIENT_TF_SPEC)
        assert isinstance(want, dict), f"record {i}: TensorFlow refused it: {want}"
        assert isinstance(got, dict), f"record {i}: refused: {got}"
        for key in ["ids", "scores", "tags", "labels"]:  # LIST: rows = values
            rows, values = got[key]
            assert rows == len(want[key]), (i, key)
            assert same(values, want[key]), (i, key, values, want[key])
        for key in ["count", "weight", "caption", "pos", "rgb", "pair"]:  # one row each
            rows, values = got[key]
            assert rows == 1, (i, key)
            assert same(values, want[key]), (i, key, values, want[key])
        # MULTI_HOT: the one-hot of the VarLen class list, 1 however often a class repeats.
        hot = np.zeros(CLASSES, dtype=np.float32)
        hot[want["labels"]] = 1
        assert got["labels_hot"][0] == 1
        assert same(got["labels_hot"][1], hot), i
        # Boxes: the four VarLen lists as rows, clamped to [0, 1]; labels 0 without a list.
        xmin, ymin, xmax, ymax = (want[k] for k in BOX_KEYS)
        n = len(xmin)
        boxes = np.clip(np.stack([xmin, ymin, xmax, ymax], axis=1), 0, 1).astype(np.float32)
        assert got["boxes"][0] == n
        assert np.array_equal(got["boxes"][1].reshape(n, 4), boxes), i
        labels = want[BOX_LABEL_KEY] if BOX_LABEL_KEY in example.features.feature else []
        assert got["box_labels"][0] == n
        assert np.array_equal(got["box_labels"][1],
                              labels if len(labels) else np.zeros(n, dtype=np.int64)), i


# Required features (no defaults): a record lacking one, holding the wrong number of values or a
# list of another kind is refused by both, whatever else it holds.
STRICT_SPEC = {
    "features": [
        {"key": "count", "type": "FEATURE_TYPE_INT64", "shape": "FEATURE_SHAPE_SCALAR"},
        {"key": "rgb", "type": "FEATURE_TYPE_FLOAT", "shape": "FEATURE_SHAPE_FIXED", "length": 3},
        {"key": "caption", "type": "FEATURE_TYPE_BYTES", "shape": "FEATURE_SHAPE_SCALAR"},
        {"key": "ids", "type": "FEATURE_TYPE_INT64"},
        {"key": "tags", "type": "FEATURE_TYPE_BYTES"},
    ],
}

STRICT_TF_SPEC = {
    "count": tf.io.FixedLenFeature([], tf.int64),
    "rgb": tf.io.FixedLenFeature([3], tf.float32),
    "caption": tf.io.FixedLenFeature([], tf.string),
    "ids": tf.io.VarLenFeature(tf.int64),
    "tags": tf.io.RaggedFeature(tf.string),
}

GOOD = {
    "count": lambda rng: int64s([random_int(rng)]),
    "rgb": lambda rng: floats([random_float(rng) for _ in range(3)]),
    "caption": lambda rng: bytes_([random_bytes(rng)]),
    "ids": lambda rng: int64s([random_int(rng) for _ in range(rng.integers(0, 4))]),
    "tags": lambda rng: bytes_([random_bytes(rng) for _ in range(rng.integers(0, 3))]),
}


def strict_example(rng):
    f = {key: make(rng) for key, make in GOOD.items()}
    if rng.random() < 0.6:
        key = list(GOOD)[rng.integers(len(GOOD))]
        how = rng.integers(5)
        if how == 0:
            del f[key]
        elif how == 1:
            f[key] = tf.train.Feature()
        elif how == 2:  # another kind, empty or not
            n = int(rng.integers(0, 2))
            f[key] = floats([1.0] * n) if key != "rgb" else int64s([1] * n)
        elif how == 3:  # another kind: bytes for numbers, numbers for bytes
            f[key] = int64s([1]) if key in ("caption", "tags") else bytes_([b"1"])
        else:  # another count
            n = int(rng.choice([0, 2, 4]))
            if key in ("caption", "tags"):
                f[key] = bytes_([b"x"] * n)
            elif key == "rgb":
                f[key] = floats([0.5] * n)
            else:
                f[key] = int64s([1] * n)
    return tf.train.Example(features=tf.train.Features(feature=f))


def test_refuses_exactly_the_records_tf_parse_example_refuses(probe_bin, tmp_path):
    rng = np.random.default_rng(1717)
    examples = [strict_example(rng) for _ in range(300)]
    ours = run_probe(probe_bin, tmp_path, STRICT_SPEC, examples)
    refused = 0
    for i, (example, got) in enumerate(zip(examples, ours)):
        want = tf_parse(example, STRICT_TF_SPEC)
        if isinstance(want, str):
            refused += 1
            assert isinstance(got, str), f"record {i}: TensorFlow refused it ({want}), we did not"
            continue
        assert isinstance(got, dict), f"record {i}: refused ({got}); TensorFlow read it"
        for key in STRICT_TF_SPEC:
            assert same(got[key][1], want[key]), (i, key)
    # Both kinds of record were there.
    assert 50 < refused < 250


def test_multi_hot_index_outside_its_classes_is_refused_where_tf_reads_it(probe_bin, tmp_path):
    spec = {"features": [{"key": "labels", "type": "FEATURE_TYPE_INT64",
                          "shape": "FEATURE_SHAPE_MULTI_HOT", "length": 3}]}
    examples = [tf.train.Example(features=tf.train.Features(feature={"labels": int64s(v)}))
                for v in ([0, 2], [3], [-1], [])]
    ours = run_probe(probe_bin, tmp_path, spec, examples)
    assert same(ours[0]["labels"][1], np.array([1, 0, 1], dtype=np.float32))
    assert ours[1] == ("feature 'labels' has class index 3, outside [0, 3) "
                       "(FEATURE_SHAPE_MULTI_HOT length 3)")
    assert "class index -1" in ours[2]
    # Present but empty: no class, not missing.
    assert same(ours[3]["labels"][1], np.zeros(3, dtype=np.float32))

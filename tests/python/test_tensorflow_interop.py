"""TFRecord/Example interop with TensorFlow, both ways: shards TensorFlow writes read in Sluice, and
shards Sluice writes (synth, convert; plain, GZIP, ZLIB) parse in tf.data."""
import json
import os
import struct
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

COMPRESSIONS = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}


def _example(image_bytes, label, extra_floats):
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "scores": tf.train.Feature(float_list=tf.train.FloatList(value=extra_floats)),
    }))


def _write_tf_shard(path, n, compression, seed):
    rng = np.random.default_rng(seed)
    labels = []
    options = tf.io.TFRecordOptions(compression_type=COMPRESSIONS[compression])
    with tf.io.TFRecordWriter(str(path), options) as writer:
        for i in range(n):
            h, w = int(rng.integers(20, 60)), int(rng.integers(20, 60))
            img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            jpeg = tf.io.encode_jpeg(img, quality=90).numpy()
            label = int(rng.integers(0, 5))
            labels.append(label)
            writer.write(_example(jpeg, label, [0.5, float(i)]).SerializeToString())
    return labels


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_inspect_reads_shards_tensorflow_wrote(tmp_path, run_sluice, compression):
    path = tmp_path / f"tf-{compression}.tfrecord"
    labels = _write_tf_shard(path, 37, compression, seed=len(compression))
    report = json.loads(run_sluice("inspect", "--json", path).stdout)
    assert report["records"] == 37
    assert report["corrupt"] == 0 and report["malformed"] == 0
    assert report["files"][0]["compression"] == compression
    assert report["features"] == {"image/encoded": "bytes_list",
                                  "image/class/label": "int64_list",
                                  "scores": "float_list"}
    expected = {str(k): labels.count(k) for k in set(labels)}
    assert report["labels"] == expected
    assert report["jpeg"]["count"] == 37


def test_index_of_a_tensorflow_shard_matches_its_frames(tmp_path, run_sluice):
    path = tmp_path / "tf.tfrecord"
    _write_tf_shard(path, 25, "none", seed=7)
    run_sluice("index", path)
    lines = (tmp_path / "tf.tfrecord.idx").read_text().splitlines()
    data = path.read_bytes()
    assert len(lines) == 25
    pos = 0
    for line in lines:
        offset, length = map(int, line.split())
        assert offset == pos
        (data_len,) = struct.unpack_from("<Q", data, offset)
        assert length == data_len + 16
        pos += length
    assert pos == len(data)


def _parse_ours(files, compression):
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
    }
    ds = tf.data.TFRecordDataset([str(f) for f in files],
                                 compression_type=COMPRESSIONS[compression])
    return [tf.io.parse_single_example(r, spec) for r in ds]


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_tensorflow_parses_synth_shards(tmp_path, run_sluice, compression):
    out = tmp_path / "synth"
    run_sluice("synth", "--out", out, "--images", 24, "--classes", 3, "--shards", 2,
               "--val-fraction", 0.25, "--compression", compression, "--seed", 5)
    classes = (out / "labels.txt").read_text().split()
    assert classes == ["class_000", "class_001", "class_002"]
    train = sorted(out.glob("train-*-of-00002.tfrecord"))
    val = sorted(out.glob("validation-*.tfrecord"))
    assert len(train) == 2 and len(val) == 1
    examples = _parse_ours(train + val, compression)
    assert len(examples) == 24
    counts = [0, 0, 0]
    for ex in examples:
        label = int(ex["image/class/label"])
        counts[label] += 1
        assert ex["image/class/text"].numpy().decode() == classes[label]
        assert ex["image/format"].numpy() == b"JPEG"
        img = tf.io.decode_jpeg(ex["image/encoded"], channels=0)
        assert img.shape == (int(ex["image/height"]), int(ex["image/width"]), 3)
        assert 300 <= min(img.shape[:2]) <= 500
    assert counts == [8, 8, 8]
    # Every shard's .idx describes its frames in the uncompressed stream.
    for shard in train + val:
        entries = [tuple(map(int, l.split())) for l in open(f"{shard}.idx")]
        assert entries[0][0] == 0
        assert all(a[0] + a[1] == b[0] for a, b in zip(entries, entries[1:]))


def test_tensorflow_parses_converted_image_folder(tmp_path, run_sluice):
    src = tmp_path / "images"
    rng = np.random.default_rng(3)
    for cls in ["cat", "dog"]:
        (src / cls).mkdir(parents=True)
        for i in range(3):
            img = rng.integers(0, 256, size=(32, 48, 3), dtype=np.uint8)
            (src / cls / f"{i}.jpg").write_bytes(tf.io.encode_jpeg(img).numpy())
    gray = rng.integers(0, 256, size=(40, 30, 1), dtype=np.uint8)
    (src / "dog" / "gray.jpg").write_bytes(tf.io.encode_jpeg(gray).numpy())
    (src / "dog" / "icon.png").write_bytes(tf.io.encode_png(gray).numpy())

    out = tmp_path / "out"
    proc = run_sluice("convert", "--from", src, "--out", out, "--shards", 2)
    assert "skipped" not in proc.stderr
    examples = _parse_ours(sorted(out.glob("train-*.tfrecord")), "none")
    assert len(examples) == 8
    names = {ex["image/filename"].numpy().decode(): ex for ex in examples}
    assert set(names) == {"cat/0.jpg", "cat/1.jpg", "cat/2.jpg", "dog/0.jpg", "dog/1.jpg",
                          "dog/2.jpg", "dog/gray.jpg", "dog/icon.png"}
    # The PNG is stored as it was, its format and size said.
    icon = names["dog/icon.png"]
    assert icon["image/format"].numpy() == b"PNG"
    assert (int(icon["image/height"]), int(icon["image/width"])) == (40, 30)
    np.testing.assert_array_equal(tf.io.decode_png(icon["image/encoded"]).numpy(), gray)
    assert names["dog/0.jpg"]["image/format"].numpy() == b"JPEG"
    # The grayscale JPEG was re-encoded as RGB: it decodes with 3 channels as stored.
    gray_img = tf.io.decode_jpeg(names["dog/gray.jpg"]["image/encoded"], channels=0)
    assert gray_img.shape == (40, 30, 3)
    assert int(names["dog/gray.jpg"]["image/class/label"]) == 1
    assert (out / "labels.txt").read_text() == "cat\ndog\n"

    # --png jpeg: the PNG re-encoded as RGB JPEG, for readers that call decode_jpeg.
    out_jpeg = tmp_path / "out_jpeg"
    run_sluice("convert", "--from", src, "--out", out_jpeg, "--shards", 1, "--png", "jpeg")
    icon = {ex["image/filename"].numpy().decode(): ex
            for ex in _parse_ours(sorted(out_jpeg.glob("train-*.tfrecord")), "none")}["dog/icon.png"]
    assert icon["image/format"].numpy() == b"JPEG"
    rgb = tf.io.decode_jpeg(icon["image/encoded"], channels=0).numpy()
    assert rgb.shape == (40, 30, 3)
    assert np.abs(rgb.astype(int) - np.repeat(gray, 3, -1)).mean() < 8  # quality 95, noise
    crop = tf.image.decode_and_crop_jpeg(icon["image/encoded"], [4, 2, 8, 10], channels=3)
    np.testing.assert_array_equal(crop.numpy(), rgb[4:12, 2:12])


# Real TensorFlow files whose Examples lack Sluice's default keys: an object-detection shard
# (labels per box, under image/object/class/label), MNIST as tensorflow_datasets writes it
# (image, label) and the TFX penguin example (numeric columns, no image).
def _detection_example(rng):
    img = rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[tf.io.encode_jpeg(img).numpy()])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpeg"])),
        "image/object/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 3])),
        "image/object/bbox/xmin": tf.train.Feature(float_list=tf.train.FloatList(value=[.1, .5])),
        "image/object/bbox/xmax": tf.train.Feature(float_list=tf.train.FloatList(value=[.4, .9])),
    }))


def _mnist_example(rng):
    img = rng.integers(0, 256, size=(28, 28, 1), dtype=np.uint8)
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[tf.io.encode_png(img).numpy()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(10))])),
    }))


def _penguin_example(rng):
    floats = lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
    return tf.train.Example(features=tf.train.Features(feature={
        "species": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(3))])),
        "culmen_length_mm": floats(float(rng.uniform(30, 60))),
        "flipper_length_mm": floats(float(rng.uniform(170, 230))),
        "body_mass_g": floats(float(rng.uniform(2700, 6300))),
    }))


def _serve(sluice_bin, tmp_path, files):
    conf = tmp_path / "sluice.textproto"
    conf.write_text(f'listen: "127.0.0.1:0"\ndatasets {{ name: "d" pipeline {{ files: "{files}" '
                    f'batch_size: 4 image_height: 32 epochs: 1 threads: 1 }} }}\n')
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sluice_bin, "serve", "--config", str(conf)], stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        text = (tmp_path / "serve.log").read_text()
        if "listening on 127.0.0.1:" in text:
            return proc, "127.0.0.1:" + text.split("listening on 127.0.0.1:")[1].split()[0]
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("sluice serve did not start:\n" + (tmp_path / "serve.log").read_text())


@pytest.mark.parametrize("kind,missing,keys", [
    ("detection", "image/class/label", ["image/object/class/label", "image/object/bbox/xmin"]),
    ("mnist", "image/encoded", ["image", "label"]),
    ("penguin", "image/encoded", ["species", "culmen_length_mm"]),
])
def test_serving_examples_without_the_keys_fails_naming_the_keys_they_hold(
        tmp_path, sluice_bin, run_sluice, kind, missing, keys):
    make = {"detection": _detection_example, "mnist": _mnist_example,
            "penguin": _penguin_example}[kind]
    rng = np.random.default_rng(5)
    with tf.io.TFRecordWriter(str(tmp_path / f"{kind}.tfrecord")) as writer:
        for _ in range(12):
            writer.write(make(rng).SerializeToString())
    proc, address = _serve(sluice_bin, tmp_path, tmp_path / "*.tfrecord")
    try:
        out = run_sluice("profile", "--target", address, "--dataset", "d", "--batches", 2,
                         check=False)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert out.returncode == 1
    assert "no record of epoch 0 could be used (all 12 skipped): 12x feature " \
           f"'{missing}' missing from record" in out.stderr, out.stderr
    for key in keys:
        assert key in out.stderr, out.stderr
    log = (tmp_path / "serve.log").read_text()
    assert "WARNING: dataset 'd', job 'private-" in log and "skipped 12 of 12 records" in log

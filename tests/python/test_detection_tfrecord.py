"""A detection data set as TensorFlow writes it, through a real `sluice serve`, to the Python client
and the tf.data adapter: TensorFlow writes the TFRecord with the Object Detection API's keys
(image/encoded from tf.io.encode_jpeg, image/object/bbox/{xmin,ymin,xmax,ymax},
image/object/class/label), an image label, a multi-label list and a caption. Every sample's
features come back with it: under an EVAL list (resize + center crop, and the same with a flip of
p=1) each box equals the transform computed here from torchvision's crop arithmetic, the sample
mapped back to its record by its record id; under TRAIN every box lies in [0, 1] with its label,
no more boxes than the record had; an unlabeled dataset's batches carry no labels."""
import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import sluice  # noqa: E402
import sluice.tf  # noqa: E402
from detection_support import (CLASSES, OUT, RECORDS, DetectionServer,  # noqa: E402
                               expected_boxes)


def _example(r):
    (h, w), boxes = RECORDS[r]
    rng = np.random.default_rng(r)
    pixels = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(pixels, quality=90).numpy()
    coords = np.array([b for b, _ in boxes], dtype=np.float32).reshape(-1, 4)

    def floats(v):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(v)))

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))

    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
        "image/class/label": ints([r % 3]),
        "image/labels": ints(sorted({r % CLASSES, (r * 2) % CLASSES})),
        "image/caption": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[("record %d" % r).encode() * (r % 2)])),
        "image/object/bbox/xmin": floats(coords[:, 0]),
        "image/object/bbox/ymin": floats(coords[:, 1]),
        "image/object/bbox/xmax": floats(coords[:, 2]),
        "image/object/bbox/ymax": floats(coords[:, 3]),
        "image/object/class/label": ints([c for _, c in boxes]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module")
def detection(sluice_bin, tmp_path_factory):
    data = tmp_path_factory.mktemp("detection-data")
    with tf.io.TFRecordWriter(str(data / "detection.tfrecord")) as w:
        for r in range(len(RECORDS)):
            w.write(_example(r))
    s = DetectionServer(sluice_bin, tmp_path_factory.mktemp("detection-serve"), data)
    yield s
    s.stop()


def _check_eval_sample(r, labels, caption, boxes, box_labels, flip):
    expected, expected_labels = expected_boxes(r, flip)
    np.testing.assert_allclose(boxes, expected, atol=1e-4, err_msg="record %d" % r)
    assert list(box_labels) == expected_labels
    hot = np.zeros(CLASSES, np.float32)
    hot[sorted({r % CLASSES, (r * 2) % CLASSES})] = 1
    np.testing.assert_array_equal(labels, hot)
    assert caption == ("record %d" % r).encode() * (r % 2)


@pytest.mark.parametrize("transform_set,flip", [(None, False), ("flip", True)])
def test_eval_boxes_follow_the_crop_and_flip_for_every_record(detection, transform_set, flip):
    with sluice.Client(detection.target) as c:
        plan = c.describe("det", transform_set=transform_set)
        assert [f.name for f in plan.features] == ["labels", "caption", "boxes", "box_labels"]
        assert not plan.unlabeled
        seen = []
        for batch in c.stream("det", record_ids=True, transform_set=transform_set):
            f = batch.features
            assert isinstance(f["boxes"], sluice.Ragged)
            assert f["labels"].shape == (len(batch.images), CLASSES)
            for i, (_, r) in enumerate(batch.record_ids):
                seen.append(int(r))
                assert batch.labels[i] == r % 3
                _check_eval_sample(int(r), f["labels"][i], f["caption"][i], f["boxes"][i],
                                   f["box_labels"][i], flip)
    assert sorted(seen) == list(range(len(RECORDS)))


def test_the_tf_dataset_carries_the_same_features_typed_from_the_plan(detection):
    ds = sluice.tf.dataset(detection.target, "det", transform_set="flip", record_ids=True)
    images_spec, labels_spec, features_spec, ids_spec = ds.element_spec
    assert isinstance(features_spec["boxes"], tf.RaggedTensorSpec)
    assert features_spec["caption"].dtype == tf.string
    seen = []
    for images, labels, features, ids in ds:
        boxes, box_labels = features["boxes"], features["box_labels"]
        assert isinstance(boxes, tf.RaggedTensor)
        for i, r in enumerate(ids.numpy()[:, 1]):
            seen.append(int(r))
            _check_eval_sample(int(r), features["labels"][i].numpy(),
                               features["caption"][i].numpy(), boxes[i].numpy().reshape(-1, 4),
                               box_labels[i].numpy(), flip=True)
    assert sorted(seen) == list(range(len(RECORDS)))


def test_train_boxes_stay_in_the_image_with_their_labels(detection):
    with sluice.Client(detection.target) as c:
        batches = 0
        for batch in c.stream("det_train", record_ids=True, epochs=3):
            batches += 1
            boxes, box_labels = batch.features["boxes"], batch.features["box_labels"]
            np.testing.assert_array_equal(boxes.row_lengths, box_labels.row_lengths)
            for i, (_, r) in enumerate(batch.record_ids):
                b = boxes[i]
                original = collections.Counter(c for _, c in RECORDS[int(r)][1])
                assert len(b) <= sum(original.values())
                assert not collections.Counter(box_labels[i].tolist()) - original
                assert ((b >= 0) & (b <= 1)).all()
                assert (b[:, 0] <= b[:, 2]).all() and (b[:, 1] <= b[:, 3]).all()
        assert batches > 0


def test_an_unlabeled_dataset_has_no_labels_in_the_client_or_the_tf_element(detection):
    with sluice.Client(detection.target) as c:
        assert c.describe("det_unlabeled").unlabeled
        captions = {}
        for batch in c.stream("det_unlabeled", record_ids=True):
            assert batch.labels is None
            for i, (_, r) in enumerate(batch.record_ids):
                captions[int(r)] = batch.features["caption"][i]
    assert captions == {r: ("record %d" % r).encode() * (r % 2) for r in range(len(RECORDS))}
    ds = sluice.tf.dataset(detection.target, "det_unlabeled")
    assert len(ds.element_spec) == 2
    images, features = next(iter(ds))
    assert images.shape[1:] == (OUT, OUT, 3)
    assert features["caption"].dtype == tf.string

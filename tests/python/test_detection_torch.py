"""The detection data set (detection_support.py) through sluice.torch's SluiceDataset in a
DataLoader with a worker process: the features dict follows the labels, boxes as a
RaggedTensor(values, row_lengths) whose split gives each image's boxes, equal to torchvision's
crop arithmetic for every record (mapped back by its record id); an unlabeled dataset's labels
are None."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

import sluice.torch
from detection_support import (CLASSES, RECORDS, DetectionServer, example_bytes,
                               expected_boxes, write_tfrecord)


@pytest.fixture(scope="module")
def detection(sluice_bin, tmp_path_factory):
    data = tmp_path_factory.mktemp("detection-torch-data")
    records = []
    for r, ((h, w), _) in enumerate(RECORDS):
        pixels = np.random.default_rng(r).integers(0, 255, size=(h, w, 3), dtype=np.uint8)
        jpeg = io.BytesIO()
        Image.fromarray(pixels).save(jpeg, format="JPEG", quality=90)
        records.append(example_bytes(r, jpeg.getvalue()))
    write_tfrecord(data / "detection.tfrecord", records)
    s = DetectionServer(sluice_bin, tmp_path_factory.mktemp("detection-torch-serve"), data)
    yield s
    s.stop()


def test_a_dataloader_worker_yields_every_records_features_as_tensors(detection):
    ds = sluice.torch.SluiceDataset(detection.target, "det", transform_set="flip",
                                    record_ids=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn")
    seen = []
    for images, labels, features, record_ids in loader:
        boxes = features["boxes"]
        assert isinstance(boxes, sluice.torch.RaggedTensor)
        assert features["labels"].dtype == torch.float32
        per_image = torch.split(boxes.values, boxes.row_lengths.tolist())
        box_labels = torch.split(features["box_labels"].values,
                                 features["box_labels"].row_lengths.tolist())
        for i, r in enumerate(record_ids[:, 1].tolist()):
            seen.append(r)
            assert labels[i].item() == r % 3
            expected, expected_labels = expected_boxes(r, flip=True)
            np.testing.assert_allclose(per_image[i].numpy(), expected, atol=1e-4)
            assert box_labels[i].tolist() == expected_labels
            hot = torch.zeros(CLASSES)
            hot[sorted({r % CLASSES, (r * 2) % CLASSES})] = 1
            assert torch.equal(features["labels"][i], hot)
            assert features["caption"][i] == ("record %d" % r).encode() * (r % 2)
    assert sorted(seen) == list(range(len(RECORDS)))


def test_an_unlabeled_dataset_yields_labels_none(detection):
    ds = sluice.torch.SluiceDataset(detection.target, "det_unlabeled")
    count = 0
    for images, labels, features in ds:
        assert labels is None
        assert len(features["caption"]) == images.shape[0]
        count += images.shape[0]
    assert count == len(RECORDS)

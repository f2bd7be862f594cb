"""sluice.tf's form of Batch.features, without a server: the element's dict (tf.RaggedTensor
from row lengths, dense tensors, tf.string) matches the output signature made from the plan's
FeatureInfo, through tf.data.Dataset.from_generator as dataset() builds it."""
import numpy as np
import tensorflow as tf

import sluice
from sluice.tf import feature_tensors, output_signature
from sluice.v1 import service_pb2
from test_features_wire import _every_kind, _message

INFOS = [service_pb2.FeatureInfo(name=f.name, type=f.type, ragged=bool(f.row_lengths),
                                 row_shape=list(f.row_shape)) for f in _every_kind()]


def test_features_match_the_signature_through_from_generator():
    batch, _ = sluice.decode_batch(_message(3, _every_kind()))
    spec = output_signature((2, 3), features=INFOS)
    assert len(spec) == 3 and set(spec[2]) == {i.name for i in INFOS}

    def gen():
        yield (batch.images, batch.labels, feature_tensors(batch.features, INFOS))

    (images, labels, features), = list(tf.data.Dataset.from_generator(
        gen, output_signature=spec))
    assert features["id"].numpy().tolist() == [-5, 0, 9]
    assert features["embedding"].shape == (3, 3)
    assert features["caption"].numpy().tolist() == [b"a cat", b"", b"\x00\xff"]
    assert features["pair"].numpy().tolist() == [[b"x", b""], [b"", b""], [b"yy", b"z"]]
    boxes = features["boxes"]
    assert isinstance(boxes, tf.RaggedTensor)
    assert boxes.row_lengths().numpy().tolist() == [1, 0, 2]
    np.testing.assert_allclose(boxes[2].numpy(), [[0, 0, 1, 1], [.25, .5, .75, 1]])
    assert features["words"].to_list() == [[b"", b"dog"], [], [b"hen"]]
    assert features["tags"].to_list() == [[1, 2, 1 << 40], [], [4]]


def test_an_unlabeled_signature_has_no_labels_and_empty_batches_fit_it():
    spec = output_signature((2, 3), features=INFOS, unlabeled=True, with_valid=True)
    assert len(spec) == 3 and isinstance(spec[1], dict)
    batch, _ = sluice.decode_batch(_message(0, [
        service_pb2.FeatureArray(name=f.name, type=f.type, row_shape=list(f.row_shape))
        for f in _every_kind()], labels=False))

    def gen():
        yield (batch.images, feature_tensors(batch.features, INFOS), np.ones(0, np.bool_))

    (images, features, valid), = list(tf.data.Dataset.from_generator(gen, output_signature=spec))
    assert images.shape[0] == 0 and features["boxes"].nrows() == 0

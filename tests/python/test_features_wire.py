"""Batch.features and unlabeled batches through decode_batch, from hand-serialized
sluice.v1.Batch messages (no server): every type and shape, empty rows and empty bytes, the
padding batch's empty features, Batch's tuple, pickle and _replace with features, and each
malformed FeatureArray as DATA_LOSS naming the feature."""
import pickle

import grpc
import numpy as np
import pytest

import sluice
from sluice import _wire
from sluice.v1 import service_pb2


def _array(name, type_, row_shape=(), row_lengths=(), values=b"", value_lengths=()):
    f = service_pb2.FeatureArray(name=name, type=type_, row_shape=list(row_shape),
                                 row_lengths=list(row_lengths), values=values,
                                 value_lengths=list(value_lengths))
    return f


INT64, FLOAT, BYTES = 1, 2, 3


def _message(n, features, labels=True, shape=(2, 3)):
    h, w = shape
    b = service_pb2.Batch(shape=[n, h, w, 3], images=bytes(n * h * w * 3))
    b.position.epoch, b.position.index, b.position.end_record = 1, 2, 3
    if labels:
        b.labels.extend(range(n))
    b.features.extend(features)
    return b.SerializeToString()


def _every_kind():
    """Three samples of every type and shape a dataset's schema makes."""
    return [
        _array("id", INT64, values=np.array([-5, 0, 9], "<i8").tobytes()),
        _array("embedding", FLOAT, [3], values=np.arange(9, dtype="<f4").tobytes()),
        _array("caption", BYTES, values=b"a cat\x00\xff", value_lengths=[5, 0, 2]),
        _array("pair", BYTES, [2], values=b"xyyz", value_lengths=[1, 0, 0, 0, 2, 1]),
        _array("tags", INT64, row_lengths=[3, 0, 1],
               values=np.array([1, 2, 1 << 40, 4], "<i8").tobytes()),
        _array("words", BYTES, row_lengths=[2, 0, 1], values=b"doghen", value_lengths=[0, 3, 3]),
        _array("boxes", FLOAT, [4], row_lengths=[1, 0, 2],
               values=np.array([.1, .2, .3, .4, 0, 0, 1, 1, .25, .5, .75, 1], "<f4").tobytes()),
        _array("box_labels", INT64, row_lengths=[1, 0, 2],
               values=np.array([7, 1, 2], "<i8").tobytes()),
    ]


def test_every_feature_type_and_shape_decodes_with_empty_rows_and_empty_bytes():
    batch, _ = sluice.decode_batch(_message(3, _every_kind()))
    f = batch.features
    assert list(f) == ["id", "embedding", "caption", "pair", "tags", "words", "boxes",
                       "box_labels"]
    assert f["id"].dtype == np.int64 and f["id"].tolist() == [-5, 0, 9]
    assert f["embedding"].dtype == np.float32 and f["embedding"].shape == (3, 3)
    assert f["embedding"][2].tolist() == [6, 7, 8]
    assert f["caption"] == [b"a cat", b"", b"\x00\xff"]
    assert f["pair"] == [[b"x", b""], [b"", b""], [b"yy", b"z"]]
    tags = f["tags"]
    assert isinstance(tags, sluice.Ragged) and len(tags) == 3
    assert tags.row_lengths.tolist() == [3, 0, 1]
    assert tags.row_splits.tolist() == [0, 3, 3, 4]
    assert tags[0].tolist() == [1, 2, 1 << 40] and tags[1].tolist() == [] and tags[-1].tolist() == [4]
    assert tags.to_list() == [[1, 2, 1 << 40], [], [4]]
    assert f["words"].values == [b"", b"dog", b"hen"]
    assert f["words"].to_list() == [[b"", b"dog"], [], [b"hen"]]
    boxes = f["boxes"]
    assert boxes.values.shape == (3, 4) and boxes.values.dtype == np.float32
    assert boxes[1].shape == (0, 4)
    np.testing.assert_array_equal(boxes[2], np.array([[0, 0, 1, 1], [.25, .5, .75, 1]], "f4"))
    assert f["box_labels"].to_list() == [[7], [], [1, 2]]
    with pytest.raises(IndexError):
        tags[3]


def test_an_unlabeled_batch_has_labels_none_and_a_labeled_one_keeps_its_labels():
    unlabeled, _ = sluice.decode_batch(_message(3, _every_kind(), labels=False))
    assert unlabeled.labels is None
    images, labels, position = unlabeled
    assert labels is None and images.shape == (3, 2, 3, 3)
    with pytest.raises(ValueError, match="unlabeled"):
        unlabeled.soft_labels(4)
    labeled, _ = sluice.decode_batch(_message(3, []))
    assert labeled.labels.tolist() == [0, 1, 2]
    assert labeled.features == {}


def test_features_survive_pickle_replace_and_stay_out_of_the_tuple():
    batch, _ = sluice.decode_batch(_message(3, _every_kind(), labels=False))
    assert len(batch) == 3
    again = pickle.loads(pickle.dumps(batch))
    assert again.labels is None
    assert again.features["tags"] == batch.features["tags"]
    np.testing.assert_array_equal(again.features["embedding"], batch.features["embedding"])
    assert again.features["caption"] == batch.features["caption"]
    replaced = batch._replace(images=np.array(batch.images))
    assert replaced.features is batch.features
    # A tuple made without features has none.
    assert sluice.Batch._make(tuple(batch)).features == {}


def test_a_padding_batch_has_empty_rows_and_zero_fixed_features():
    infos = [service_pb2.FeatureInfo(name="boxes", type=FLOAT, ragged=True, row_shape=[4]),
             service_pb2.FeatureInfo(name="words", type=BYTES, ragged=True),
             service_pb2.FeatureInfo(name="emb", type=FLOAT, row_shape=[2]),
             service_pb2.FeatureInfo(name="cap", type=BYTES),
             service_pb2.FeatureInfo(name="pair", type=BYTES, row_shape=[2])]
    got = {i.name: _wire.empty_feature(i, 2) for i in infos}
    assert got["boxes"].values.shape == (0, 4) and got["boxes"].to_list() == [[], []]
    assert got["words"].to_list() == [[], []]
    assert got["emb"].tolist() == [[0, 0], [0, 0]]
    assert got["cap"] == [b"", b""]
    assert got["pair"] == [[b"", b""], [b"", b""]]


def test_a_batch_of_zero_samples_has_every_feature_empty():
    features = [_array("id", INT64), _array("cap", BYTES), _array("boxes", FLOAT, [4])]
    batch, _ = sluice.decode_batch(_message(0, features))
    assert batch.features["id"].shape == (0,)
    assert batch.features["cap"] == []
    assert batch.features["boxes"].shape == (0, 4)


def test_a_batch_of_zero_samples_has_its_plans_ragged_features_as_ragged():
    # No row_lengths with 0 samples: without the plan "tags" reads as a plain [0] array.
    features = [_array("tags", INT64), _array("words", BYTES), _array("boxes", FLOAT, [4]),
                _array("id", INT64)]
    plan = service_pb2.StreamPlan(features=[
        service_pb2.FeatureInfo(name="tags", type=INT64, ragged=True),
        service_pb2.FeatureInfo(name="words", type=BYTES, ragged=True),
        service_pb2.FeatureInfo(name="boxes", type=FLOAT, ragged=True, row_shape=[4]),
        service_pb2.FeatureInfo(name="id", type=INT64)])
    batch, _ = sluice.decode_batch(_message(0, features), plan=plan)
    for name in ("tags", "words", "boxes"):
        assert isinstance(batch.features[name], sluice.Ragged), name
        assert len(batch.features[name]) == 0
    assert batch.features["boxes"].values.shape == (0, 4)
    assert batch.features["words"].values == []
    assert isinstance(batch.features["id"], np.ndarray)
    plain, _ = sluice.decode_batch(_message(0, features))
    assert not isinstance(plain.features["tags"], sluice.Ragged)


@pytest.mark.parametrize("feature,n,expected", [
    (_array("t", 0), 1, "feature 't': type 0 is not a known FeatureType"),
    (_array("t", 9), 1, "feature 't': type 9 is not a known FeatureType"),
    (_array("emb", FLOAT, [-3]), 1, "feature 'emb': row_shape[0] is -3"),
    (_array("tags", INT64, row_lengths=[1, -1, 1], values=bytes(8)), 3,
     "feature 'tags': row_lengths[1] is -1"),
    (_array("tags", INT64, row_lengths=[1, 1], values=bytes(16)), 3,
     "feature 'tags': row_lengths holds 2 values for 3 samples"),
    (_array("id", INT64, values=bytes(16)), 3,
     "feature 'id': values holds 16 bytes, 3 rows of 1 int64 values need 24"),
    (_array("emb", FLOAT, [2], values=bytes(9)), 1,
     "feature 'emb': values holds 9 bytes, 1 rows of 2 float values need 8"),
    (_array("id", INT64, values=bytes(8), value_lengths=[8]), 1,
     "feature 'id': value_lengths on a int64 array"),
    (_array("cap", BYTES, values=b"abc", value_lengths=[1, 1]), 2,
     "feature 'cap': value_lengths add up to 2 bytes, values holds 3"),
    (_array("cap", BYTES, values=b"abc", value_lengths=[3]), 2,
     "feature 'cap': value_lengths holds 1 values for 2 rows of 1 bytes values"),
    (_array("cap", BYTES, values=b"abc", value_lengths=[4, -1]), 2,
     "feature 'cap': value_lengths[1] is -1"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_malformed_features_are_data_loss_naming_the_feature(feature, n, expected):
    with pytest.raises(sluice.SluiceError) as e:
        sluice.decode_batch(_message(n, [feature]))
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert expected in str(e.value)


@pytest.mark.parametrize("feature,n,expected", [
    # 0 values passed every count check, then 2^31 - 1 empty rows were built (hang, MemoryError).
    (_array("cap", BYTES, [0], row_lengths=[2147483647]), 1,
     "feature 'cap': row_shape[0] is 0, outside [1, 65536]"),
    # numpy's "array is too big" ValueError instead of DATA_LOSS.
    (_array("emb", FLOAT, [0, 1 << 30, 1 << 30, 1 << 30]), 2,
     "feature 'emb': row_shape[0] is 0, outside [1, 65536]"),
    (_array("emb", FLOAT, [1 << 30, 1 << 30, 1 << 30, 0]), 2,
     "feature 'emb': row_shape[0] is 1073741824, outside [1, 65536]"),
    (_array("emb", INT64, [65537], row_lengths=[0]), 1, "feature 'emb': row_shape[0] is 65537"),
    (_array("emb", INT64, [1] * 5, values=bytes(8)), 1,
     "feature 'emb': row_shape has 5 dimensions, over 4"),
    (_array("emb", INT64, [65536] * 4, row_lengths=[0]), 1,
     "feature 'emb': row_shape holds over 2147483647 values a row"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_row_shapes_outside_the_schemas_bounds_are_data_loss(feature, n, expected):
    with pytest.raises(sluice.SluiceError) as e:
        sluice.decode_batch(_message(n, [feature]))
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert expected in str(e.value)


def test_the_row_shape_bounds_themselves_decode():
    batch, _ = sluice.decode_batch(_message(1, [_array("emb", INT64, [65536, 32767, 1, 1],
                                                       row_lengths=[0])]))
    assert batch.features["emb"].values.shape == (0, 65536, 32767, 1, 1)


def test_more_features_than_a_schema_holds_are_data_loss_as_they_are_read():
    many = [_array("f%d" % k, INT64) for k in range(_wire.MAX_FEATURE_ARRAYS + 1)]
    with pytest.raises(sluice.SluiceError) as e:
        sluice.decode_batch(_message(0, many))
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert "features: over 4096 arrays" in str(e.value)
    batch, _ = sluice.decode_batch(_message(0, many[:-1]))
    assert len(batch.features) == 4096


def test_labels_of_another_count_and_mixed_labels_without_labels_are_data_loss():
    b = service_pb2.Batch.FromString(_message(3, []))
    del b.labels[:]
    b.labels.append(1)
    with pytest.raises(sluice.SluiceError, match="1 labels for 3 images"):
        sluice.decode_batch(b.SerializeToString())
    del b.labels[:]
    b.mixed_labels.extend([0, 1, 2])
    b.label_weights.extend([1, 1, 1])
    with pytest.raises(sluice.SluiceError, match="mixed_labels without labels"):
        sluice.decode_batch(b.SerializeToString())

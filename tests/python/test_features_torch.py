"""sluice.torch's form of Batch.features, without a server: tensors for fixed arrays, a
RaggedTensor(values, row_lengths) for ragged ones whose split gives each sample's rows, bytes as
Python bytes; and that the dict crosses a DataLoader worker's pickling intact."""
import pickle

import numpy as np
import torch

import sluice
from sluice.torch import RaggedTensor, features_tensors
from test_features_wire import _every_kind, _message


def test_features_become_tensors_ragged_pairs_and_bytes():
    batch, _ = sluice.decode_batch(_message(3, _every_kind()))
    got = features_tensors(batch.features)
    assert got["id"].dtype == torch.int64 and got["id"].tolist() == [-5, 0, 9]
    assert got["embedding"].dtype == torch.float32 and tuple(got["embedding"].shape) == (3, 3)
    assert got["caption"] == [b"a cat", b"", b"\x00\xff"]
    boxes = got["boxes"]
    assert isinstance(boxes, RaggedTensor)
    assert boxes.row_lengths.dtype == torch.int64 and boxes.row_lengths.tolist() == [1, 0, 2]
    per_image = torch.split(boxes.values, boxes.row_lengths.tolist())
    assert [tuple(b.shape) for b in per_image] == [(1, 4), (0, 4), (2, 4)]
    assert torch.equal(per_image[2], torch.tensor([[0, 0, 1, 1], [.25, .5, .75, 1]]))
    assert got["words"].values == [b"", b"dog", b"hen"]
    values, row_lengths = got["box_labels"]
    assert values.tolist() == [7, 1, 2] and row_lengths.tolist() == [1, 0, 2]


def test_feature_tensors_survive_pickling_between_processes():
    batch, _ = sluice.decode_batch(_message(3, _every_kind()))
    got = pickle.loads(pickle.dumps(features_tensors(batch.features)))
    assert isinstance(got["tags"], RaggedTensor)
    assert got["tags"].values.tolist() == [1, 2, 1 << 40, 4]
    assert got["pair"] == [[b"x", b""], [b"", b""], [b"yy", b"z"]]
    assert torch.equal(got["embedding"], torch.from_numpy(np.arange(9, dtype="f4").reshape(3, 3)))

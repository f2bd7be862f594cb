"""The Python client's PyTorch and tf.data adapters against a real `sluice serve` (the fixtures in
client_support.py), and the `sluice` package importing without either framework.

Torch tests have "torch" in their names: ctest runs them in build/venv-torch (Debian's PyTorch) and
the rest in build/venv (TensorFlow); in a venv without torch or TensorFlow those tests skip. So
this file's name must not contain "torch": `-k` matches module names too.
"""
import hashlib
import subprocess
import sys

import numpy as np
import pytest

import sluice
from client_support import IMAGES


# --- PyTorch ------------------------------------------------------------------------------------

def test_torch_dataset_feeds_a_model_through_optimizer_steps(server):
    torch = pytest.importorskip("torch")
    import sluice.torch
    torch.manual_seed(0)
    ds = sluice.torch.SluiceDataset(server.target, "train", batch_size=32, image_size=32, seed=5)
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(8, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for step, (images, labels) in enumerate(loader):
        assert images.shape == (32, 32, 32, 3) and images.dtype == torch.uint8
        assert labels.shape == (32,) and labels.dtype == torch.int64
        x = images.permute(0, 3, 1, 2).float() / 255
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step == 4:
            break
    assert len(losses) == 5 and all(np.isfinite(losses))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_torch_dataset_over_shared_memory_gives_the_socket_streams_tensors(server, client):
    torch = pytest.importorskip("torch")
    import sluice.torch
    args = dict(batch_size=16, image_size=32, seed=9, epochs=1)
    socket = [(images.clone(), labels.clone()) for images, labels in
              torch.utils.data.DataLoader(sluice.torch.SluiceDataset(server.target, "train",
                                                                     **args), batch_size=None)]
    shared = torch.utils.data.DataLoader(
        sluice.torch.SluiceDataset(server.target, "train", shared_memory=True, **args),
        batch_size=None)
    got = 0
    for (images, labels), (want_images, want_labels) in zip(shared, socket):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
        if got == 0:  # the dataset did not fall back to the socket
            assert client.stats().shared_memory_streams == 1
        got += 1
    assert got == len(socket) == -(-IMAGES // 16)


def test_torch_dataloader_workers_take_disjoint_shards(server):
    torch = pytest.importorskip("torch")
    import sluice.torch
    ds = sluice.torch.SluiceDataset(server.target, "ordered", prefetch=1)
    # Spawned workers: this process has gRPC threads running (the other tests' streams), and
    # gRPC does not support fork() then.
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    seen = [hashlib.sha1(image.numpy()).hexdigest() for images, _ in loader for image in images]
    with sluice.Client(server.target) as c:
        whole = [hashlib.sha1(image).hexdigest() for b in c.stream("ordered") for image in b.images]
    assert len(seen) == IMAGES and sorted(seen) == sorted(whole)


def test_torch_tensors_share_the_message_or_copy_when_asked():
    torch = pytest.importorskip("torch")
    import warnings
    from sluice.torch import _images_tensor
    message = bytes(range(256)) * 3
    images = np.frombuffer(message, dtype=np.uint8).reshape(4, 8, 8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the read-only warning is expected and silenced
        shared = _images_tensor(images, writable=False)
    assert shared.data_ptr() == images.__array_interface__["data"][0]
    copied = _images_tensor(images, writable=True)
    assert copied.data_ptr() != shared.data_ptr() and torch.equal(copied, shared)
    copied += 1  # its own memory: the message is untouched
    assert images.tobytes() == message


def test_torch_worker_shards_compose_with_the_ranks_shard():
    pytest.importorskip("torch")
    from sluice.torch import worker_shard
    assert worker_shard(None, 1, 1) is None
    assert worker_shard(None, 1, 4) == (1, 4)
    # Rank 1 of 2 with 3 workers: shards 3, 4, 5 of 6; rank 0 has 0, 1, 2.
    assert [worker_shard((1, 2), w, 3) for w in range(3)] == [(3, 6), (4, 6), (5, 6)]


# --- tf.data ------------------------------------------------------------------------------------

def test_tf_dataset_has_the_declared_signature_and_feeds_keras_fit(server):
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    ds = sluice.tf.dataset(server.target, "train", batch_size=16, image_size=32, seed=3)
    assert ds.element_spec == (tf.TensorSpec((None, 32, 32, 3), tf.uint8),
                               tf.TensorSpec((None,), tf.int32))
    images, labels = next(iter(ds))
    assert images.shape == (16, 32, 32, 3) and images.dtype == tf.uint8
    assert labels.shape == (16,) and labels.dtype == tf.int32
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((32, 32, 3)),
                                 tf.keras.layers.Rescaling(1 / 255),
                                 tf.keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                                 tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, steps_per_epoch=4, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_tf_dataset_surfaces_the_servers_error(server):
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    ds = sluice.tf.dataset(server.target, "imagenet", batch_size=16, image_size=32)
    with pytest.raises(tf.errors.OpError, match="no dataset 'imagenet'"):
        next(iter(ds))


def test_package_imports_without_the_frameworks(tmp_path):
    # A fresh interpreter: importing sluice must not pull in either framework.
    code = ("import sys, sluice; "
            "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=60)

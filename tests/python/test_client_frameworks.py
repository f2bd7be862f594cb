"""The Python client's PyTorch and tf.data adapters against a real `sluice serve` (the fixtures in
client_support.py), and the `sluice` package importing without either framework.

Torch tests have "torch" in their names: ctest runs them in build/venv-torch (Debian's PyTorch) and
the rest in build/venv (TensorFlow); in a venv without torch or TensorFlow those tests skip. So
this file's name must not contain "torch": `-k` matches module names too.
"""
import gc
import hashlib
import subprocess
import sys

import numpy as np
import pytest

import sluice
from client_support import IMAGES, SIZE, pooling_model


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
              torch.utils.data.DataLoader(sluice.torch.SluiceDataset(
                  server.target, "train", shared_memory=False, **args), batch_size=None)]
    # By default, without workers: shared memory, each batch copied out of its slot at once, so
    # the caller may keep every tensor (more than max_held).
    kept, shared_streams = [], 0
    for images, labels in sluice.torch.SluiceDataset(server.target, "train", **args):
        shared_streams = max(shared_streams, client.stats().shared_memory_streams)
        kept.append((images, labels))
    assert shared_streams == 1 and len(kept) > 4
    assert all(torch.equal(a, b) and torch.equal(c, d) for (a, c), (b, d) in zip(kept, socket))
    del kept
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
    # "ordered" is an eval dataset: its two workers' shares (100 records each, batches of 16)
    # are padded to 7 batches each, the repeats marked in the valid mask.
    ds = sluice.torch.SluiceDataset(server.target, "ordered", prefetch=1, with_valid=True,
                                    num_workers=2)
    # Spawned workers: this process has gRPC threads running (the other tests' streams), and
    # gRPC does not support fork() then.
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    assert len(loader) == 2 * -(-(IMAGES // 2) // 16)
    batches = list(loader)
    seen = [hashlib.sha1(image.numpy()).hexdigest()
            for images, _, valid in batches for image in images[valid]]
    with sluice.Client(server.target) as c:
        whole = [hashlib.sha1(image).hexdigest() for b in c.stream("ordered") for image in b.images]
    assert len(batches) == len(loader)
    assert len(seen) == IMAGES and sorted(seen) == sorted(whole)


def _epoch_of_images(batches):
    """Per-image sha1s and labels of one epoch's (images, labels) batches."""
    hashes, labels = [], []
    for images, batch_labels in batches:
        images = np.asarray(images)
        hashes += [hashlib.sha1(image).hexdigest() for image in images]
        labels += np.asarray(batch_labels).tolist()
    return hashes, labels


@pytest.mark.parametrize("workers", ["none", "2 new each epoch", "2 persistent"])
def test_torch_dataloader_epochs_differ_and_each_covers_every_record_once(server, client,
                                                                           workers):
    torch = pytest.importorskip("torch")
    import sluice.torch
    num_workers = 0 if workers == "none" else 2
    extra = {} if not num_workers else dict(multiprocessing_context="spawn",
                                            persistent_workers="persistent" in workers)
    # EVAL crops are fixed per record, so its images name their records; TRAIN crops change.
    whole = sorted(h for b in client.stream("train", mode="eval", batch_size=20, image_size=32,
                                            epochs=1) for h in _epoch_of_images([b[:2]])[0])
    assert len(whole) == IMAGES
    for mode in ("eval", "train"):
        ds = sluice.torch.SluiceDataset(server.target, "train", mode=mode, batch_size=20,
                                        image_size=32)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers,
                                             **extra)
        epochs = [_epoch_of_images(loader) for _ in range(2)]
        for hashes, labels in epochs:
            assert len(hashes) == IMAGES
            if mode == "eval":
                assert sorted(hashes) == whole
        assert sorted(epochs[0][1]) == sorted(epochs[1][1])  # the same records' labels
        assert epochs[0][1] != epochs[1][1]                  # in another order
        if mode == "train":
            assert not set(epochs[0][0]) & set(epochs[1][0])  # and other crops
        else:
            # set_epoch in this process reaches the workers, persistent ones too.
            ds.set_epoch(0)
            assert _epoch_of_images(loader) == epochs[0]


def test_torch_iterations_are_the_epochs_of_one_long_stream(server, client):
    torch = pytest.importorskip("torch")
    import sluice.torch
    args = dict(batch_size=24, image_size=32, seed=4)
    long = {}
    for images, labels, position in client.stream("train", epochs=3, **args):
        long.setdefault(position.epoch, []).append((images.tobytes(), labels.tolist()))

    def iteration(ds):
        return [(images.numpy().tobytes(), labels.tolist()) for images, labels in ds]

    ds = sluice.torch.SluiceDataset(server.target, "train", **args)
    assert [iteration(ds) for _ in range(3)] == [long[0], long[1], long[2]]
    ds.set_epoch(1)
    assert iteration(ds) == long[1] and iteration(ds) == long[2]
    # Two epochs per iteration: the next iteration starts after both.
    ds = sluice.torch.SluiceDataset(server.target, "train", epochs=2, **args)
    assert iteration(ds) == long[0] + long[1]
    assert iteration(ds)[:len(long[2])] != long[0]  # epoch 2, not 0 again


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_torch_workers_of_an_iteration_read_one_epoch_when_num_workers_changes(server,
                                                                               client):
    torch = pytest.importorskip("torch")
    import sluice.torch
    args = dict(batch_size=20, image_size=32, seed=6)

    def epoch_batches(epoch, workers):
        """The batches of `epoch` that `workers` DataLoader workers' shards hold."""
        out = []
        for w in range(workers):
            out += [b.labels.tolist() for b in client.stream(
                "train", shard=(w, workers), start_position=(epoch, 0, 0), epochs=epoch + 1,
                **args)]
        return sorted(out)

    def iteration(workers):
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                             multiprocessing_context="spawn", timeout=60)
        return sorted(labels.tolist() for _, labels in loader)

    # Two workers for epochs 0 and 1, then three (a worker id new to the dataset), then two,
    # then three again (worker 2 idle for an iteration), then none: every worker of an
    # iteration reads the iteration's epoch, not where its id last stopped.
    ds = sluice.torch.SluiceDataset(server.target, "train", **args)
    assert [iteration(2), iteration(2)] == [epoch_batches(0, 2), epoch_batches(1, 2)]
    assert iteration(3) == epoch_batches(2, 3)
    assert iteration(2) == epoch_batches(3, 2)
    assert iteration(3) == epoch_batches(4, 3)
    assert sorted(labels.tolist() for _, labels in ds) == epoch_batches(5, 1)


def test_torch_workers_take_shared_memory_by_default_and_wait_for_their_feeder(server, client):
    torch = pytest.importorskip("torch")
    import sluice.torch
    args = dict(batch_size=16, image_size=32, seed=9)
    # max_held=1 with 4 batches in flight per worker: a worker holding its last tensor until
    # its queue's feeder copied it out would raise FAILED_PRECONDITION unless it waits.
    ds = sluice.torch.SluiceDataset(server.target, "train", max_held=1, epochs=3, **args)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, prefetch_factor=4,
                                         multiprocessing_context="spawn")
    got, shared_streams = [], 0
    for images, labels in loader:
        # A worker runs at most its tasks in flight (prefetch_factor) and its stream's
        # read-ahead ahead of the loader, which takes batches from each worker in turn: with 21
        # batches each, both streams are open at once for a while.
        shared_streams = max(shared_streams, client.stats().shared_memory_streams)
        got.append((images, labels))
    assert shared_streams == 2
    # Worker w streams shard w of 2: each shard's batches, whole and unharmed; training's equal
    # shares drop each 100-record share's tail after 6 full batches.
    assert len(got) == 2 * 3 * (IMAGES // 2 // 16)
    assert sum(len(labels) for _, labels in got) == 3 * 2 * (IMAGES // 2 // 16) * 16
    for w in range(2):
        with sluice.Client(server.target) as c:
            shard = [(torch.from_numpy(np.array(b.images)), b.labels.tolist())
                     for b in c.stream("train", shard=(w, 2), epochs=3, **args)]
        mine = got[w::2]
        assert [labels.tolist() for _, labels in mine] == [labels for _, labels in shard]
        assert all(torch.equal(a, b) for (a, _), (b, _) in zip(mine, shard))


def test_torch_dataset_yields_mask_ids_and_position_in_order_and_warns_once_on_padding(
        server, caplog):
    torch = pytest.importorskip("torch")
    import sluice.torch
    # "ordered" (eval: equal shares "pad") in 3 shares: shard 1 has one 50-record file, padded
    # to the 7 batches of 16 that the largest share (two files) needs.
    args = dict(batch_size=16, shard=(1, 3))
    plain = sluice.torch.SluiceDataset(server.target, "ordered", **args)
    with caplog.at_level("WARNING", logger="sluice"):
        for _ in range(2):
            assert sum(1 for _ in plain) == len(plain) == 7
    warnings = [r for r in caplog.records if "with_valid=True" in r.getMessage()]
    assert len(warnings) == 2  # once per iteration
    full = sluice.torch.SluiceDataset(server.target, "ordered", with_valid=True, record_ids=True,
                                      with_position=True, **args)
    batches = list(full)
    assert len(batches) == 7
    real = []
    for k, (images, labels, valid, ids, position) in enumerate(batches):
        assert images.shape == (16, SIZE, SIZE, 3) and labels.dtype == torch.int64
        assert valid.dtype == torch.bool and valid.shape == (16,)
        assert ids.dtype == torch.int64 and ids.shape == (16, 2)
        assert isinstance(position, sluice.torch.StreamPosition)
        assert (position.worker, position.num_workers, position.epoch) == (0, 0, 0)
        assert position.position.index == k and position.last == (k == 6)
        real += [tuple(i) for i in ids[valid].tolist()]
    assert batches[0][2].all() and not batches[-1][2].any()
    assert len(real) == len(set(real)) == IMAGES // 4
    # Unsharded: no padding, the mask is all True.
    unsharded = sluice.torch.SluiceDataset(server.target, "ordered", batch_size=16,
                                           with_valid=True)
    masks = [valid for _, _, valid in unsharded]
    assert all(m.all() for m in masks) and sum(len(m) for m in masks) == IMAGES


def _ids_by_iteration(ds, stop_after=None):
    """[(epoch, [record ids])] per batch of one iteration of `ds` (record_ids, with_position),
    recording each batch; stops after `stop_after` batches."""
    out = []
    for _, _, ids, position in ds:
        ds.record(position)
        out.append((position.epoch, ids.tolist()))
        if len(out) == stop_after:
            break
    return out


def test_torch_dataset_resumes_mid_epoch_from_its_state_without_loss_or_repeat(server):
    pytest.importorskip("torch")
    import sluice.torch
    args = dict(batch_size=16, image_size=32, seed=5, record_ids=True, with_position=True)
    reference = sluice.torch.SluiceDataset(server.target, "train", **args)
    epochs = [_ids_by_iteration(reference) for _ in range(2)]
    assert [{e for e, _ in epoch} for epoch in epochs] == [{0}, {1}]
    killed = sluice.torch.SluiceDataset(server.target, "train", **args)
    before = _ids_by_iteration(killed, stop_after=4)
    state = killed.state_dict()
    assert state["workers"] == {0: [0, 3, 64, 0, False, {server.target: [0, 3, 64, 0]}, 1,
                                     0]}
    resumed = sluice.torch.SluiceDataset(server.target, "train", **args)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # a loop that sets every epoch keeps the resume inside it
    assert before + _ids_by_iteration(resumed) == epochs[0]
    # Saved after the epoch's last batch: the next iteration is the next epoch.
    again = sluice.torch.SluiceDataset(server.target, "train", **args)
    again.load_state_dict(resumed.state_dict())
    assert _ids_by_iteration(again) == epochs[1]
    with pytest.raises(ValueError, match="shard"):
        sluice.torch.SluiceDataset(server.target, "train", shard=(0, 2),
                                   **args).load_state_dict(state)


def test_torch_dataloader_with_other_workers_than_assumed_raises_value_error(server):
    torch = pytest.importorskip("torch")
    import sluice.torch
    declared = sluice.torch.SluiceDataset(server.target, "train", batch_size=16, num_workers=2)
    with pytest.raises(ValueError, match="assume 2 DataLoader workers"):
        next(iter(declared))
    loaded = sluice.torch.SluiceDataset(server.target, "train", batch_size=16, epochs=1)
    loaded.load_state_dict({"version": 1, "dataset": "train", "shard": None, "num_workers": 0,
                            "epoch": 0, "workers": {}})
    loader = torch.utils.data.DataLoader(loaded, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    with pytest.raises(ValueError, match="with 2 DataLoader workers, but its length and "
                                         "resume state assume 0"):
        next(iter(loader))
    # The failed iterator is in a reference cycle with its exception's traceback: shut its
    # workers down now. Left to a later garbage collection, a worker still starting finds the
    # dataset's lock gone and exits 1, and torch's SIGCHLD handler raises that in a later test.
    del loader, loaded
    gc.collect()


@pytest.mark.parametrize("with_position", [False, True])
def test_torch_worker_that_collates_more_batches_than_max_held_does_not_hang(server, client,
                                                                             with_position):
    torch = pytest.importorskip("torch")
    import sluice.torch
    # Auto-collation: the worker keeps 6 batches (default max_held 4) before handing them over
    # collated, so it must not wait for its own tensors' slots to go; with_position reads one
    # batch ahead too (a list collates the StreamPositions). timeout: a hang fails.
    # The reference first: in this process, after the loader spawned its worker, a new stream's
    # connect once took over connect_timeout (10 s) on the loaded 2-core machine (issue note).
    expected = [b.labels.tolist() for b in client.stream("train", batch_size=4, epochs=1)]
    ds = sluice.torch.SluiceDataset(server.target, "train", batch_size=4,
                                    with_position=with_position)
    loader = torch.utils.data.DataLoader(ds, batch_size=6, num_workers=1, timeout=60,
                                         multiprocessing_context="spawn",
                                         collate_fn=list if with_position else None)
    if with_position:
        labels = [torch.stack([y for _, y, _ in batches]) for batches in loader]
    else:
        labels = [y for _, y in loader]
    assert [tuple(y.shape) for y in labels] == [(6, 4)] * 8 + [(2, 4)]
    assert [batch for y in labels for batch in y.tolist()] == expected


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


def test_torch_shared_job_workers_of_every_rank_are_its_consumers_in_lockstep():
    """No server needed: with job_name the request carries no shard (the job reads the whole
    data set) and rank r's worker w of 3 is consumer 3r + w of 2 x 3; lockstep=False is the
    first-come hand-out, which has no length; a shared job does not resume at a position."""
    pytest.importorskip("torch")
    from sluice.torch import SluiceDataset
    ds = SluiceDataset("127.0.0.1:1", "train", job_name="j", shard=(1, 2))
    assert [(a["shard"], a["consumer_index"], a["num_consumers"])
            for a in (ds._consumer_args(ds.stream_args, w, 3) for w in range(3))] == [
        (None, 3, 6), (None, 4, 6), (None, 5, 6)]
    alone = SluiceDataset("127.0.0.1:1", "train", job_name="j", shard=(0, 1))
    assert [(a["consumer_index"], a["num_consumers"])
            for a in (alone._consumer_args(alone.stream_args, 0, n) for n in (0, 1))] == [
        (0, 1), (0, 1)]
    first_come = SluiceDataset("127.0.0.1:1", "train", job_name="j", shard=(1, 2),
                               lockstep=False)
    args = first_come._consumer_args(first_come.stream_args, 1, 3)
    assert args["shard"] is None and "num_consumers" not in args
    with pytest.raises(TypeError, match="lockstep=False"):
        len(first_come)
    with pytest.raises(ValueError, match="cannot resume"):
        ds.state_dict()
    with pytest.raises(ValueError, match="epoch's start"):
        SluiceDataset("127.0.0.1:1", "train", job_name="j", start_position=(1, 2, 32))


def test_torch_shared_job_length_needs_the_worker_count_before_the_first_iteration(server):
    """A lockstep consumer's share is the job's batches over ranks x workers, rounded down: 200
    records in batches of 20 are 10 batches, 2 for each of 2 ranks x 2 workers (4 per rank),
    5 for each of 2 ranks without workers. Before the first iteration len() without
    num_workers= raises TypeError (it counted 1 consumer per rank: 5, where a DataLoader with 2
    workers delivers 4); with it the count is exact."""
    pytest.importorskip("torch")
    from sluice.torch import SluiceDataset
    args = dict(batch_size=20, image_size=32, job_name="torch-len", shard=(0, 2))
    with pytest.raises(TypeError, match="pass num_workers="):
        len(SluiceDataset(server.target, "train", **args))
    assert len(SluiceDataset(server.target, "train", num_workers=2, **args)) == 4
    assert len(SluiceDataset(server.target, "train", num_workers=0, **args)) == 5


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


def test_keras_fit_epochs_differ_and_validation_and_evaluate_see_every_record_once(server,
                                                                                  client):
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    seen = []  # per batch: (image sha1s, labels), and an "epoch" marker at each epoch's start

    def recorded(ds):
        def record(images, labels):
            seen.append(_epoch_of_images([(images.numpy(), labels.numpy())]))
            return images, labels

        def step(images, labels):
            images, labels = tf.py_function(record, [images, labels], [tf.uint8, tf.int32])
            return tf.ensure_shape(images, (None, SIZE, SIZE, 3)), tf.ensure_shape(labels, (None,))
        return ds.map(step)

    class Marker(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append("epoch")

    # batch_size and image_size: the dataset's defaults (16, SIZE), asked of the server.
    train = sluice.tf.dataset(server.target, "train", seed=2)
    assert train.element_spec[0].shape.as_list() == [None, SIZE, SIZE, 3]
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((SIZE, SIZE, 3)),
                                 tf.keras.layers.Rescaling(1 / 255),
                                 tf.keras.layers.Conv2D(4, 3, strides=4, activation="relu"),
                                 tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd", metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Validation as one of 3 DDP ranks would run it: shard 1 of 3 (one 50-record file),
    # padded to the 7 batches of the largest share, the mask as Keras's sample weights.
    validated = []  # per validation pass: the record ids of its valid samples

    def validation(shard):
        ds = sluice.tf.dataset(server.target, "train", mode="eval", shard=(shard, 3),
                               with_valid=True, record_ids=True)
        assert ds.element_spec[2:] == (tf.TensorSpec((None,), tf.bool),
                                       tf.TensorSpec((None, 2), tf.int64))
        # The batch count is exact under "pad": Keras knows its steps.
        assert int(tf.data.experimental.cardinality(ds)) == 7

        def record(ids, valid):
            validated[-1] += [tuple(i) for i in ids.numpy()[valid.numpy()].tolist()]
            return valid

        def step(images, labels, valid, ids):
            valid = tf.ensure_shape(tf.py_function(record, [ids, valid], tf.bool), (None,))
            return images, labels, tf.cast(valid, tf.float32)
        return ds.map(step)

    class Validations(tf.keras.callbacks.Callback):
        def on_test_begin(self, logs=None):
            validated.append([])

    model.fit(recorded(train), epochs=2, verbose=0, callbacks=[Marker(), Validations()],
              validation_data=validation(1))
    shard_1 = sorted((1, i) for i in range(IMAGES // 4))  # the sorted file list's second file
    assert len(validated) == 2 and all(sorted(v) == shard_1 for v in validated)
    for shard in (0, 2):
        validated.append([])
        model.evaluate(validation(shard), verbose=0)
    every = sorted(i for v in validated[1:] for i in v)
    assert every == sorted((f, i) for f in range(4) for i in range(IMAGES // 4))
    marks = [i for i, s in enumerate(seen) if s == "epoch"]
    assert len(marks) == 2
    epochs = [_merge(seen[marks[0] + 1:marks[1]]), _merge(seen[marks[1] + 1:])]
    for hashes, labels in epochs:
        assert len(hashes) == IMAGES
    assert sorted(epochs[0][1]) == sorted(epochs[1][1]) and epochs[0][1] != epochs[1][1]
    assert not set(epochs[0][0]) & set(epochs[1][0])  # other crops
    # Evaluation: EVAL crops name their records; every record once.
    whole = sorted(hashlib.sha1(i).hexdigest()
                   for b in client.stream("train", mode="eval", epochs=1) for i in b.images)
    seen.clear()
    evaluation = sluice.tf.dataset(server.target, "train", mode="eval", batch_size=24)
    model.evaluate(recorded(evaluation), verbose=0)
    hashes, _ = _merge(seen)
    assert sorted(hashes) == whole and len(whole) == IMAGES


@pytest.mark.parametrize("form", ["fit(ds)", "fit(ds.repeat(), steps_per_epoch)",
                                  "fit(ds, steps_per_epoch) of a declared count"])
def test_keras_fit_trains_each_epoch_on_the_next_with_or_without_steps_per_epoch(
        server, client, form):
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    args = dict(batch_size=20, image_size=32, seed=5)
    if "declared" in form:
        # A sharded TRAIN stream has an exact count (equal shares "drop"), which the dataset
        # declares as its cardinality: 5 batches of shard 0's 100 records an epoch.
        args["shard"], steps = (0, 2), 5
    else:
        steps = 10  # unsharded: only an upper bound, no cardinality
    stream = {}
    for b in client.stream("train", epochs=3, **args):
        stream.setdefault(b.position.epoch, []).append(b.labels.tolist())
    assert [len(stream[e]) for e in range(3)] == [steps] * 3
    seen = []  # per Keras epoch, the labels of its batches

    def record(labels):
        seen[-1].append(labels.numpy().tolist())
        return labels

    class Epochs(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append([])

    ds = sluice.tf.dataset(server.target, "train", **args)
    assert int(ds.cardinality()) == (steps if "declared" in form else tf.data.UNKNOWN_CARDINALITY)
    if "repeat" in form:
        # Keras keeps one iterator across its epochs: it must not end after the first.
        ds = ds.repeat()
    ds = ds.map(lambda x, y: (x, tf.ensure_shape(tf.py_function(record, [y], tf.int32),
                                                 (None,))))
    model = pooling_model(tf, tf.keras.losses.SparseCategoricalCrossentropy)
    history = model.fit(ds, epochs=3, steps_per_epoch=None if form == "fit(ds)" else steps,
                        verbose=0, callbacks=[Epochs()])
    assert len(history.history["loss"]) == 3
    # Read-ahead may record batches early (of the next Keras epoch, or after the last step of
    # a repeated dataset): compare the run's first 3 epochs.
    assert [b for epoch in seen for b in epoch][:3 * steps] == stream[0] + stream[1] + stream[2]


def test_tf_datasets_of_a_job_in_lockstep_declare_their_count_and_iterate_new_epochs(server):
    """Two sluice.tf.dataset consumers of one job in lockstep: each declares its exact count (200
    records in batches of 20: 10 full batches, 5 each), together they read every record once
    per iteration, and each iteration is the job's run at the next epoch."""
    pytest.importorskip("tensorflow")
    import threading
    import sluice.tf
    args = dict(batch_size=20, image_size=32, seed=4, record_ids=True, job_name="tf-lockstep",
                num_consumers=2)
    datasets = [sluice.tf.dataset(server.target, "train", consumer_index=k, **args)
                for k in range(2)]
    assert [int(d.cardinality()) for d in datasets] == [5, 5]
    orders = []
    for _ in range(2):
        got = [None, None]

        def consume(k):
            got[k] = [tuple(i) for _, _, ids in datasets[k].as_numpy_iterator()
                      for i in ids.tolist()]

        threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert [len(g) for g in got] == [100, 100]
        assert len(set(got[0] + got[1])) == IMAGES
        orders.append(got[0])
    assert orders[0] != orders[1]


def test_keras_fit_steps_per_epoch_of_a_dataset_without_a_count_runs_out_of_data(server):
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    # Unsharded: no declared cardinality, so Keras keeps one iterator across its epochs, and the
    # dataset's one epoch (10 batches) runs out before 3 x 10 steps: what the module's docstring
    # says to use ds.repeat() for.
    ds = sluice.tf.dataset(server.target, "train", batch_size=20, image_size=32, seed=5)
    steps = []

    class Steps(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            steps.append(batch)

    model = pooling_model(tf, tf.keras.losses.SparseCategoricalCrossentropy)
    with pytest.warns(UserWarning, match="ran out of data"):
        model.fit(ds, epochs=3, steps_per_epoch=10, verbose=0, callbacks=[Steps()])
    assert len(steps) < 30


def _merge(parts):
    hashes, labels = [], []
    for h, l in parts:
        hashes += h
        labels += l
    return hashes, labels


def test_tf_dataset_with_shared_memory_true_lets_tf_keep_more_batches_than_max_held(server,
                                                                                    client):
    """shared_memory=True, max_held=1: the caller (and tf.data's prefetch) keeps every batch;
    the dataset copies each batch taken past max_held out of its slot (on_max_held "copy")
    instead of failing inside TF (FAILED_PRECONDITION), and the batches are the socket's."""
    pytest.importorskip("tensorflow")
    import sluice.tf
    args = dict(batch_size=16, image_size=32, seed=3)
    ds = sluice.tf.dataset(server.target, "train", shared_memory=True, max_held=1, prefetch=1,
                           **args)
    kept = list(ds)  # eager tensors, each keeping what it was made from
    socket = list(client.stream("train", epochs=1, shared_memory=False, **args))
    assert [(hashlib.sha1(x.numpy()).hexdigest(), y.numpy().tolist()) for x, y in kept] == [
        (hashlib.sha1(b.images).hexdigest(), b.labels.tolist()) for b in socket]


def test_tf_dataset_of_a_shared_job_checks_its_start_position_when_built(server):
    """A shared job starts only at an epoch's start: another start_position is refused when the
    dataset is made (not inside TF at its first batch), and (epoch, 0, 0) keeps the declared
    count of a job in lockstep."""
    pytest.importorskip("tensorflow")
    import sluice.tf
    args = dict(batch_size=20, image_size=32, seed=4, job_name="tf-start", num_consumers=2,
                consumer_index=0)
    for start in ((1, 2, 32), (1, 0, 5), {server.target: (1, 0, 0)}):
        with pytest.raises(ValueError, match="epoch's start"):
            sluice.tf.dataset(server.target, "train", start_position=start, **args)
    ds = sluice.tf.dataset(server.target, "train", start_position=(3, 0, 0), **args)
    assert int(ds.cardinality()) == 5


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

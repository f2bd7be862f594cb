"""SluiceDataset (client/python/sluice/torch.py) resuming from a state_dict() at the edges of an
epoch and of an iteration, against real `sluice serve` processes: a worker whose epoch's last
batch was recorded while another's was not, a fan-in from several servers with several epochs
per iteration, an iteration of several epochs, and the read-ahead that with_position needs under
max_held=1. Each test compares a killed-and-resumed run with an uninterrupted one: every record
of every epoch exactly once, in the epochs the uninterrupted run had.
"""
import collections
import gc

import pytest

from client_support import IMAGES

BATCH = 16


def _loader(ds, workers):
    import torch
    if not workers:
        return ds
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                       multiprocessing_context="spawn", timeout=60)


def _iterate(ds, workers=0, stop=None):
    """(epoch, file, record) of every sample of one iteration, recording each batch; stops after
    the batch for which stop(batches so far, position) is true. Returns (samples, positions)."""
    samples, positions = [], []
    for _, _, ids, position in _loader(ds, workers):
        ds.record(position)
        samples += [(position.epoch,) + tuple(i) for i in ids.tolist()]
        positions.append(position)
        if stop is not None and stop(len(positions), position):
            break
    return samples, positions


@pytest.mark.parametrize("set_epoch", [False, True])
def test_torch_resume_after_one_workers_last_batch_of_the_epoch_repeats_nothing(server,
                                                                                set_epoch):
    pytest.importorskip("torch")
    import sluice.torch
    workers = 2

    def dataset():
        return sluice.torch.SluiceDataset(server.target, "train", batch_size=BATCH,
                                          image_size=32, seed=3, record_ids=True,
                                          with_position=True, num_workers=workers)

    reference = dataset()
    epochs = [_iterate(reference, workers)[0] for _ in range(2)]
    per_epoch = len(epochs[0]) // BATCH
    killed = dataset()
    # The DataLoader alternates its 2 workers, which get equal batches: the epoch's last batch
    # but one is worker 0's last, and worker 1's last is not recorded.
    before, positions = _iterate(killed, workers, stop=lambda n, _: n == per_epoch - 1)
    assert positions[-1].last and positions[-1].worker == 0
    assert not any(p.last for p in positions if p.worker == 1)
    state = killed.state_dict()
    assert state["epoch"] == 0
    resumed = dataset()
    resumed.load_state_dict(state)
    after = []
    for epoch in range(2):
        if set_epoch:
            resumed.set_epoch(epoch)
        samples = _iterate(resumed, workers)[0]
        assert {e for e, *_ in samples} == {epoch}  # each iteration is its own epoch
        after.append(samples)
        if epoch == 0:
            # Saved once the resumed epoch ended: both workers are done with it (worker 0's
            # record is the loaded one, set_epoch(0) or not), and a run resumed from this
            # state goes on with epoch 1.
            state = resumed.state_dict()
            assert state["epoch"] == 1 and "unrecorded" not in state
            assert all(entry[4] for entry in state["workers"].values())
            again = dataset()
            again.load_state_dict(state)
            if set_epoch:
                again.set_epoch(1)
            assert sorted(_iterate(again, workers)[0]) == sorted(epochs[1])
    assert len(after[0]) == BATCH  # worker 1's last batch, and nothing of worker 0
    assert sorted(before + after[0]) == sorted(epochs[0])
    assert sorted(after[1]) == sorted(epochs[1])


def test_torch_resume_from_a_state_saved_after_the_epoch_ended_everywhere_starts_the_next():
    """No server needed to see the slots: a state whose workers all recorded epoch 0's last
    batch resumes at epoch 1 from its start, not into an empty iteration of epoch 0."""
    pytest.importorskip("torch")
    import sluice.torch
    ds = sluice.torch.SluiceDataset("127.0.0.1:1", "train", num_workers=2)
    ds.load_state_dict({"version": 1, "dataset": "train", "shard": None, "num_workers": 2,
                        "epoch": 1, "workers": {0: [0, 5, 96, 0, True, {}, 1],
                                                1: [0, 5, 96, 0, True, {}, 1]}})
    assert [ds._state.claim(w, 1) for w in range(2)] == [(1, None, False, 2, 1)] * 2


def test_torch_fan_in_state_saved_at_an_epochs_last_batch_resumes_each_server_after_its_own():
    """No server needed to see the slots: from two servers, the batch recorded last was server
    A's last of epoch 0 (so the epoch ended everywhere) while server B had already sent 3
    batches of epoch 1 in the same iteration of 2 epochs. The resume is per server (B after its
    third batch of epoch 1), not both servers at epoch 1's start, which repeated B's 3 batches
    (test_torch_fan_in_resume_over_epochs_loses_and_repeats_nothing, when the fan-in's order
    put them first)."""
    pytest.importorskip("torch")
    import sluice.torch
    from sluice import Position
    a, b = "127.0.0.1:1", "127.0.0.1:2"
    ds = sluice.torch.SluiceDataset([a, b], "train", epochs=2, num_workers=0)
    ds.load_state_dict({"version": 1, "dataset": "train", "shard": None, "num_workers": 0,
                        "epoch": 1, "workers": {0: [0, 12, 100, 0, True,
                                                    {a: [0, 12, 100, 0], b: [1, 2, 24, 0]},
                                                    2, 0]}})
    assert ds._state.claim(None, 2) == (0, Position(0, 13, 100, 0), True, 2, 0)
    assert ds._resumes[0] == {a: Position(0, 13, 100, 0), b: Position(1, 3, 24, 0)}


def test_torch_fan_in_resume_over_epochs_loses_and_repeats_nothing(fleet):
    pytest.importorskip("torch")
    import sluice.torch
    target = [fleet[0].target, fleet[1].target]

    def dataset():
        return sluice.torch.SluiceDataset(target, "train", batch_size=8, image_size=32, seed=3,
                                          epochs=2, record_ids=True, with_position=True,
                                          num_workers=0)

    reference, positions = _iterate(dataset())
    assert {e for e, *_ in reference} == {0, 1}
    # A batch marked last is its epoch's last: every batch after it is of a later epoch.
    for k, p in enumerate(positions):
        if p.last:
            assert all(q.epoch > p.epoch for q in positions[k + 1:])
    assert positions[-1].last
    # Killed after each batch marked last, and mid-way through each epoch: resumed, the
    # iteration delivers the rest of both epochs, each record once.
    stops = [k + 1 for k, p in enumerate(positions[:-1]) if p.last] + [
        len(positions) // 4, len(positions) // 2 + 3]
    for stop in stops:
        killed = dataset()
        before = _iterate(killed, stop=lambda n, _: n == stop)[0]
        resumed = dataset()
        resumed.load_state_dict(killed.state_dict())
        after = _iterate(resumed)[0]
        assert sorted(before + after) == sorted(reference), "killed after %d batches" % stop
        # The next iteration is the next two epochs.
        assert {e for e, *_ in _iterate(resumed)[0]} == {2, 3}


def test_torch_resumed_iteration_of_several_epochs_ends_where_the_saved_one_would(server):
    pytest.importorskip("torch")
    import sluice.torch

    def dataset():
        return sluice.torch.SluiceDataset(server.target, "train", batch_size=BATCH,
                                          image_size=32, seed=3, epochs=2, shard=(0, 2),
                                          record_ids=True, with_position=True, num_workers=0)

    reference = dataset()
    iterations = [_iterate(reference)[0] for _ in range(2)]
    assert [{e for e, *_ in i} for i in iterations] == [{0, 1}, {2, 3}]
    per_epoch = len(iterations[0]) // (2 * BATCH)
    # Killed 2 batches into epoch 1, and right after epoch 0's last batch.
    for stop in (per_epoch + 2, per_epoch):
        killed = dataset()
        before = _iterate(killed, stop=lambda n, _: n == stop)[0]
        resumed = dataset()
        resumed.load_state_dict(killed.state_dict())
        after = _iterate(resumed)[0]
        assert {e for e, *_ in after} == {1}
        assert sorted(before + after) == sorted(iterations[0])
        assert sorted(_iterate(resumed)[0]) == sorted(iterations[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_with_position_reads_ahead_within_max_held_one(server, workers):
    torch = pytest.importorskip("torch")
    import sluice.torch
    ds = sluice.torch.SluiceDataset(server.target, "train", batch_size=BATCH, image_size=32,
                                    with_position=True, max_held=1, shared_memory=True,
                                    num_workers=workers)
    kw = dict(multiprocessing_context="spawn", timeout=60) if workers else {}
    batches = 0
    for images, _, position in torch.utils.data.DataLoader(ds, batch_size=None,
                                                            num_workers=workers, **kw):
        del images  # without workers the caller may hold max_held batches: one
        batches += 1
    assert batches == len(ds) and position.last


def test_torch_len_without_num_workers_does_not_bind_the_dataloaders_workers(server):
    torch = pytest.importorskip("torch")
    import sluice.torch
    ds = sluice.torch.SluiceDataset(server.target, "train", batch_size=BATCH, image_size=32,
                                    record_ids=True)
    assert len(ds) == -(-IMAGES // BATCH)  # counted for one stream: no workers yet
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn", timeout=60)
    ids = [tuple(i) for _, _, batch_ids in loader for i in batch_ids.tolist()]
    assert len(ids) == len(set(ids)) and len(ids) > 0
    assert len(ds) == len(ids) // BATCH  # now counted for the 2 workers that ran


def test_torch_fan_in_state_loaded_into_persistent_workers_fails_loudly(fleet):
    torch = pytest.importorskip("torch")
    import sluice.torch
    target = [fleet[0].target, fleet[1].target]

    def dataset():
        return sluice.torch.SluiceDataset(target, "train", batch_size=8, image_size=32, seed=3,
                                          with_position=True, num_workers=1)

    killed = dataset()
    loader = torch.utils.data.DataLoader(killed, batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn", timeout=60)
    for _, _, position in loader:
        killed.record(position)
        if len(position.positions) == 2:
            break
    state = killed.state_dict()
    ds = dataset()
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn", timeout=60,
                                         persistent_workers=True)
    assert sum(1 for _ in loader) > 0
    ds.load_state_dict(state)  # the persistent worker holds the per-server positions of before
    with pytest.raises(ValueError, match="persistent_workers=False"):
        for _ in loader:
            pass
    # Its workers shut down in this test, not at a later garbage collection of the failed
    # iterator's reference cycle (see test_client_frameworks.py).
    del loader
    gc.collect()


@pytest.mark.parametrize("epochs, set_epoch", [(2, False), (3, False), (2, True)])
def test_torch_worker_that_recorded_nothing_resumes_at_the_iterations_first_epoch(
        server, epochs, set_epoch):
    """Several epochs per iteration and a worker none of whose batches was recorded when the
    state was saved (here the other worker's one batch of epoch 0, its last, was): that worker
    starts the resumed iteration at its first epoch, not at the epoch the recorded worker
    reached, and ends it where the saved one would. A run killed before its first record saves
    the state it loaded (the iteration's first epoch included), and set_epoch() of the saved
    iteration's first epoch keeps a worker resumed in a later epoch of it where it was."""
    pytest.importorskip("torch")
    import sluice.torch
    workers = 2

    def dataset():
        # 100 records per worker shard: one batch of 64 per epoch each (equal shares drop).
        return sluice.torch.SluiceDataset(server.target, "train", batch_size=64, image_size=32,
                                          seed=3, epochs=epochs, record_ids=True,
                                          with_position=True, num_workers=workers)

    reference = dataset()
    iterations = [_iterate(reference, workers)[0] for _ in range(2)]
    assert [{e for e, *_ in i} for i in iterations] == [set(range(epochs)),
                                                         set(range(epochs, 2 * epochs))]
    assert len(iterations[0]) == 64 * workers * epochs
    killed = dataset()
    before, positions = _iterate(killed, workers, stop=lambda n, _: n == 1)
    assert positions[0].worker == 0 and positions[0].last and positions[0].epoch == 0
    # Killed again after the resumed run's first batch (worker 0's, of epoch 1): worker 1,
    # still without a record, starts at epoch 0 again.
    again = dataset()
    again.load_state_dict(killed.state_dict())
    if set_epoch:
        again.set_epoch(0)
    middle, positions = _iterate(again, workers, stop=lambda n, _: n == 1)
    assert positions[0].worker == 0 and positions[0].epoch == 1
    state = again.state_dict()
    assert state["unrecorded"] == [0, epochs] and state["epoch"] == 0
    # Killed once more before any batch was recorded: it saves the state it loaded.
    idle = dataset()
    idle.load_state_dict(state)
    assert idle.state_dict() == state
    resumed = dataset()
    resumed.load_state_dict(idle.state_dict())
    if set_epoch:
        resumed.set_epoch(0)  # worker 0 still resumes in epoch 1, after its batch
    after = _iterate(resumed, workers)[0]
    assert sorted(before + middle + after) == sorted(iterations[0])
    if set_epoch:
        resumed.set_epoch(epochs)
    assert sorted(_iterate(resumed, workers)[0]) == sorted(iterations[1])

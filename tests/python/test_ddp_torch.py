"""PyTorch DistributedDataParallel over SluiceDataset against one real `sluice serve` whose files
are uneven: gloo ranks on CPU (2 and 3 of them, spawned processes meeting at a file:// rendezvous),
each with a DataLoader of 2 spawned workers, train a tiny model for two epochs, killed mid-epoch
and resumed from each rank's state_dict, then evaluate.

It pins issue 15's promises to PyTorch users: every rank gets the same number of batches each
epoch, and len(loader) says how many (DescribeStream); per epoch the ranks together see every
record once, less the tail that equal shares ("drop", training's default) drop and count; in an
eval pass ("pad") the valid samples are every record exactly once; the second epoch has another
order and other crops; a run killed after k batches resumes from each rank's saved state with no
record lost or repeated. With job_name the ranks' workers are the consumers of one shared job
in lockstep, with the same promises (padding masked).
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess

import pytest

from client_support import Server

FILES = (17, 41, 23, 50, 31)  # records per file: uneven on purpose
BATCH = 4
IMAGE = 32
WORKERS = 2
SEED = 11
KILL_AFTER = 3  # batches a rank trains on before the run is killed: uneven over its 2 workers


@pytest.fixture(scope="module")
def uneven_server(sluice_bin, tmp_path_factory):
    data = tmp_path_factory.mktemp("ddp-data")
    for k, images in enumerate(FILES):
        part = tmp_path_factory.mktemp("ddp-part")
        subprocess.run([sluice_bin, "synth", "--images", str(images), "--classes", "4",
                        "--shards", "1", "--seed", str(k), "--out", str(part)],
                       check=True, capture_output=True, timeout=120)
        for suffix in (".tfrecord", ".tfrecord.idx"):
            shutil.move(part / ("train-00000-of-00001" + suffix),
                        data / ("train-%05d%s" % (k, suffix)))
    server = Server(sluice_bin, tmp_path_factory.mktemp("ddp-serve"), data)
    yield server
    server.stop()


def _digest(image):
    return hashlib.sha1(image.numpy().tobytes()).hexdigest()


def _rank(rank, world, init_file, target, out, phase):
    """One DDP rank. phase "killed": trains epoch 0 until KILL_AFTER batches, saving its state
    after each, then SIGKILLs itself. phase "resumed": loads that state, trains the rest of
    epoch 0 and all of epoch 1, then evaluates. Writes what it saw to out/<phase>-<rank>.json."""
    import torch
    import torch.distributed as dist
    import sluice.torch

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    ds = sluice.torch.SluiceDataset(target, "train", batch_size=BATCH, image_size=IMAGE,
                                    seed=SEED, record_ids=True, with_position=True,
                                    num_workers=WORKERS)
    assert ds.shard == (rank, world)  # from torch.distributed, as DistributedSampler's
    state_file = os.path.join(out, "state-%d.pt" % rank)
    if phase == "resumed":
        ds.load_state_dict(torch.load(state_file))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS,
                                         multiprocessing_context="spawn",
                                         persistent_workers=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(4, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    result = {"len": len(loader), "epochs": []}
    for _ in range(1 if phase == "killed" else 2):
        seen = []  # per batch: (epoch, [[file, record]...], [image sha1...])
        for images, labels, ids, position in loader:
            x = images.permute(0, 3, 1, 2).float() / 255
            loss = torch.nn.functional.cross_entropy(model(x), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ds.record(position)
            seen.append((position.epoch, ids.tolist(), [_digest(i) for i in images]))
            if phase == "killed":
                torch.save(ds.state_dict(), state_file)
                with open(os.path.join(out, "killed-%d.json" % rank), "w") as f:
                    json.dump({"len": result["len"], "seen": seen}, f)
                if len(seen) == KILL_AFTER:
                    os.kill(os.getpid(), signal.SIGKILL)
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([len(seen)]))
        result["epochs"].append({"seen": seen, "counts": [int(c) for c in counts]})
    # Evaluation: equal shares "pad" (eval's default), the mask says which samples are real.
    evaluation = sluice.torch.SluiceDataset(target, "train", mode="eval", batch_size=BATCH,
                                            image_size=IMAGE, record_ids=True, with_valid=True,
                                            num_workers=0)
    valid_ids, batches = [], 0
    with torch.no_grad():
        for images, labels, valid, ids in torch.utils.data.DataLoader(evaluation,
                                                                       batch_size=None):
            model(images.permute(0, 3, 1, 2).float() / 255)
            valid_ids += ids[valid].tolist()
            batches += 1
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([batches]))
    result["eval"] = {"valid_ids": valid_ids, "counts": [int(c) for c in counts],
                      "len": len(evaluation)}
    with open(os.path.join(out, "resumed-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def _spawn_ranks(world, fn, args, timeout):
    """Runs fn(rank, world, *args) in `world` spawned processes; returns their exit codes (None
    for one killed after `timeout` seconds)."""
    import torch.multiprocessing as mp
    context = mp.get_context("spawn")
    ranks = [context.Process(target=fn, args=(r, world) + tuple(args)) for r in range(world)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(timeout=timeout)
    codes = [p.exitcode for p in ranks]
    for p in ranks:
        if p.is_alive():
            p.kill()
            p.join()
    return codes


def _run_ranks(world, target, out, phase):
    return _spawn_ranks(world, _rank, (os.path.join(out, "rendezvous-" + phase), target, out,
                                       phase), timeout=120)


@pytest.mark.parametrize("world", [2, 3])
def test_torch_ddp_ranks_get_equal_batches_every_record_once_and_resume_exactly(
        uneven_server, tmp_path, world):
    pytest.importorskip("torch")
    import sluice
    from sluice.torch import worker_shard
    target = uneven_server.target
    out = str(tmp_path)
    assert _run_ranks(world, target, out, "killed") == [-signal.SIGKILL] * world
    assert _run_ranks(world, target, out, "resumed") == [0] * world
    killed = [json.load(open(os.path.join(out, "killed-%d.json" % r))) for r in range(world)]
    resumed = [json.load(open(os.path.join(out, "resumed-%d.json" % r))) for r in range(world)]

    everything = sorted([f, i] for f, n in enumerate(FILES) for i in range(n))
    # What equal shares promise, from DescribeStream of every consumer (rank x worker).
    with sluice.Client(target) as client:
        plans = [client.describe("train", batch_size=BATCH, image_size=IMAGE, seed=SEED,
                                 shard=worker_shard((r, world), w, WORKERS))
                 for r in range(world) for w in range(WORKERS)]
    assert {p.equal_shares for p in plans} == {"drop"}
    assert sum(p.records_per_epoch for p in plans) == len(everything)
    per_rank = sum(p.batches_per_epoch for p in plans[:WORKERS])
    dropped = sum(p.records_per_epoch - p.batches_per_epoch * BATCH for p in plans)
    assert dropped > 0  # the files are uneven: some shares have a tail to drop

    def ids(batches):
        return [tuple(i) for _, batch_ids, _ in batches for i in batch_ids]

    epochs = []
    for e in range(2):
        union = []
        for r in range(world):
            seen = resumed[r]["epochs"][e]["seen"]
            if e == 0:  # the killed run's batches, then the resumed run's rest of the epoch
                assert len(killed[r]["seen"]) == KILL_AFTER
                seen = killed[r]["seen"] + seen
                assert killed[r]["len"] == resumed[r]["len"] == per_rank
            assert {epoch for epoch, _, _ in seen} == {e}
            # Every rank the same count (all_gather), the one len(loader) said.
            assert len(seen) == per_rank
            assert resumed[r]["epochs"][e]["counts"] == (
                [per_rank - KILL_AFTER] * world if e == 0 else [per_rank] * world)
            union += ids(seen)
        # Every record at most once, all of them but the counted dropped tail.
        assert len(union) == len(set(union)) == len(everything) - dropped
        assert set(union) <= set(map(tuple, everything))
        epochs.append([b for r in range(world) for b in
                       (killed[r]["seen"] if e == 0 else []) + resumed[r]["epochs"][e]["seen"]])
    # Epoch 1 is another epoch: another order and other crops of the same records.
    order = [ids(batches) for batches in epochs]
    assert order[0] != order[1]
    crops = [{tuple(i): d for _, batch_ids, digests in batches
              for i, d in zip(batch_ids, digests)} for batches in epochs]
    common = set(crops[0]) & set(crops[1])
    assert common and all(crops[0][i] != crops[1][i] for i in common)
    # Evaluation with padding: the valid samples are every record exactly once, and every rank
    # got the same number of batches, its len().
    valid = sorted(i for r in range(world) for i in resumed[r]["eval"]["valid_ids"])
    assert valid == everything
    eval_counts = resumed[0]["eval"]["counts"]
    assert len(set(eval_counts)) == 1
    assert all(resumed[r]["eval"]["len"] == eval_counts[0] for r in range(world))


def _lockstep_rank(rank, world, init_file, target, out):
    """One DDP rank whose 2 DataLoader workers are consumers of one shared job in lockstep with
    the other rank's: trains two epochs with padding masked, writes what it saw to
    out/lockstep-<rank>.json."""
    import torch
    import torch.distributed as dist
    import sluice.torch

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    ds = sluice.torch.SluiceDataset(target, "train", batch_size=BATCH, image_size=IMAGE,
                                    seed=SEED, job_name="ddp-lockstep", equal_shares="pad",
                                    record_ids=True, with_valid=True, num_workers=WORKERS)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS,
                                         multiprocessing_context="spawn",
                                         persistent_workers=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(4, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    result = {"len": len(loader), "epochs": []}
    for _ in range(2):
        seen = []  # per batch: ([[file, record]...] and [image sha1...] of its valid samples)
        for images, labels, valid, ids in loader:
            x = images.permute(0, 3, 1, 2).float() / 255
            losses = torch.nn.functional.cross_entropy(model(x), labels, reduction="none")
            loss = (losses * valid).sum() / valid.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append((ids[valid].tolist(), [_digest(i) for i in images[valid]]))
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([len(seen)]))
        result["epochs"].append({"seen": seen, "counts": [int(c) for c in counts]})
    with open(os.path.join(out, "lockstep-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def test_torch_ddp_workers_of_a_shared_job_in_lockstep_get_equal_batches_every_record_once(
        uneven_server, tmp_path):
    """job_name: the 2 ranks x 2 workers are the 4 consumers of one job (no shards): every rank
    gets the same number of batches each epoch, the one len(loader) says; the valid samples of
    all ranks are every record exactly once per epoch; the second iteration is another epoch."""
    pytest.importorskip("torch")
    world = 2
    out = str(tmp_path)
    codes = _spawn_ranks(world, _lockstep_rank,
                         (os.path.join(out, "rendezvous"), uneven_server.target, out),
                         timeout=180)
    assert codes == [0] * world
    results = [json.load(open(os.path.join(out, "lockstep-%d.json" % r))) for r in range(world)]

    everything = sorted((f, i) for f, n in enumerate(FILES) for i in range(n))
    # 162 records in batches of 4 fill 41 (the last with 2 padding samples); the job rounds up
    # to a multiple of its 4 consumers: 44 batches, 11 per worker, 22 per rank.
    consumers = world * WORKERS
    job_batches = -(-(-(-len(everything) // BATCH)) // consumers) * consumers
    per_rank = job_batches // consumers * WORKERS
    assert per_rank == 22
    assert [r["len"] for r in results] == [per_rank] * world
    orders, crops = [], []
    for e in range(2):
        union, digests = [], {}
        for r in range(world):
            seen = results[r]["epochs"][e]["seen"]
            assert len(seen) == per_rank
            assert results[r]["epochs"][e]["counts"] == [per_rank] * world
            for ids, images in seen:
                union += [tuple(i) for i in ids]
                digests.update(zip(map(tuple, ids), images))
        assert sorted(union) == everything  # every record once, padding masked out
        orders.append([tuple(i) for ids, _ in results[0]["epochs"][e]["seen"] for i in ids])
        crops.append(digests)
    assert orders[0] != orders[1]
    assert all(crops[0][i] != crops[1][i] for i in everything)


def test_torch_workers_fanning_in_from_a_fleet_resume_every_server_exactly(fleet):
    torch = pytest.importorskip("torch")
    import sluice.torch
    target = [fleet[0].target, fleet[1].target]

    def dataset():
        return sluice.torch.SluiceDataset(target, "train", batch_size=8, image_size=32, seed=8,
                                          record_ids=True, with_position=True,
                                          num_workers=WORKERS)

    def loader(ds):
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS,
                                           multiprocessing_context="spawn")

    def epoch(ds, stop_after=None):
        seen = []
        for _, _, ids, position in loader(ds):
            ds.record(position)
            seen += [(position.epoch, tuple(i)) for i in ids.tolist()]
            if stop_after and len(seen) == stop_after * 8:
                break
        return seen

    reference = dataset()
    epochs = [epoch(reference), epoch(reference)]
    stopped = dataset()
    before = epoch(stopped, stop_after=5)
    state = stopped.state_dict()
    assert all(len(entry[5]) == 2 for entry in state["workers"].values())  # servers
    resumed = dataset()
    resumed.load_state_dict(state)
    after = epoch(resumed)
    assert len(set(before + after)) == len(before + after)
    assert sorted(before + after) == sorted(epochs[0])
    assert sorted(epoch(resumed)) == sorted(epochs[1])

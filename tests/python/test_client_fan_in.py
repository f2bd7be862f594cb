"""The Python client reading a fleet: several targets or a dns: name, one stream per server
(client/python/sluice/_client.py, as the C++ client's FanInStream), against real `sluice serve`
processes started with --shard I/N; and the check that a client reaches every shard of a sharded
dataset.
"""
import hashlib

import grpc
import pytest

import sluice
from client_support import IMAGES, SIZE, Server
from sluice._client import _format, _format_name, _merge_format, fleet_problem, resolve_targets
from sluice.v1 import service_pb2


def _hashes(images):
    return [hashlib.sha1(image).hexdigest() for image in images]


def _by_epoch(stream):
    seen = {}
    for images, _, position in stream:
        seen.setdefault(position.epoch, []).extend(_hashes(images))
    return seen


def test_two_shard_servers_deliver_every_record_once_per_epoch(fleet, client):
    # The spelling: gRPC alone would pick one of the two addresses and read half.
    target = "ipv4:%s,%s" % (fleet[0].target, fleet[1].target)
    whole = sorted(h for b in client.stream("ordered") for h in _hashes(b.images))
    # 100 records per shard (2 of the 4 files each): batches of 20 divide them, so no equal-
    # shares padding or dropping enters the count.
    with sluice.Client(target) as c:
        assert c.targets == ["ipv4:" + fleet[0].target, "ipv4:" + fleet[1].target]
        stream = c.stream("ordered", batch_size=20, epochs=2)
        seen = _by_epoch(stream)
        assert stream.servers == c.targets
    assert len(whole) == IMAGES
    assert sorted(seen) == [0, 1]
    for epoch in (0, 1):
        assert sorted(seen[epoch]) == whole


def test_a_dns_name_of_a_literal_address_is_one_server(fleet):
    with sluice.Client(["dns:///" + fleet[0].target, fleet[1].target]) as c:
        assert c.targets == ["ipv4:" + fleet[0].target, fleet[1].target]
        images = sum(len(b.labels) for b in c.stream("ordered", batch_size=20))
    assert images == IMAGES


def test_one_shard_server_alone_fails_naming_the_missing_shard(fleet, caplog):
    with sluice.Client(fleet[0].target) as c:
        with pytest.raises(sluice.SluiceError) as e:
            c.stream("ordered")
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert ("%s serves shard 0 of 2 of 'ordered'; no target serves shard 1 (targets "
                "reached: %s)" % (fleet[0].target, fleet[0].target)) in e.value.message
        assert "allow_partial_fleet" in e.value.message
        # Asked for explicitly: that server's part, with a warning.
        with caplog.at_level("WARNING", logger="sluice"):
            part = sum(len(b.labels) for b in c.stream("ordered", allow_partial_fleet=True))
    assert part == IMAGES // 2
    assert any("no target serves shard 1" in r.getMessage() for r in caplog.records)


def test_an_error_from_one_server_ends_the_fan_in_stream(sluice_bin, data_dir, fleet, tmp_path):
    lost = Server(sluice_bin, tmp_path, data_dir, args=["--shard", "1/2"])
    try:
        with sluice.Client([fleet[0].target, lost.target], reconnect_deadline=1.0) as c:
            stream = c.stream("train", seed=3, prefetch=1)  # repeats forever
            next(stream)
            lost.kill()
            with pytest.raises(sluice.SluiceError) as e:
                for _ in stream:
                    pass
    finally:
        lost.stop()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and e.value.target == lost.target


@pytest.mark.parametrize("target, expected", [
    ("a:1", ["a:1"]),
    ("a:1, b:2,a:1", ["a:1", "b:2"]),
    (["a:1", "b:2,c:3"], ["a:1", "b:2", "c:3"]),
    ("ipv4:10.0.0.1:1,10.0.0.2:2", ["ipv4:10.0.0.1:1", "ipv4:10.0.0.2:2"]),
    ("ipv6:[::1]:1,[::2]:2", ["ipv6:[::1]:1", "ipv6:[::2]:2"]),
    ("unix:/tmp/a,b.sock", ["unix:/tmp/a,b.sock"]),
    ("dns:///127.0.0.1:7", ["ipv4:127.0.0.1:7"]),
    ("dns:[::1]:7", ["ipv6:[::1]:7"]),
])
def test_targets_split_and_resolve_as_the_cpp_client_does(target, expected):
    assert resolve_targets(target) == expected


@pytest.mark.parametrize("target, error", [
    ("", ValueError), ([], ValueError), ("a:1,,b:2", ValueError), ("dns:///nohostport", ValueError),
    ("dns:///no-such-host.invalid:7", sluice.SluiceError),
])
def test_malformed_or_unresolvable_targets_fail_at_once(target, error):
    with pytest.raises(error):
        resolve_targets(target)


def test_a_dual_stack_name_is_one_server_per_host_not_one_per_address_family(monkeypatch):
    # localhost on many systems, and pods with A and AAAA records: the same servers twice over.
    import socket
    answers = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 50051, 0, 0)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 50051)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.2", 50051))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: answers)
    assert resolve_targets("dns:///sluice:50051") == ["ipv4:127.0.0.1:50051",
                                                      "ipv4:10.0.0.2:50051"]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: answers[:1])
    assert resolve_targets("dns:///sluice:50051") == ["ipv6:[::1]:50051"]


def test_fleet_problems_name_missing_doubled_and_mismatched_shards():
    assert fleet_problem("t", []) is None
    assert fleet_problem("t", [("a", 0, 1), ("b", 0, 1)]) is None  # replicas of all of it
    assert fleet_problem("t", [("a", 1, 2), ("b", 0, 2)]) is None
    assert fleet_problem("t", [("a", 0, 3), ("b", 0, 3)]) == (
        "a serves shard 0 of 3 of 't', b serves shard 0 of 3 of 't'; no target serves shards "
        "1, 2; shard 0 is served by a and b (its records would come 2 times) (targets reached: "
        "a, b)")
    assert "disagree" in fleet_problem("t", [("a", 0, 2), ("b", 0, 1)])


@pytest.mark.parametrize("equal_shares", ["pad", "drop", "off"])
def test_describe_sums_every_servers_plan_as_the_fan_in_stream_delivers(fleet, equal_shares):
    # Each server serves 100 records (2 of the 4 files); 3 consumers split each server's part
    # unevenly, so equal shares pad or drop within each server, and the fan-in's batches per
    # epoch are the sum of the two servers' plans.
    target = [fleet[0].target, fleet[1].target]
    with sluice.Client(target) as c:
        valid_ids = []
        for rank in range(3):
            args = dict(batch_size=8, shard=(rank, 3), equal_shares=equal_shares,
                        record_ids=True)
            plan = c.describe("ordered", **args)
            assert [t for t, _ in plan.plans] == c.targets
            assert plan.equal_shares == equal_shares and plan.mode == "eval"
            assert plan.batches_per_epoch == sum(p.batches_per_epoch for _, p in plan.plans)
            each = [p.batches_per_epoch for _, p in plan.plans]
            with sluice.Client(target[0]) as one:
                alone = one.describe("ordered", allow_partial_fleet=True, **args)
            assert alone.batches_per_epoch == each[0]
            batches = list(c.stream("ordered", **args))
            assert len(batches) == plan.batches_per_epoch
            for b in batches:
                valid_ids += [tuple(i) for i, ok in zip(
                    b.record_ids, b.valid if b.valid is not None else [True] * len(b.labels))
                    if ok]
    # Padding repeats records under a False mask; dropping loses the counted tails; off is
    # every record as it is.
    if equal_shares == "drop":
        assert len(set(valid_ids)) == len(valid_ids) < IMAGES
    else:
        assert len(set(valid_ids)) == len(valid_ids) == IMAGES


def test_describe_refuses_what_the_stream_refuses(fleet):
    with sluice.Client([fleet[0].target, fleet[1].target]) as c:
        with pytest.raises(sluice.SluiceError) as e:
            c.describe("ordered", batch_size=100000)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(ValueError, match="equal_shares"):
            c.describe("ordered", equal_shares="even")


def test_a_fan_in_stream_resumes_each_server_after_its_own_last_batch(fleet):
    target = [fleet[0].target, fleet[1].target]
    args = dict(batch_size=12, seed=6, epochs=2, record_ids=True)
    with sluice.Client(target) as c:
        whole = [(b.position.epoch, tuple(i)) for b in c.stream("train", **args)
                 for i in b.record_ids]
        stream = c.stream("train", **args)
        before = []
        for b in stream:
            before += [(b.position.epoch, tuple(i)) for i in b.record_ids]
            if len(before) >= 5 * 12:
                break
        positions = dict(stream.positions)
        stream.close()
        assert sorted(positions) == sorted(c.targets)
        resumed = c.stream("train", start_position={t: p.after() for t, p in positions.items()},
                           **args)
        after = [(b.position.epoch, tuple(i)) for b in resumed for i in b.record_ids]
        with pytest.raises(ValueError, match="does not stream from"):
            c.stream("train", start_position={"elsewhere:1": (0, 0, 0)})
    # Every record of both epochs once: nothing lost or repeated across the stop.
    assert len(set(before + after)) == len(before + after) == len(whole)
    assert sorted(before + after) == sorted(whole)


def test_tf_dataset_from_an_unsharded_fan_in_asserts_no_cardinality(fleet):
    # Each server's own --shard is read whole (no equal shares among the request's consumers):
    # its plan's batch count is an upper bound, which assert_cardinality would turn into an
    # error when records turn out corrupt.
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    target = [fleet[0].target, fleet[1].target]
    ds = sluice.tf.dataset(target, "train", batch_size=16, image_size=32)
    assert int(ds.cardinality()) == int(tf.data.UNKNOWN_CARDINALITY)
    sharded = sluice.tf.dataset(target, "train", batch_size=16, image_size=32, shard=(0, 2))
    assert int(sharded.cardinality()) == sum(1 for _ in sharded)


class _ArraysServer(Server):
    """The dataset "train" either labelled without features, or unlabeled with the label read
    as the feature "cls"."""

    def __init__(self, *args, unlabeled, **kwargs):
        self.unlabeled = unlabeled
        super().__init__(*args, **kwargs)

    def datasets(self):
        if not self.unlabeled:
            return self.train_dataset("")
        return f"""datasets {{
  name: "train"
  pipeline {{
    {self.files} batch_size: 16 image_height: {SIZE} unlabeled: true
    features {{ key: "image/class/label" name: "cls" type: FEATURE_TYPE_INT64
               shape: FEATURE_SHAPE_SCALAR }}
  }}
}}
"""


@pytest.mark.parametrize("shared_memory", [False, True])
def test_fan_in_over_an_unlabeled_server_with_a_feature_and_a_labelled_one_is_refused(
        sluice_bin, data_dir, tmp_path_factory, shared_memory):
    servers = [_ArraysServer(sluice_bin, tmp_path_factory.mktemp("arrays"), data_dir,
                             unlabeled=u) for u in (True, False)]
    try:
        with sluice.Client([s.target for s in servers]) as c:
            with pytest.raises(sluice.SluiceError) as e:
                with c.stream("train", epochs=1, shared_memory=shared_memory) as stream:
                    for _ in stream:
                        pass
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "unlabeled, features [cls FEATURE_TYPE_INT64[]]" in e.value.message
        assert "labelled, features []" in e.value.message
        assert e.value.target == servers[1].target
        assert servers[0].target in e.value.message and servers[1].target in e.value.message
    finally:
        for s in servers:
            s.stop()


def _batch(n, labels, ragged):
    message = service_pb2.Batch(shape=[n, 2, 2, 3], images=bytes(n * 12))
    if labels:
        message.labels.extend([0] * n)
    message.features.add(name="tags", type=1, row_lengths=[0] * n if ragged else [],
                         values=b"" if ragged else bytes(8 * n))
    return sluice.decode_batch(message.SerializeToString())[0]


def test_the_per_batch_check_takes_a_batch_of_zero_samples_as_any_labels_and_raggedness():
    # 0 samples show neither labels nor row_lengths: they agree with either, and what a later
    # batch shows is then held to.
    empty = _format(_batch(0, labels=False, ragged=False))
    merged = _merge_format(empty, _format(_batch(2, labels=False, ragged=True)))
    assert merged is not None
    assert _merge_format(merged, _format(_batch(3, labels=False, ragged=True))) is not None
    assert _merge_format(merged, _format(_batch(3, labels=True, ragged=True))) is None
    assert _merge_format(merged, _format(_batch(3, labels=False, ragged=False))) is None
    assert "unlabeled, features [tags int64[] ragged]" in _format_name(merged)

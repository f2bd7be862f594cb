"""The Python client (client/python, package `sluice`) against a real `sluice serve` on an ephemeral
port: the numpy stream, its wire decoding, resume after a server restart, errors, tune_malloc.
The PyTorch and tf.data adapters are in test_client_frameworks.py; the server and data set
fixtures in client_support.py.

Torch tests have "torch" in their names: ctest runs them in build/venv-torch (Debian's PyTorch) and
the rest in build/venv (TensorFlow); in a venv without torch or TensorFlow those tests skip.
"""
import gc
import hashlib
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

import sluice
from client_support import IMAGES, SIZE, Server, digest, read_tfrecords
from sluice.v1 import service_pb2, service_pb2_grpc


# --- the numpy stream ------------------------------------------------------------------------

def test_datasets_lists_names_defaults_and_limits(client):
    infos = {d.name: d for d in client.datasets()}
    assert set(infos) == {"train", "ordered"}
    train = infos["train"]
    assert (train.files, train.num_classes, train.batch_size, train.image_height,
            train.image_width, train.max_batch_size) == (4, 4, 16, SIZE, SIZE, 64)
    stats = client.stats()
    assert {d.name for d in stats.datasets} == {"train", "ordered"}


def test_stream_yields_a_zero_copy_view_of_each_message(client):
    with client.stream("train", batch_size=8, image_size=(48, 40), seed=1, epochs=1,
                       shared_memory=False) as stream:
        images, labels, position = next(stream)
    assert images.shape == (8, 48, 40, 3) and images.dtype == np.uint8
    assert labels.shape == (8,) and labels.dtype == np.int32
    assert position == sluice.Position(epoch=0, index=0, end_record=8)
    assert position.shuffle_bytes == 0  # small records: the shuffle's byte share never bound
    # A view of the bytes gRPC received, not a copy: no array in the chain owns memory.
    assert not images.flags.owndata and not images.flags.writeable
    base = images
    while isinstance(base, np.ndarray):
        assert not base.flags.owndata
        base = base.base
    assert isinstance(base, bytes) and len(base) > images.nbytes
    assert images.std() > 10  # real pixels, not zeros


def _wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return condition()


def test_shared_memory_stream_equals_the_socket_stream_and_gives_its_slots_back(client):
    socket = [digest(*b) for b in client.stream("train", batch_size=24, seed=11, epochs=2,
                                                shared_memory=False)]
    with client.stream("train", batch_size=24, seed=11, epochs=2, shared_memory=True) as stream:
        shared = []
        for images, labels, position in stream:
            assert not images.flags.writeable and not images.flags.owndata
            shared.append(digest(images, labels, position))
        assert stream.shared_memory_batches == len(socket)
    assert shared == socket
    stats = client.stats()
    assert _wait_for(lambda: client.stats().shared_memory_streams == 0), stats
    # Every slot given back (the loop's last batch too) and the segment closed (the attach key
    # cleared): the server punches its pages out and releases the reservation.
    del images
    assert _wait_for(lambda: client.stats().shared_memory_bytes == 0), client.stats()


def test_a_stream_closed_while_a_batch_is_held_keeps_its_segment_accounted_until_released(client):
    with client.stream("train", batch_size=16, seed=5, epochs=1, shared_memory=True) as stream:
        images, _, _ = next(iter(stream))
    assert _wait_for(lambda: client.stats().shared_memory_streams == 0)
    # The held batch still maps its slot: the segment stays counted in max_shared_memory_bytes.
    assert client.stats().shared_memory_bytes > 0
    first = bytes(images[0, 0, 0])
    assert bytes(images[0, 0, 0]) == first  # still readable, not punched out under it
    del images
    assert _wait_for(lambda: client.stats().shared_memory_bytes == 0), client.stats()


def test_the_default_stream_from_a_local_server_is_shared_memory_and_may_keep_every_batch(
        client):
    """shared_memory=None (the default): shared memory from a loopback target, and a caller that
    keeps every batch (list()) never blocks nor fails: past max_held each batch is copied out
    of its slot, and the batches kept in their slots are never overwritten by the server."""
    request = dict(batch_size=16, seed=5, epochs=2)
    socket = [digest(*b) for b in client.stream("train", shared_memory=False, **request)]
    stream = client.stream("train", **request)
    max_held, slots = 4, 2 + 4 + 1  # the defaults: the segment's slots are prefetch + max_held + 1
    batches = list(stream)
    assert len(batches) == len(socket) > max_held + slots
    assert stream.shared_memory_batches == len(batches)
    assert stream.held_batches == max_held
    assert stream.copied_batches == len(batches) - max_held
    # Compared only now, after the server has filled every slot many times over.
    assert [digest(*b) for b in batches] == socket
    for b in batches:
        assert not b.images.flags.writeable  # as a view of a message or a slot
    del b
    batches.clear()
    assert _wait_for(lambda: stream.held_batches == 0)
    assert _wait_for(lambda: client.stats().shared_memory_bytes == 0), client.stats()


def test_the_default_stream_from_a_server_on_another_address_takes_the_socket(
        sluice_bin, data_dir, tmp_path, client):
    """A target that is neither a unix: socket nor loopback is taken for another host: the
    default asks no shared memory of it (the server would decline such a peer anyway, so the
    request is what shows the client's choice)."""
    import socket as sockets
    # The address this host would send from to another network (a UDP connect sends nothing).
    with sockets.socket(sockets.AF_INET, sockets.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
            address = probe.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this host has no IPv4 address but loopback")
    s = Server(sluice_bin, tmp_path, data_dir, host=address)
    try:
        with sluice.Client(s.target) as c:
            with c.stream("train", batch_size=16, seed=5, epochs=1) as stream:
                assert not any(r._request.shared_memory for r in stream._readers)
                remote = [digest(*b) for b in stream]
                assert stream.shared_memory_batches == 0 and stream.copied_batches == 0
        # The same data and config as the loopback server's: the same batches.
        assert remote == [digest(*b) for b in client.stream("train", batch_size=16, seed=5,
                                                            epochs=1, shared_memory=False)]
    finally:
        s.stop()


# Run in another PID namespace (unshare, its own /proc): the server's /proc/PID/fd/N, which
# names its segment, does not exist there. Prints, per stream: whether its request asked for
# shared memory, its batches, those through shared memory; then the "sluice" warnings.
_OTHER_NAMESPACE_CLIENT = """
import json, logging, sys
import sluice
warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
logging.getLogger("sluice").addHandler(handler)
streams = []
with sluice.Client(sys.argv[1]) as c:
    for shared_memory in (None, None, True):
        with c.stream("train", batch_size=16, seed=5, epochs=1,
                      shared_memory=shared_memory) as stream:
            asked = stream._readers[0]._request.shared_memory
            batches = sum(1 for _ in stream)
            streams.append([asked, batches, stream.shared_memory_batches])
print(json.dumps([streams, warnings]))
"""


def test_a_local_server_whose_segment_this_process_cannot_open_is_asked_no_more(client,
                                                                                 server):
    """A loopback server whose segment this process cannot map (another PID namespace here;
    another uid or a hidepid /proc alike): the first default stream logs why and takes the
    socket, and later default streams do not ask that server for shared memory (each ask
    costs the server's 2 s attach timeout); shared_memory=True still asks, and logs."""
    import json
    import os
    unshare = ["unshare", "--pid", "--fork", "--mount-proc"]
    if os.geteuid() != 0:
        unshare.insert(1, "--map-root-user")
    if subprocess.run(unshare + ["true"], capture_output=True).returncode != 0:
        pytest.skip("no PID namespace for this user (unshare %s)" % " ".join(unshare[1:]))
    proc = subprocess.run(unshare + [sys.executable, "-c", _OTHER_NAMESPACE_CLIENT,
                                     server.target],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    streams, warnings = json.loads(proc.stdout.splitlines()[-1])
    batches = -(-IMAGES // 16)
    assert streams == [[True, batches, 0], [False, batches, 0], [True, batches, 0]]
    assert len(warnings) == 2, warnings
    assert "cannot map the server's shared-memory segment /proc/" in warnings[0]
    assert "No such file or directory" in warnings[0]
    assert "ask %s for shared memory no more" % server.target in warnings[0]
    assert "shared_memory=True keeps asking" in warnings[1]
    # In this process the same server's segment maps.
    with client.stream("train", batch_size=16, seed=5, epochs=1) as stream:
        assert sum(1 for _ in stream) == stream.shared_memory_batches == batches


def test_holding_more_than_max_held_shared_batches_raises_instead_of_waiting(client):
    socket = [digest(*b) for b in client.stream("train", batch_size=16, seed=5, epochs=1,
                                                shared_memory=False)]
    stream = client.stream("train", batch_size=16, seed=5, epochs=1, shared_memory=True,
                           max_held=2, prefetch=1)
    with stream:
        held = [next(stream), next(stream)]
        time.sleep(0.3)  # the server fills what slots are free, then must wait for ours
        with pytest.raises(sluice.SluiceError) as e:
            next(stream)
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "max_held" in e.value.message
        # Held batches were never overwritten.
        assert [digest(*b) for b in held] == socket[:2]
        first = held.pop(0)
        images = first.images[1:]  # a view of its images keeps its slot too
        expected = np.array(images)
        del first
        gc.collect()
        with pytest.raises(sluice.SluiceError):
            next(stream)
        time.sleep(0.1)
        assert np.array_equal(images, expected)
        del images
        held.clear()
        assert _wait_for(lambda: stream._held.value == 0)
        # A plain loop holds one batch (the loop variable's) while it asks for the next.
        rest = [digest(*b) for b in stream]
    assert stream.shared_memory_batches == len(socket)
    assert rest == socket[2:]


def test_stream_equals_a_plain_protobuf_client_for_the_same_seed(server, client):
    """The copy-free decoder against protobuf's own parse of the same stream (what the C++
    client and any generated client read): every batch's pixels, labels and position agree."""
    request = service_pb2.StreamRequest(dataset="train", batch_size=24, seed=11, epochs=2)
    with grpc.insecure_channel(server.target,
                               options=[("grpc.max_receive_message_length", -1)]) as channel:
        reference = [(hashlib.sha1(b.images).hexdigest(), list(b.labels),
                      (b.position.epoch, b.position.index, b.position.end_record))
                     for b in service_pb2_grpc.DataServiceStub(channel).StreamBatches(request)]
    ours = [digest(*b) for b in client.stream("train", batch_size=24, seed=11, epochs=2)]
    assert len(reference) == 2 * -(-IMAGES // 24)
    assert ours == reference
    # Deterministic: the same seed gives the same stream; another seed, another one.
    again = [digest(*b) for b in client.stream("train", batch_size=24, seed=11, epochs=2)]
    other = [digest(*b) for b in client.stream("train", batch_size=24, seed=12, epochs=2)]
    assert again == ours
    assert [d[0] for d in other] != [d[0] for d in ours]


def test_eval_stream_matches_an_independent_decode_of_the_records(client, data_dir):
    """EVAL in file order: labels are the records' labels, and each image is TensorFlow's decode
    of the record, centre-cropped to 224/256 of its shorter side and resized (within the small
    differences of DCT-domain scaling and filters; a mirrored or shifted crop is far off)."""
    tf = pytest.importorskip("tensorflow")
    records = list(read_tfrecords(sorted(data_dir.glob("train-*.tfrecord"))))
    images = np.concatenate([b.images for b in client.stream("ordered")])
    labels = np.concatenate([b.labels for b in client.stream("ordered")])
    assert images.shape == (IMAGES, SIZE, SIZE, 3)
    examples = [tf.train.Example.FromString(r) for r in records]
    assert labels.tolist() == [e.features.feature["image/class/label"].int64_list.value[0]
                               for e in examples]
    errors, mirrored = [], []
    for example, got in zip(examples[::10], images[::10]):
        jpeg = example.features.feature["image/encoded"].bytes_list.value[0]
        decoded = tf.io.decode_jpeg(jpeg, channels=3)
        h, w = decoded.shape[:2]
        side = min(round(0.875 * min(h, w)), min(h, w))
        top, left = round((h - side) / 2), round((w - side) / 2)
        crop = decoded[top:top + side, left:left + side]
        expected = tf.image.resize(crop, (SIZE, SIZE), method="bilinear", antialias=True)
        expected = tf.cast(tf.round(expected), tf.int32).numpy()
        errors.append(np.abs(expected - got.astype(np.int32)).mean())
        mirrored.append(np.abs(expected[:, ::-1] - got.astype(np.int32)).mean())
    # Mean absolute differences: ~1-6 levels on these noisy photos; the mirror image is 15+ off.
    assert np.median(errors) < 4 and max(errors) < 8, errors
    assert all(3 * e < m for e, m in zip(errors, mirrored)), (errors, mirrored)


@pytest.mark.parametrize("equal_shares", ["off", "pad"])
def test_shards_are_disjoint_and_together_cover_the_epoch(client, equal_shares):
    # "off": each share as the sharding rule makes it; "pad" ("ordered" is eval, so also the
    # default): as many batches for every share, the repeats marked invalid.
    seen, counts = [], set()
    for index in range(3):
        batches = list(client.stream("ordered", shard=(index, 3), equal_shares=equal_shares))
        counts.add(len(batches))
        for b in batches:
            valid = b.valid if b.valid is not None else [True] * len(b.labels)
            seen += [hashlib.sha1(image).hexdigest() for image, ok in zip(b.images, valid) if ok]
    assert len(counts) == (1 if equal_shares == "pad" else 2)
    whole = [hashlib.sha1(image).hexdigest()
             for b in client.stream("ordered") for image in b.images]
    assert len(seen) == IMAGES and sorted(seen) == sorted(whole)


def test_shared_job_gives_each_batch_to_one_consumer(client):
    got = [[], []]

    def consume(k):
        with sluice.Client(client.target) as c:
            for images, _, _ in c.stream("ordered", job_name="shared-test"):
                got[k] += [hashlib.sha1(image).hexdigest() for image in images]
                time.sleep(0.01)  # let the other consumer take some

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got[0]) + len(got[1]) == IMAGES
    assert not set(got[0]) & set(got[1])


@pytest.mark.parametrize("equal_shares", ["drop", "pad"])
def test_three_lockstep_consumers_of_a_job_get_equal_batches_and_every_record_once(
        client, equal_shares):
    """num_consumers=3: batch i of each epoch of the job goes to consumer i mod 3, and the epoch
    holds a multiple of 3 full batches: 200 records in batches of 20 fill 10, so "drop" gives 9
    (the last 20 records dropped) and "pad" 12 (40 padding samples, marked invalid)."""
    request = dict(batch_size=20, image_size=32, seed=4, epochs=2, record_ids=True,
                   job_name="lockstep-" + equal_shares, num_consumers=3,
                   equal_shares=equal_shares)
    per_consumer = {"drop": 3, "pad": 4}[equal_shares]
    plans = [client.describe("train", consumer_index=k, **request) for k in range(3)]
    assert [(p.num_consumers, p.batches_per_epoch, p.records_per_epoch) for p in plans] == [
        (3, per_consumer, IMAGES)] * 3
    got, errors = [None] * 3, []

    def consume(k):
        try:
            with sluice.Client(client.target) as c:
                got[k] = [(b.position, b.record_ids.tolist(),
                           b.valid.tolist() if b.valid is not None else [True] * len(b.labels))
                          for b in c.stream("train", consumer_index=k, **request)]
        except Exception as e:  # noqa: BLE001 - reported by the test's thread
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and all(g is not None for g in got), errors
    for epoch in range(2):
        valid = []
        for k in range(3):
            batches = [b for b in got[k] if b[0].epoch == epoch]
            assert len(batches) == per_consumer
            assert all(len(ids) == 20 for _, ids, _ in batches)  # full batches only
            assert [p.index % 3 for p, _, _ in batches] == [k] * per_consumer
            valid += [tuple(i) for _, ids, ok in batches for i, v in zip(ids, ok) if v]
        assert len(valid) == len(set(valid)) == (180 if equal_shares == "drop" else IMAGES)
    # Another epoch, another order.
    assert [ids for p, ids, _ in got[0] if p.epoch == 0] != [
        ids for p, ids, _ in got[0] if p.epoch == 1]


class _CutProxy:
    """A TCP relay to a server whose connections the test cuts, as a network does: hold() keeps
    reading what the server sends without passing it on (the server counts it written), and
    cut() closes every connection, losing what was kept. Connections made later relay as usual.
    """

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.target = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._cv = threading.Condition()
        self._holding = False  # guarded by _cv
        self._held = 0         # bytes from the server kept back; guarded by _cv
        self._hold_after = 0   # bytes each connection passes on before holding; guarded by _cv
        self._sockets = []     # guarded by _cv
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(self._upstream)
            with self._cv:
                self._sockets += [down, up]
            threading.Thread(target=self._relay, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._relay, args=(up, down, True), daemon=True).start()

    def _relay(self, source, sink, from_server):
        passed = 0      # bytes passed on
        broken = False  # bytes were kept back: nothing after them may pass (cut() may clear
                        # _holding before it closes this connection)
        while True:
            try:
                data = source.recv(1 << 16)
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                with self._cv:
                    if from_server and (self._holding or broken):
                        keep = len(data) if broken else max(
                            len(data) - max(self._hold_after - passed, 0), 0)
                        broken = broken or keep > 0
                        self._held += keep
                        self._cv.notify_all()
                        data = data[:len(data) - keep]
                passed += len(data)
                if data:
                    sink.sendall(data)
            except OSError:
                return

    def hold(self, after=0):
        """Keeps back what the server sends from here on, past the first `after` bytes of each
        connection."""
        with self._cv:
            self._holding, self._hold_after = True, after

    def wait_held(self, nbytes, timeout=60):
        with self._cv:
            return self._cv.wait_for(lambda: self._held >= nbytes, timeout)

    def cut(self):
        with self._cv:
            self._holding = False
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self._listener.close()
        self.cut()


def _consumer_thread(target, index, request, out):
    """A thread (not started) that streams consumer `index` of the lockstep `request` from
    `target` into the list `out`."""
    def consume():
        with sluice.Client(target) as c:
            out.extend(c.stream("train", consumer_index=index, **request))
    return threading.Thread(target=consume)


@pytest.mark.parametrize("record_ids", [True, False])
def test_a_lockstep_consumer_whose_connection_is_cut_gets_padding_for_the_batches_lost(
        server, caplog, record_ids):
    """Consumer 0 of 2 reads through a relay that keeps back what the server writes and then
    cuts the connection: the server counted those batches written, so the reconnected stream
    goes on after them. Padding batches (valid all False) stand in for each, at its position:
    the consumer still gets its 25 batches per epoch, as consumer 1 does. Their record ids are
    -1 when the stream asked for ids, None (as every batch's) when not."""
    # Over the socket (the relay is on this host, where the server would offer shared memory).
    request = dict(batch_size=4, image_size=32, seed=5, epochs=2,
                   job_name="cut-lockstep-%s" % record_ids, num_consumers=2,
                   record_ids=record_ids, shared_memory=False)
    share = [(e, i) for e in range(2) for i in range(0, 50, 2)]
    batch_bytes = 4 * 32 * 32 * 3
    proxy = _CutProxy(server.target)
    other = []
    thread = _consumer_thread(server.target, 1, request, other)
    try:
        with sluice.Client(proxy.target, reconnect_deadline=30) as c:
            stream = c.stream("train", consumer_index=0, **request)
            got = [next(stream), next(stream)]
            # Consumer 1 is not there yet, so the job has made few batches: what the server
            # writes to consumer 0 from here on is kept back by the relay and lost at the cut.
            proxy.hold()
            thread.start()
            assert proxy.wait_held(3 * batch_bytes)
            proxy.cut()
            with caplog.at_level("WARNING", logger="sluice"):
                got.extend(stream)
            thread.join(timeout=120)
    finally:
        proxy.close()
    assert [tuple(b.position)[:2] for b in got] == share
    assert [tuple(b.position)[:2] for b in other] == [(e, i + 1) for e, i in share]
    assert all(b.valid is None or b.valid.all() for b in other)
    padding = [b for b in got if b.valid is not None and not b.valid.any()]
    assert stream.reconnects >= 1
    assert stream.lost_batches == len(padding) >= 2
    assert all(not b.images.any() and not b.labels.any() for b in padding)
    if record_ids:
        assert all(b.record_ids.shape == (4, 2) and (b.record_ids == -1).all() for b in padding)
    else:
        assert all(b.record_ids is None for b in got + other)
    assert all(b.valid is None or b.valid.all() for b in got if not any(b is p for p in padding))
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert lost and "consumer 0 of 2 lost" in lost[0]
    assert sum(int(m.split(" lost ")[1].split()[0]) for m in lost) == len(padding)


def test_a_lockstep_consumer_rejoining_a_running_job_after_a_failed_first_connect_gets_no_padding(
        server):
    """A restarted trainer: consumer 0 of 2 took 3 batches and went; its restart's first
    connection is cut before any batch came (what the server wrote to it kept back by the
    relay), and the reconnect joins the job where it is. The positions before its first batch
    are not taken as lost: no padding, the rest of its share from there."""
    request = dict(batch_size=4, image_size=32, seed=6, epochs=2, job_name="rejoin-lockstep",
                   num_consumers=2, shared_memory=False)
    share = [(e, i) for e in range(2) for i in range(0, 50, 2)]
    proxy = _CutProxy(server.target)
    other = []
    thread = _consumer_thread(server.target, 1, request, other)
    thread.start()
    try:
        with sluice.Client(server.target) as c:
            before = c.stream("train", consumer_index=0, **request)
            for _ in range(3):
                next(before)
            before.close()
        # The HTTP/2 handshake and the plan pass (under 4 KiB); the first batch (12 KiB of
        # images) is kept back, and the connection cut.
        proxy.hold(after=4096)
        cutter = threading.Thread(target=lambda: proxy.wait_held(4 * 32 * 32 * 3) and proxy.cut())
        cutter.start()
        with sluice.Client(proxy.target, reconnect_deadline=30) as c:
            stream = c.stream("train", consumer_index=0, **request)
            got = [tuple(b.position)[:2] for b in stream]
        cutter.join()
        thread.join(timeout=120)
    finally:
        proxy.close()
    assert stream.reconnects >= 1
    assert stream.lost_batches == 0
    assert got and got[0] >= (0, 6) and got[0] in share
    assert got == share[share.index(got[0]):]
    assert [tuple(b.position)[:2] for b in other] == [(e, i + 1) for e, i in share]


@pytest.mark.parametrize("args, error", [
    (dict(num_consumers=2, consumer_index=0), "needs job_name"),
    (dict(job_name="j", num_consumers=2, consumer_index=2), "consumer_index must be in"),
    (dict(job_name="j", num_consumers=2, consumer_index=-1), "consumer_index must be in"),
    (dict(job_name="j", num_consumers=2), "consumer_index must be in"),
    (dict(job_name="j", consumer_index=1), "needs num_consumers"),
    (dict(job_name="j", num_consumers=-2, consumer_index=0), "num_consumers must be 0 or more"),
    (dict(job_name="j", num_consumers=-1), "num_consumers must be 0 or more"),
    (dict(job_name="j", start_position=(1, 2, 32)), r"only at an epoch's start"),
])
def test_lockstep_and_shared_job_arguments_are_checked_before_any_call(args, error):
    client = sluice.Client("127.0.0.1:1")  # nobody listens: the check comes first
    for call in (client.stream, client.describe):
        with pytest.raises(ValueError, match=error):
            call("train", **args)


def test_resume_after_a_server_restart_loses_and_repeats_nothing(sluice_bin, data_dir, tmp_path):
    s = Server(sluice_bin, tmp_path, data_dir)
    try:
        # 160x160 batches of 32, 12 epochs: ~200 MB, far more than gRPC's 64 MB window, so the
        # kill lands mid-stream.
        args = dict(batch_size=32, image_size=160, seed=7, epochs=12)
        with sluice.Client(s.target) as c:
            expected = [digest(*b) for b in c.stream("train", **args)]
            stream = c.stream("train", prefetch=1, **args)
            got = [digest(*next(stream)) for _ in range(3)]
            s.kill()
            time.sleep(0.5)  # the client backs off and retries meanwhile
            s.start()        # same port
            got += [digest(*b) for b in stream]
            assert stream.reconnects >= 1
        assert len(got) == len(expected) == 12 * -(-IMAGES // 32)
        assert got == expected
    finally:
        s.stop()


def _write_shard_with_bad_tail(data_dir, tmp_path, bad=lambda i: i >= 40):
    """44 records of a synth shard, those with bad(i) (default: the last 4) with a damaged byte
    (their data CRC fails)."""
    data = (tmp_path / "data")
    data.mkdir()
    frames = []
    shard = sorted(data_dir.glob("train-*.tfrecord"))[0].read_bytes()
    pos = 0
    while len(frames) < 44:
        (length,) = struct.unpack_from("<Q", shard, pos)
        frame = bytearray(shard[pos:pos + 12 + length + 4])
        if bad(len(frames)):
            frame[12 + 5] ^= 0x20
        frames.append(bytes(frame))
        pos += 12 + length + 4
    (data / "train-0.tfrecord").write_bytes(b"".join(frames))
    return data


def test_skips_after_the_last_batch_reach_skipped_records_at_the_end(sluice_bin, data_dir,
                                                                    tmp_path):
    # With drop_remainder the stream ends after 2 batches of 16, and the 4 skips ride on no batch.
    s = Server(sluice_bin, tmp_path, _write_shard_with_bad_tail(data_dir, tmp_path))
    try:
        with sluice.Client(s.target) as c:
            stream = c.stream("ordered", drop_remainder=True)
            batches = list(stream)
            assert [len(labels) for _, labels, _ in batches] == [16, 16]
            assert stream.skipped_records == 4
    finally:
        s.stop()


def test_skips_count_per_epoch_and_an_epoch_over_skip_warn_percent_is_logged(
        sluice_bin, data_dir, tmp_path, caplog):
    # Every 4th record is bad: 11 of 44. With drop_remainder each epoch gives 2 batches of 16
    # (records 0..20 and 21..41, 5 skips in each); record 43's skip comes after the epoch's last
    # batch and rides on the next epoch's first batch (epoch 1's on the trailers), yet counts for
    # its own epoch. The dropped good record 42 is no skip and is not seen.
    data = _write_shard_with_bad_tail(data_dir, tmp_path, bad=lambda i: i % 4 == 3)
    s = Server(sluice_bin, tmp_path, data)
    try:
        with sluice.Client(s.target) as c, caplog.at_level("WARNING", logger="sluice"):
            stream = c.stream("ordered", epochs=2, drop_remainder=True)
            sizes = [len(labels) for _, labels, _ in stream]
            quiet = c.stream("ordered", epochs=2, drop_remainder=True, skip_warn_percent=50)
            assert sum(len(labels) for _, labels, _ in quiet) == 64
    finally:
        s.stop()
    assert sizes == [16, 16, 16, 16]
    assert stream.skipped_by_epoch == {0: 11, 1: 11} == quiet.skipped_by_epoch
    assert stream.records_by_epoch == {0: 43, 1: 43}
    assert stream.skipped_records == 22
    warnings = [r.getMessage() for r in caplog.records if r.name == "sluice"]
    assert warnings == [
        "stream of 'ordered' from %s: epoch %d skipped 11 of 43 records (25%%, over "
        "skip_warn_percent 10%%); the server's log and GetStats name the reasons" % (s.target, e)
        for e in (0, 1)]


def test_records_by_epoch_counts_no_padding_samples_of_a_padded_shard(client):
    # An EVAL stream of a shard pads its batches up to its peers' equal count (EqualShares PAD):
    # the repeats cover no records, so they must not swell the base of skipped_by_epoch's share.
    stream = client.stream("train", mode="eval", shard=(1, 3), epochs=2, batch_size=16,
                           image_size=32)
    real, padding = {}, 0
    for batch in stream:
        n = len(batch.labels) if batch.valid is None else int(batch.valid.sum())
        real[batch.position.epoch] = real.get(batch.position.epoch, 0) + n
        padding += len(batch.labels) - n
    assert padding > 0  # the case at hand: some samples are padding
    assert stream.records_by_epoch == real and real[0] == real[1] > 0
    assert stream.skipped_by_epoch == {0: 0, 1: 0}


class _FailAfterThreeErrors(Server):
    def config(self):
        return super().config().replace("mode: MODE_EVAL", "mode: MODE_EVAL max_errors: 3")


def test_skips_before_an_error_that_ends_the_stream_reach_skipped_records(sluice_bin, data_dir,
                                                                           tmp_path):
    # The 4th bad record passes max_errors: the stream fails after 2 batches, its trailer holding
    # the 4 skips since the last batch. An error the client does not retry ends the stream, so the
    # trailer counts (a retried one would not: the resumed stream skips those records again).
    s = _FailAfterThreeErrors(sluice_bin, tmp_path, _write_shard_with_bad_tail(data_dir, tmp_path))
    try:
        with sluice.Client(s.target) as c:
            stream = c.stream("ordered")
            got = []
            with pytest.raises(sluice.SluiceError, match="more than max_errors = 3"):
                for _, labels, _ in stream:
                    got.append(len(labels))
            assert got == [16, 16]
            assert stream.skipped_records == 4
    finally:
        s.stop()


def test_unknown_dataset_raises_not_found_with_the_servers_message(client):
    with pytest.raises(sluice.SluiceError) as e:
        client.stream("imagenet")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert "no dataset 'imagenet'" in e.value.message and "train" in e.value.message
    assert isinstance(e.value, Exception) and "NOT_FOUND" in str(e.value)


def test_request_out_of_limits_raises_invalid_argument(client):
    with pytest.raises(sluice.SluiceError) as e:
        client.stream("train", batch_size=65)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "64" in e.value.message


def _free_port():
    import socket
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_port_nobody_listens_on_fails_within_connect_timeout_naming_the_target():
    target = f"127.0.0.1:{_free_port()}"
    start = time.monotonic()
    # The reconnect deadline (after a first batch) is far longer: it does not apply yet.
    with sluice.Client(target, connect_timeout=1.0, reconnect_deadline=60.0) as c:
        with pytest.raises(sluice.SluiceError) as e:
            c.stream("train")
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "connect_timeout 1 s" in e.value.message
    assert e.value.target == target and target in str(e.value)
    assert 1.0 <= time.monotonic() - start < 10


def test_one_unreachable_server_of_two_fails_the_stream_naming_it(server):
    target = f"127.0.0.1:{_free_port()}"
    with sluice.Client([server.target, target], connect_timeout=1.0) as c:
        with pytest.raises(sluice.SluiceError) as e:
            c.stream("train")
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and e.value.target == target


def test_a_server_lost_mid_stream_is_retried_with_each_reconnect_logged_until_the_deadline(
        sluice_bin, data_dir, tmp_path, caplog):
    s = Server(sluice_bin, tmp_path, data_dir)
    try:
        with sluice.Client(s.target, reconnect_deadline=1.5) as c:
            stream = c.stream("train", seed=1, prefetch=1)  # repeats forever
            next(stream)
            s.kill()
            with caplog.at_level("WARNING", logger="sluice"):
                with pytest.raises(sluice.SluiceError) as e:
                    for _ in stream:
                        pass
    finally:
        s.stop()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "gave up reconnecting" in e.value.message and e.value.target == s.target
    reconnects = [r.getMessage() for r in caplog.records if r.name == "sluice"]
    assert len(reconnects) == stream.reconnects >= 2, reconnects
    assert "stream of 'train' from %s: UNAVAILABLE" % s.target in reconnects[0]
    assert "reconnect 1 in 0.1 s" in reconnects[0] and "reconnect 2 in 0.2 s" in reconnects[1]


def test_abandoned_stream_stops_its_reader(client):
    stream = client.stream("train", seed=1)  # repeats forever
    next(stream)
    reader = stream._readers[0]
    del stream
    reader._thread.join(timeout=10)
    assert not reader._thread.is_alive()


def test_the_interpreter_exits_with_a_stream_left_open(server, tmp_path):
    # The stream is left to the interpreter's exit with its reader mid-receive: it is cancelled
    # while the reader thread still runs, not from a finalizer that could wait on a gRPC lock a
    # frozen daemon thread holds (which hung about 1 exit in 3).
    code = ("import sys, sluice; "
            "s = sluice.Client(sys.argv[1]).stream('train', batch_size=64, image_size=224); "
            "next(s)")
    for _ in range(8):
        subprocess.run([sys.executable, "-c", code, server.target], check=True, cwd=tmp_path,
                       timeout=30)


# --- decoding the wire format ------------------------------------------------------------------

def _message(n=2, h=3, w=4, labels=None, images=None, position=(1, 5, 40, 4096)):
    labels = list(range(n)) if labels is None else labels
    images = bytes(range(n * h * w * 3)) if images is None else images
    head = service_pb2.Batch(shape=[n, h, w, 3], labels=labels, skipped_records=2)
    (head.position.epoch, head.position.index, head.position.end_record,
     head.position.shuffle_bytes) = position
    return head.SerializeToString(), service_pb2.Batch(images=images).SerializeToString()


def test_decode_batch_reads_fields_in_any_order():
    head, images = _message(labels=[-1, 7])
    for message in (head + images, images + head):
        batch, skipped = sluice.decode_batch(message)
        assert batch.images.tobytes() == bytes(range(72)) and batch.images.shape == (2, 3, 4, 3)
        assert batch.labels.tolist() == [-1, 7] and batch.labels.dtype == np.int32
        assert batch.position == (1, 5, 40)
        assert batch.position.shuffle_bytes == 4096
        assert batch.position.after() == (1, 6, 40)
        assert batch.position.after().shuffle_bytes == 4096
        epoch, index, end_record = batch.position  # three fields, as before shuffle_bytes
        assert pickle.loads(pickle.dumps(batch.position)).shuffle_bytes == 4096
        assert skipped == 2


@pytest.mark.parametrize("message, error", [
    (_message()[0] + service_pb2.Batch(images=b"x" * 71).SerializeToString(),
     "images holds 71 bytes"),
    (_message(labels=[3])[0] + _message()[1], "1 labels for 2 images"),
    (service_pb2.Batch(shape=[2, 3], labels=[1, 2]).SerializeToString(), "shape must be"),
    (b"".join(_message())[:-5], "runs past the end"),
    (b"\x0b", "wire type 3"),
])
def test_decode_batch_rejects_malformed_messages(message, error):
    with pytest.raises(sluice.SluiceError) as e:
        sluice.decode_batch(message)
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert error in e.value.message


def _per_sample(valid=(), files=(), records=(), packed=True):
    """The per-sample fields as protobuf serializes them, or unpacked (one tag each)."""
    if packed:
        return service_pb2.Batch(valid=valid, record_files=files,
                                 record_indexes=records).SerializeToString()
    return b"".join(service_pb2.Batch(**{name: [v]}).SerializeToString()
                    for name, values in (("valid", valid), ("record_files", files),
                                         ("record_indexes", records)) for v in values)


@pytest.mark.parametrize("packed", [True, False])
def test_decode_batch_reads_the_valid_mask_and_record_ids_packed_or_not(packed):
    head, images = _message(labels=[-1, 7])
    extras = _per_sample([True, False], [3, 0], [1 << 40, 2], packed)
    for message in (head + extras + images, images + extras + head):
        batch, _ = sluice.decode_batch(message)
        images_, labels, position = batch  # still three fields
        assert batch.valid.dtype == np.bool_ and batch.valid.tolist() == [True, False]
        assert batch.record_ids.dtype == np.int64 and batch.record_ids.shape == (2, 2)
        assert batch.record_ids.tolist() == [[3, 1 << 40], [0, 2]]
        again = pickle.loads(pickle.dumps(batch))
        assert again.valid.tolist() == [True, False]
        assert again.record_ids.tolist() == [[3, 1 << 40], [0, 2]]
        assert again.position.shuffle_bytes == 4096 and again.labels.tolist() == [-1, 7]
        assert batch._replace(labels=labels + 1).record_ids is batch.record_ids
    plain, _ = sluice.decode_batch(b"".join(_message()))
    assert plain.valid is None and plain.record_ids is None
    assert pickle.loads(pickle.dumps(plain)).valid is None


@pytest.mark.parametrize("extras, error", [
    (_per_sample(valid=[True]), "valid holds 1 values for 2 images"),
    (_per_sample(files=[0, 1, 2], records=[0, 1, 2]), "record_files holds 3 values for 2 images"),
    (_per_sample(files=[0, 1]), "record_files without record_indexes"),
    (_per_sample(records=[0, 1], packed=False), "record_indexes without record_files"),
    (_per_sample(files=[0, 1], records=[5]), "record_indexes holds 1 values for 2 images"),
])
def test_decode_batch_rejects_per_sample_fields_of_another_length(extras, error):
    head, images = _message()
    with pytest.raises(sluice.SluiceError) as e:
        sluice.decode_batch(head + extras + images)
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert error in e.value.message


def test_tune_malloc_applies_and_streams_still_work(server, tmp_path):
    # In a child process: the setting is process-wide.
    code = ("import sys, sluice; assert sluice.tune_malloc(); "
            "c = sluice.Client(sys.argv[1]); "
            "assert sum(len(b.labels) for b in c.stream('ordered')) == %d" % IMAGES)
    subprocess.run([sys.executable, "-c", code, server.target], check=True, cwd=tmp_path,
                   timeout=60)

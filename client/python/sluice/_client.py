"""sluice.Client: the Python client of `sluice serve` (DataService, proto/sluice/v1/service.proto).

It mirrors the C++ client (client/client.h): several targets, or a "dns:///host:port" name that
resolves to several addresses, fan in: a stream opens one reader per server and hands out their
batches round-robin among those with one ready. Each reader reads ahead `prefetch` batches on its
own thread; before its first batch it gives up after `connect_timeout` seconds, after it on
UNAVAILABLE it reconnects with exponential backoff (0.1 s doubling to 5 s, each attempt logged on
the "sluice" logger) and resumes a private stream right after the last batch it received, so a
deterministic stream loses and repeats nothing; it gives up after `reconnect_deadline` seconds
without a batch.
"""
import atexit
import collections
import logging
import numbers
import socket
import sys
import threading
import time
import weakref

import grpc
import numpy as np

from sluice import _shm
from sluice._errors import SluiceError
from sluice._wire import DTYPES, LAYOUTS, Batch, Position, decode_batch, empty_feature
from sluice.v1 import config_pb2, service_pb2, service_pb2_grpc

log = logging.getLogger("sluice")

_STREAM_METHOD = "/sluice.v1.DataService/StreamBatches"

# A batch is tens of MB: no size limit (the server bounds it with max_batch_bytes), 16 MB HTTP/2
# frames and a 64 MB per-stream window (the C++ client's settings), and a private subchannel per
# channel so that each stream has its own connection. The channel's own reconnect backoff follows
# the stream's (0.1 s to 5 s) so that a restarted server is found as soon as it listens.
_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.http2.max_frame_size", 16 * 1024 * 1024 - 1),
    ("grpc.http2.lookahead_bytes", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 5000),
)

_MODES = {"train": config_pb2.MODE_TRAIN, "eval": config_pb2.MODE_EVAL}
_ON_MAX_HELD = ("copy", "raise", "wait")

# {target: why}: the servers on this host whose shared-memory segment this process could not map
# (another PID namespace or user, /proc mounted hidepid). A server that offers a segment waits
# its attach timeout (2 s) before it sends through the socket, on every call: streams with
# shared_memory=None ask such a target no more. Guarded by _UNMAPPABLE_LOCK.
_UNMAPPABLE = {}
_UNMAPPABLE_LOCK = threading.Lock()
_END = object()  # a server's end of sequence, as a queue item
# gRPC name schemes a comma-separated target may carry; pieces after an ipv4:/ipv6: one without a
# scheme of their own take it ("ipv4:10.0.0.1:1,10.0.0.2:1", as gRPC itself reads such a name).
_SCHEMES = ("ipv4:", "ipv6:", "dns:", "unix:", "unix-abstract:", "vsock:")


def resolve_targets(target):
    """The servers a Client's `target` names, one gRPC target each (ResolveTargets of the C++
    client): a list, or a string of comma-separated targets ("a:1,b:2",
    "ipv4:10.0.0.1:1,10.0.0.2:1"); each "dns:///HOST:PORT" becomes one "ipv4:A:PORT" /
    "ipv6:[A]:PORT" target per address it resolves to. unix: paths are never split. Duplicates
    are dropped (one server read twice would deliver its records twice).

    Raises ValueError for an empty or malformed target, SluiceError(UNAVAILABLE) for a dns: name
    that does not resolve.
    """
    items = [target] if isinstance(target, str) else list(target or ())
    if not items:
        raise ValueError("no target: give HOST:PORT, unix:PATH or dns:///HOST:PORT")
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ValueError("empty target in %r" % (target,))
        item = item.strip()
        pieces = [item] if item.startswith(("unix:", "unix-abstract:")) else item.split(",")
        scheme = pieces[0][:5] if pieces[0].startswith(("ipv4:", "ipv6:")) else ""
        for k, piece in enumerate(pieces):
            piece = piece.strip()
            if not piece:
                raise ValueError("empty target in %r" % item)
            if k > 0 and scheme and not piece.startswith(_SCHEMES):
                piece = scheme + piece
            for resolved in _resolve_dns(piece) if piece.startswith("dns:") else [piece]:
                if resolved not in out:
                    out.append(resolved)
    return out


def _resolve_dns(name):
    host_port = name[4:].lstrip("/")
    host, colon, port = host_port.rpartition(":")
    if not colon or not host or not port:
        raise ValueError("target %r: expected dns:///HOST:PORT" % name)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise SluiceError(grpc.StatusCode.UNAVAILABLE, "cannot resolve %r: %s" % (name, e),
                          name) from None
    # One address family: a dual-stack name (localhost; a pod with A and AAAA records) would
    # otherwise be two streams from one server, reading an unsharded dataset twice. IPv4 when
    # the name has any IPv4 address, as ResolveTargets in the C++ client.
    if any(info[0] == socket.AF_INET for info in infos):
        infos = [info for info in infos if info[0] == socket.AF_INET]
    out = []
    for family, _, _, _, address in infos:
        if family == socket.AF_INET6:
            resolved = "ipv6:[%s]:%s" % (address[0], port)
        elif family == socket.AF_INET:
            resolved = "ipv4:%s:%s" % (address[0], port)
        else:
            continue
        if resolved not in out:
            out.append(resolved)
    if not out:
        raise SluiceError(grpc.StatusCode.UNAVAILABLE, "%r resolves to no address" % name, name)
    return out


class Client:
    """Connection to one `sluice serve`, or to a fleet of them.

    target: "HOST:PORT", "unix:PATH", "dns:///HOST:PORT" (every address it resolves to is a
        server) or any gRPC target name; several as a list or comma-separated (see
        resolve_targets). A stream from several servers reads from all of them (fan-in).
    token: sent as "authorization: Bearer TOKEN" (the server's token_file).
    root_certificates: PEM (bytes or str) of the CAs to trust; set to use TLS (the server's tls).
    rpc_timeout: seconds for datasets() and stats().
    connect_timeout: seconds a stream waits to reach each server before its first batch from
        it; a stopped server or a mistyped port then fails (SluiceError UNAVAILABLE naming the
        target) instead of being retried.
    reconnect_initial, reconnect_max: a stream's reconnect backoff, in seconds.
    reconnect_deadline: after its first batch, a stream gives up (SluiceError UNAVAILABLE) after
        this many seconds without a batch from a server.

    Thread-safe; each stream has its own channels. Create clients after forking (e.g. in each
    DataLoader worker), as with any gRPC client.
    """

    def __init__(self, target, token=None, root_certificates=None, *, rpc_timeout=10.0,
                 connect_timeout=10.0, reconnect_initial=0.1, reconnect_max=5.0,
                 reconnect_deadline=60.0):
        if not target:
            raise ValueError("target must be HOST:PORT, unix:PATH, dns:///HOST:PORT or another "
                             "gRPC target name")
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive, got %r" % (connect_timeout,))
        self.targets = resolve_targets(target)
        self.target = target if isinstance(target, str) else ",".join(target)
        self.rpc_timeout = rpc_timeout
        self.connect_timeout = connect_timeout
        self.reconnect_initial = reconnect_initial
        self.reconnect_max = reconnect_max
        self.reconnect_deadline = reconnect_deadline
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        if isinstance(root_certificates, str):
            root_certificates = root_certificates.encode()
        self._root_certificates = root_certificates
        self._lock = threading.Lock()
        self._stubs = {}  # target -> (channel, stub) for unary calls; guarded by _lock

    def _new_channel(self, target):
        if self._root_certificates is None:
            return grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
        return grpc.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)

    def _stub(self, target):
        with self._lock:
            if target not in self._stubs:
                channel = self._new_channel(target)
                self._stubs[target] = (channel, service_pb2_grpc.DataServiceStub(channel))
            return self._stubs[target][1]

    def _unary(self, method, request):
        try:
            return method(request, timeout=self.rpc_timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise SluiceError.from_rpc_error(e, self.targets[0]) from None

    def datasets(self):
        """The datasets the (first) server serves: a list of sluice.v1.DatasetInfo (name, files,
        num_classes, defaults, limits, fixed_fields, and shard_index/shard_count: the part of the
        files that server serves)."""
        response = self._unary(self._stub(self.targets[0]).ListDatasets,
                               service_pb2.ListDatasetsRequest())
        return list(response.datasets)

    def stats(self, dataset=""):
        """The (first) server's live counters (sluice.v1.Stats), of one dataset or all."""
        return self._unary(self._stub(self.targets[0]).GetStats,
                           service_pb2.GetStatsRequest(dataset=dataset))

    def dataset_info(self, dataset):
        """The DatasetInfo of `dataset` on the first server; SluiceError NOT_FOUND naming the
        datasets it has when it has no such dataset."""
        infos = self.datasets()
        for info in infos:
            if info.name == dataset:
                return info
        raise SluiceError(grpc.StatusCode.NOT_FOUND, "no dataset %r; this server has: %s" % (
            dataset, ", ".join(i.name for i in infos)), self.targets[0])

    def check_fleet(self, dataset, allow_partial_fleet=False, transform_set=None):
        """Asks every server for `dataset`'s shard (DatasetInfo.shard_index/shard_count, a
        server's `--shard I/N`). When the dataset is sharded (count > 1), the servers must serve
        every index 0..count-1 exactly once; otherwise raises SluiceError(FAILED_PRECONDITION)
        naming the missing (or doubly served) shards and the targets reached, or with
        allow_partial_fleet logs that as a warning. A server that does not answer within
        connect_timeout raises SluiceError(UNAVAILABLE) naming it. Servers without the dataset
        are left to the stream (which fails NOT_FOUND). With a transform_set other than ""
        and "default", every server with the dataset must offer it (transform_set_problem);
        every server's batches must carry the first's labels (or none) and features
        (arrays_problem)."""
        request = service_pb2.ListDatasetsRequest()
        calls = [(t, self._stub(t).ListDatasets.future(
            request, timeout=self.connect_timeout, metadata=self._metadata, wait_for_ready=True))
            for t in self.targets]
        shards = []  # (target, index, count) of the servers with the dataset
        first = None  # (target, DatasetInfo) of the first server with the dataset
        for target, call in calls:
            try:
                response = call.result()
            except grpc.RpcError as e:
                for _, other in calls:
                    other.cancel()
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise SluiceError(grpc.StatusCode.UNAVAILABLE,
                                      "no answer within connect_timeout %g s: is `sluice serve` "
                                      "running there, on that port?" % self.connect_timeout,
                                      target) from None
                raise SluiceError.from_rpc_error(e, target) from None
            for info in response.datasets:
                if info.name == dataset:
                    refused = transform_set_problem(info, transform_set, target)
                    if refused is None and first is not None:
                        refused = arrays_problem(first[1], first[0], info, target)
                    first = first or (target, info)
                    if refused is not None:
                        for _, other in calls:
                            other.cancel()
                        raise refused
                    shards.append((target, info.shard_index,
                                   info.shard_count if info.shard_count > 1 else 1))
        problem = fleet_problem(dataset, shards)
        if problem is None:
            return
        if not allow_partial_fleet:
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                              problem + "; pass allow_partial_fleet=True to read only that part",
                              self.target)
        log.warning("%s; reading only that part (allow_partial_fleet)", problem)

    def _request(self, dataset, batch_size=None, image_size=None, mode=None, seed=None,
                 epochs=None, shard=None, job_name=None, start_position=None,
                 drop_remainder=None, equal_shares=None, record_ids=False,
                 consumer_index=None, num_consumers=None, transform_set=None):
        """The StreamRequest of stream()'s and describe()'s arguments."""
        request = service_pb2.StreamRequest(dataset=dataset)
        if transform_set:
            if not isinstance(transform_set, str):
                raise ValueError("transform_set must be the name of one of the dataset's "
                                 "transform sets (DatasetInfo.transform_sets), got %r"
                                 % (transform_set,))
            request.transform_set = transform_set
        if batch_size is not None:
            request.batch_size = batch_size
        if image_size is not None:
            request.image_height, request.image_width = image_hw(image_size)
        if mode is not None:
            request.mode = _parse_mode(mode)
        if seed is not None:
            request.seed = seed
        if epochs is not None:
            request.epochs = epochs
        if shard is not None:
            index, count = shard
            if count < 1 or not 0 <= index < count:
                raise ValueError("shard must be (index, count) with 0 <= index < count, got %r"
                                 % (shard,))
            request.shard.index, request.shard.count = index, count
        if job_name:
            request.job_name = job_name
        if num_consumers is not None and num_consumers < 0:
            raise ValueError("num_consumers must be 0 or more, got %r" % (num_consumers,))
        if num_consumers:
            if consumer_index is None or not 0 <= consumer_index < num_consumers:
                raise ValueError("consumer_index must be in [0, num_consumers), got "
                                 "consumer_index %r of num_consumers %r"
                                 % (consumer_index, num_consumers))
            if not job_name:
                raise ValueError("num_consumers makes the consumers of a shared job: it needs "
                                 "job_name")
            request.consumer_index, request.num_consumers = consumer_index, num_consumers
        elif consumer_index:
            raise ValueError("consumer_index %r needs num_consumers (the job's consumers in "
                             "lockstep)" % (consumer_index,))
        if job_name and start_position is not None and (
                isinstance(start_position, dict) or tuple(start_position)[1:3] != (0, 0)):
            raise ValueError("a shared job (job_name) starts only at an epoch's start, "
                             "(epoch, 0, 0): it names the run of the job that starts there; "
                             "got %r" % (start_position,))
        if isinstance(start_position, dict):
            pass  # one per server: stream() gives each reader its own
        elif start_position is not None:
            _set_position(request.start_position, start_position)
            p = request.start_position
            if len(self.targets) > 1 and (p.index or p.end_record):
                raise ValueError("start_position %r resumes one server's stream; from %d servers "
                                 "only an epoch's start (epoch, 0, 0) applies"
                                 % (tuple(start_position), len(self.targets)))
        if drop_remainder is not None:
            request.drop_remainder = drop_remainder
        if equal_shares is not None:
            request.equal_shares = _parse_equal_shares(equal_shares)
        request.record_ids = bool(record_ids)
        return request

    def describe(self, dataset, batch_size=None, image_size=None, mode=None, seed=None,
                 epochs=None, shard=None, job_name=None, start_position=None,
                 drop_remainder=None, equal_shares=None, record_ids=False,
                 consumer_index=None, num_consumers=None, transform_set=None, **_stream_only):
        """What stream() with these arguments would deliver, without starting it
        (DescribeStream): a StreamPlan, summed over every server of the client as a fan-in
        stream delivers them (batches_per_epoch: a PyTorch dataset's length per epoch). The
        servers must agree on the resolved batch size, image size, mode, epochs and equal shares
        and on what the batches hold (transform set, dtype, layout, mixed labels) (else
        SluiceError FAILED_PRECONDITION naming them). Arguments that only shape the
        transport (prefetch, shared_memory, ...) are accepted and ignored. Raises what stream()
        would raise for the request (SluiceError with the server's status)."""
        request = self._request(dataset, batch_size, image_size, mode, seed, epochs, shard,
                                job_name, start_position, drop_remainder, equal_shares,
                                record_ids, consumer_index, num_consumers, transform_set)
        calls = [(t, self._stub(t).DescribeStream.future(
            request, timeout=self.rpc_timeout, metadata=self._metadata)) for t in self.targets]
        plans = []
        for target, call in calls:
            try:
                plans.append((target, call.result()))
            except grpc.RpcError as e:
                for _, other in calls:
                    other.cancel()
                raise SluiceError.from_rpc_error(e, target) from None
        return StreamPlan(dataset, plans)

    def stream(self, dataset, batch_size=None, image_size=None, mode=None, seed=None,
               epochs=None, shard=None, job_name=None, start_position=None,
               drop_remainder=None, prefetch=2, shared_memory=None, max_held=4,
               on_max_held=None, allow_partial_fleet=False, skip_warn_percent=10,
               equal_shares=None, record_ids=False, consumer_index=None, num_consumers=None,
               transform_set=None):
        """Streams ready batches of `dataset`, from every server of the client (fan-in).
        Returns a BatchStream: iterate it for (images, labels, position) — images uint8
        [N, H, W, 3] by default, else as the transform set's output says (Batch.dtype and
        layout; read-only: a view of the received message, of a shared-memory slot, or a
        copy; see shared_memory), labels int32 [N], position a Position (of the server's
        stream the batch came from); mixed labels (mixup, cutmix) in Batch.mixed_labels and
        label_weights.

        Unset (None) arguments take the dataset's defaults (see datasets()).
        image_size: N or (height, width).
        mode: "train" (random resized crop + flip) or "eval" (centre crop).
        epochs: the stream's last epoch + 1 (counted from epoch 0 even when start_position
            starts later); 0 repeats forever.
        shard: (index, count): this consumer's disjoint part of the data.
        job_name: consumers naming the same job share one pipeline, each batch going to one of
            them (the first to ask, unless num_consumers is given); such a stream rejoins its
            job on reconnect instead of resuming at a position.
        consumer_index, num_consumers: this stream is consumer `consumer_index` (0 <=
            consumer_index < num_consumers) of a shared job (job_name, required) whose
            num_consumers consumers read in lockstep: batch i of each epoch goes to consumer
            i mod num_consumers, and each epoch holds a multiple of num_consumers full batches
            (equal_shares "drop" or "pad"; "off" is refused), so every consumer gets the same
            number of batches of the same size per epoch. Every consumer of the job must give
            the same num_consumers. A consumer's batches wait for it while it reconnects; one
            away longer than the server's job_linger_seconds ends the job for all (ABORTED,
            naming it). Batches the server had written to a connection that broke are lost with
            it: the stream hands out padding batches in their place (zero images, label 0,
            valid all False, at their positions), counted in BatchStream.lost_batches and
            logged, so the consumer keeps its count. None (default): no lockstep.
        start_position: resume a private stream (a Position, or (epoch, index, end_record[,
            shuffle_bytes])): give the last kept batch's position.after(), which carries the
            shuffle's byte share so that a resume under another share is refused, not reordered.
            (epoch, 0, 0) starts at an epoch, exactly as that epoch of a stream from 0; it is the
            only start_position that applies to several servers at once, and the only one a
            shared job takes: there it names the run of the job that starts at that epoch, which
            every stream of the job with the same start epoch shares. From several servers, a
            dict {target: position} (BatchStream.positions of the last kept batch, each
            position's after()) resumes each server's private stream where its own stopped; a
            server it does not name starts at the earliest epoch it names.
        prefetch: batches read ahead per server (at least 1).
        shared_memory: where the images of a server on this host (a unix: or loopback target;
            x86-64 only) come from. None (default) or True: a shared-memory segment, read in
            place instead of through the socket; each batch's images then hold a slot of it
            until nothing references them (the arrays, or any view or tensor made from them),
            and `on_max_held` says what happens once `max_held` such batches are held. False:
            the socket. Other servers always send through the socket, and so does a server that
            declines, or whose segment this process cannot map (another PID namespace or user,
            a hidepid /proc): that is logged (logger "sluice", once per server), and later
            streams of this process with shared_memory=None, and reconnects, ask that server
            for shared memory no more (each ask costs the server's attach timeout, 2 s, before
            it sends through the socket); shared_memory=True keeps asking, logging each time.
        max_held: shared-memory batches whose slots the caller may hold at once (at least 1);
            past it on_max_held applies. Under "copy" it bounds the slots held, not the
            batches: copied ones hold no slot.
        on_max_held: what next() does while `max_held` shared-memory batches are held. "copy"
            (the default with shared_memory=None): the batch it takes is copied out of its slot
            at once, releasing the slot, so the caller may keep any number of batches and next()
            never waits nor raises for it. "raise" (the default with shared_memory=True):
            SluiceError(FAILED_PRECONDITION), rather than wait for a slot only the caller can
            free. "wait": next() waits until another thread releases a held batch; only for
            consumers whose batches another thread always releases (a DataLoader worker's queue
            feeder copies each tensor out and drops it).
        allow_partial_fleet: read a sharded dataset from servers that serve only some of its
            shards, logging a warning, instead of failing (see check_fleet).
        skip_warn_percent: log a warning when an epoch of a server's stream skipped more than
            this share of its records (the server's own threshold is its skip_warn_percent).
        equal_shares: how the consumers of a sharded data set (a `shard` count > 1, within each
            server's own part) are kept equal: None (the dataset's; by default "drop" in train,
            "pad" in eval), "drop" (every consumer the same number of full batches, as many as
            the smallest share fills; the rest is dropped and counted), "pad" (as many as the
            largest share needs; the others repeat their epoch's first samples, marked False in
            Batch.valid) or "off" (each share as it is). See sluice.v1.EqualShares.
        record_ids: each Batch carries record_ids, int64 [N, 2] of (file, record) per sample.
        transform_set: one of the dataset's transform sets by name (DatasetInfo.transform_sets,
            which datasets() lists); None: "default", the pipeline's own. What its batches hold
            (dtype, layout, mixed labels) describe() says. A name the dataset does not offer is
            refused (SluiceError INVALID_ARGUMENT naming it), and so is any set but "default"
            from a server that lists no sets, one older than them (FAILED_PRECONDITION).

        A request the server refuses raises SluiceError here, with the server's status and
        message; errors later in the stream are raised by the iteration.
        """
        request = self._request(dataset, batch_size, image_size, mode, seed, epochs, shard,
                                job_name, start_position, drop_remainder, equal_shares,
                                record_ids, consumer_index, num_consumers, transform_set)
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if max_held < 1:
            raise ValueError("max_held must be at least 1")
        if on_max_held is None:
            on_max_held = "copy" if shared_memory is None else "raise"
        if on_max_held not in _ON_MAX_HELD:
            raise ValueError("on_max_held must be None, 'copy', 'raise' or 'wait', got %r"
                             % (on_max_held,))
        self.check_fleet(dataset, allow_partial_fleet, transform_set)
        starts = _per_server_starts(self.targets, start_position)
        held = _shm.HeldCount()
        hub = threading.Condition()
        readers = []
        try:
            for target in self.targets:
                r = request
                if starts is not None:
                    r = service_pb2.StreamRequest()
                    r.CopyFrom(request)
                    _set_position(r.start_position, starts[target])
                if shared_memory is not False and _shm.supported() and _shm.is_local(target) and (
                        shared_memory or target not in _UNMAPPABLE):
                    r, shared = service_pb2.StreamRequest(), r
                    r.CopyFrom(shared)
                    r.shared_memory = True
                    # Read ahead, being queued, and held: the server never waits on a slot we
                    # cannot free.
                    r.shared_memory_slots = prefetch + max_held + 1
                readers.append(_Reader(self, target, r, prefetch, hub, held, skip_warn_percent,
                                       shared_memory is True))
        except BaseException:
            for r in readers:
                r.stop()
            raise
        return BatchStream(readers, max_held, hub=hub, held=held, on_max_held=on_max_held)

    def close(self):
        """Closes the channels of datasets(), stats() and check_fleet(); streams have their
        own."""
        with self._lock:
            stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _arrays_name(info):
    return "%s, features [%s]" % ("unlabeled" if info.unlabeled else "labelled", ", ".join(
        "%s %s%s%s" % (f.name, config_pb2.FeatureType.Name(f.type), list(f.row_shape),
                       " ragged" if f.ragged else "") for f in info.features))


def arrays_problem(first, first_target, info, target):
    """The SluiceError(FAILED_PRECONDITION) refusing a fan-in over the server at `target`,
    whose DatasetInfo is `info`, and the one at `first_target` (`first`) when their batches carry
    other arrays: labels or none (unlabeled), other features (names, types, raggedness, row
    shapes, in order); None when they agree."""
    key = lambda i: (i.unlabeled, [(f.name, f.type, f.ragged, list(f.row_shape))
                                   for f in i.features])
    if key(first) == key(info):
        return None
    return SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                       "dataset %r: %s serves %s, %s serves %s: the servers of a stream must give "
                       "batches of the same arrays" % (info.name, target, _arrays_name(info),
                                                       first_target, _arrays_name(first)), target)


def transform_set_problem(info, transform_set, target):
    """The SluiceError refusing to stream `transform_set` from the server at `target`, whose
    DatasetInfo is `info`, or None when it offers that set ("" and "default" always are).
    A server older than transform sets lists none and would drop the request's transform_set
    as an unknown field, serving uint8 NHWC batches without a word: FAILED_PRECONDITION. A
    server that lists sets but not this one: INVALID_ARGUMENT, as that server would answer."""
    if transform_set in (None, "", "default"):
        return None
    offered = [s.name for s in info.transform_sets]
    if not offered:
        return SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                           "dataset %r: transform set %r asked of a server that predates "
                           "transform sets (its DatasetInfo lists none): it would serve uint8 "
                           "NHWC batches; upgrade that server" % (info.name, transform_set),
                           target)
    if transform_set not in offered:
        return SluiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           "dataset %r has no transform set %r; this server offers: %s"
                           % (info.name, transform_set, ", ".join(offered)), target)
    return None


def fleet_problem(dataset, shards):
    """What is wrong with the part of a sharded `dataset` that these servers serve, or None.
    shards: (target, shard_index, shard_count) per server that has the dataset, count 1 for a
    server that serves all of it."""
    counts = sorted({count for _, _, count in shards})
    if not counts or counts == [1]:
        return None
    if len(counts) > 1:
        return "the servers disagree on the shards of %r: %s" % (dataset, "; ".join(
            "%s serves %s" % (t, "all of it" if c == 1 else "shard %d of %d" % (i, c))
            for t, i, c in shards))
    count = counts[0]
    serving = collections.defaultdict(list)
    for target, index, _ in shards:
        serving[index].append(target)
    said = ", ".join("%s serves shard %d of %d of %r" % (t, i, count, dataset)
                     for t, i, _ in shards)
    problems = []
    missing = [i for i in range(count) if i not in serving]
    if missing:
        problems.append("no target serves shard%s %s" % (
            "s" if len(missing) > 1 else "", ", ".join(map(str, missing))))
    twice = {i: ts for i, ts in sorted(serving.items()) if len(ts) > 1}
    if twice:
        problems.append("; ".join("shard %d is served by %s (its records would come %d times)"
                                  % (i, " and ".join(ts), len(ts)) for i, ts in twice.items()))
    if not problems:
        return None
    return "%s; %s (targets reached: %s)" % (said, "; ".join(problems),
                                             ", ".join(t for t, _, _ in shards))


_EQUAL_SHARES = {"drop": config_pb2.EQUAL_SHARES_DROP, "pad": config_pb2.EQUAL_SHARES_PAD,
                 "off": config_pb2.EQUAL_SHARES_OFF}
_EQUAL_SHARES_NAMES = {v: k for k, v in _EQUAL_SHARES.items()}


def _parse_equal_shares(value):
    if isinstance(value, str):
        if value.lower() not in _EQUAL_SHARES:
            raise ValueError("equal_shares must be None, 'drop', 'pad' or 'off', got %r" % value)
        return _EQUAL_SHARES[value.lower()]
    if value not in _EQUAL_SHARES.values():
        raise ValueError("equal_shares must be None, 'drop', 'pad', 'off' or a "
                         "sluice.v1.EqualShares value other than DEFAULT, got %r" % (value,))
    return value


class StreamPlan:
    """DescribeStream's answer for a stream from every server of a Client (Client.describe()).

    batch_size, image_size ((height, width)), mode ("train" or "eval"), epochs (0: forever),
    equal_shares ("drop", "pad" or "off"): as the servers resolved the request.
    transform_set, dtype ("uint8", "float16", "bfloat16" or "float32"), layout ("NHWC" or
        "NCHW"), mixes_labels (batches carry mixed_labels and label_weights): what the batches
        hold; image_shape: one image's shape in that layout.
    features: [sluice.v1.FeatureInfo] (name, type, ragged, row_shape), the arrays each batch
        carries in Batch.features, in order; unlabeled: batches carry no labels (None).
    batches_per_epoch, records_per_epoch: the stream's, summed over the servers (batches are
        exact under "drop" and "pad"; under "off" an upper bound when records turn out corrupt).
    min_shard_records, max_shard_records: the smallest and largest share among the stream's
        peers (the request's shard count) on any server.
    num_consumers: the shared job's consumers in lockstep (stream()'s num_consumers), else 0;
        then records_per_epoch is the job's and batches_per_epoch this consumer's.
    plans: [(target, sluice.v1.StreamPlan)], each server's own answer.
    """

    def __init__(self, dataset, plans):
        self.plans = plans
        first = plans[0][1]
        key = lambda p: (p.batch_size, p.image_height, p.image_width, p.mode, p.epochs,
                         p.equal_shares)
        output = lambda p: (p.transform_set, p.dtype, p.layout, p.mixes_labels, p.unlabeled,
                            list(p.features))
        if any(output(p) != output(first) for _, p in plans):
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION, "the servers deliver "
                              "batches of %r differently: %s" % (dataset, "; ".join(
                                  "%s: transform set %r, %s %s%s%s, features [%s]" % (
                                      t, p.transform_set, _name(DTYPES, p.dtype),
                                      LAYOUTS.get(p.layout, p.layout),
                                      ", mixed labels" if p.mixes_labels else "",
                                      ", unlabeled" if p.unlabeled else "",
                                      ", ".join(f.name for f in p.features))
                                  for t, p in plans)), ",".join(t for t, _ in plans))
        if any(key(p) != key(first) for _, p in plans):
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION, "the servers resolve a "
                              "stream of %r differently: %s" % (dataset, "; ".join(
                                  "%s: batch_size %d, image %dx%d, mode %s, epochs %d, "
                                  "equal_shares %s" % ((t,) + key(p)[:3]
                                                       + (config_pb2.Mode.Name(p.mode),
                                                          p.epochs,
                                                          config_pb2.EqualShares.Name(
                                                              p.equal_shares)))
                                  for t, p in plans)), ",".join(t for t, _ in plans))
        self.batch_size = first.batch_size
        self.image_size = (first.image_height, first.image_width)
        self.mode = {v: k for k, v in _MODES.items()}.get(first.mode, first.mode)
        self.epochs = first.epochs
        self.equal_shares = _EQUAL_SHARES_NAMES.get(first.equal_shares, first.equal_shares)
        self.batches_per_epoch = sum(p.batches_per_epoch for _, p in plans)
        self.records_per_epoch = sum(p.records_per_epoch for _, p in plans)
        self.min_shard_records = min(p.min_shard_records for _, p in plans)
        self.max_shard_records = max(p.max_shard_records for _, p in plans)
        self.num_consumers = first.num_consumers
        self.transform_set = first.transform_set
        self.dtype = _name(DTYPES, first.dtype)
        self.layout = LAYOUTS.get(first.layout, first.layout)
        self.mixes_labels = first.mixes_labels
        self.unlabeled = first.unlabeled
        self.features = list(first.features)

    @property
    def image_shape(self):
        """The shape of one image in the batches: (H, W, 3) for NHWC, (3, H, W) for NCHW."""
        height, width = self.image_size
        return (3, height, width) if self.layout == "NCHW" else (height, width, 3)

    def __repr__(self):
        return ("StreamPlan(batches_per_epoch=%d, records_per_epoch=%d, batch_size=%d, "
                "image_size=%r, mode=%r, epochs=%d, equal_shares=%r, transform_set=%r, "
                "dtype=%r, layout=%r, mixes_labels=%r, servers=%d)" % (
                    self.batches_per_epoch, self.records_per_epoch, self.batch_size,
                    self.image_size, self.mode, self.epochs, self.equal_shares,
                    self.transform_set, self.dtype, self.layout, self.mixes_labels,
                    len(self.plans)))


def _name(dtypes, value):
    """The name of a DType value (its number when this client does not know it)."""
    return dtypes[value][0] if value in dtypes else value


def _per_server_starts(targets, start_position):
    """{target: position} of a start_position given per server, or None."""
    if not isinstance(start_position, dict):
        return None
    unknown = sorted(set(start_position) - set(targets))
    if unknown:
        raise ValueError("start_position names %s, which this client does not stream from "
                         "(its servers: %s)" % (", ".join(unknown), ", ".join(targets)))
    if not start_position:
        raise ValueError("start_position: an empty dict names no server's position")
    epoch = min(int(p[0]) for p in start_position.values())
    return {t: start_position.get(t, (epoch, 0, 0)) for t in targets}


def image_hw(image_size):
    """(height, width) of an image_size given as N or (height, width)."""
    if isinstance(image_size, numbers.Integral):
        return int(image_size), int(image_size)
    height, width = image_size
    return int(height), int(width)


def _set_position(message, position):
    """Fills a sluice.v1.Position from a Position or an (epoch, index, end_record[,
    shuffle_bytes]) tuple."""
    if len(position) not in (3, 4):
        raise ValueError("start_position must be (epoch, index, end_record[, shuffle_bytes]), "
                         "got %r" % (position,))
    message.epoch, message.index, message.end_record = position[:3]
    message.shuffle_bytes = (position[3] if len(position) == 4
                             else getattr(position, "shuffle_bytes", 0))


def _parse_mode(mode):
    if isinstance(mode, str):
        if mode.lower() not in _MODES:
            raise ValueError("mode must be 'train' or 'eval', got %r" % mode)
        return _MODES[mode.lower()]
    if mode not in _MODES.values():
        raise ValueError("mode must be 'train', 'eval' or a sluice.v1.Mode value, got %r" % mode)
    return mode


class BatchStream:
    """An iterator of Batch(images, labels, position) tuples; see Client.stream().

    From several servers, batches are taken round-robin among the servers with one ready. The
    iteration ends when every server's stream has ended; an error from any server ends it (and
    stops the others). All batches share the first one's dtype, layout and mixed labels' presence;
    one that differs (servers whose transform sets differ) raises SluiceError(FAILED_PRECONDITION)
    naming both servers and outputs, and ends the stream. Each batch's arrays stay valid as long as they are referenced (they keep
    their message, or their shared-memory slot, alive); nothing is reused.
    Close it (or use it as a context manager) to stop a stream before its end.
    """

    def __init__(self, readers, max_held=4, *, hub, held, on_max_held="raise"):
        self._readers = readers
        self._max_held = max_held
        self._hub = hub    # the condition readers notify when they queue an item or end
        self._held = held  # shared-memory batches handed out and not yet released
        self._on_max_held = on_max_held  # "copy", "raise" or "wait" (Client.stream())
        self._done = [False] * len(readers)  # consumer only
        self._next = 0                       # consumer only: where round-robin starts
        self._closed = False
        self._copied = 0                     # consumer only
        self._format = None  # consumer only: (_format(first batch), its target)
        self.position = None  # of the last batch handed out
        # Each server's last batch handed out: {target: Position}, what start_position takes to
        # resume every server's stream right after it.
        self.positions = {}
        _OPEN_STREAMS.add(self)
        # As the C++ client: wait until every server has answered (a batch or its final status),
        # so that a request a server refuses fails here rather than at the first next().
        with hub:
            hub.wait_for(lambda: all(r.items for r in readers))
            first_error = next((r.items[0] for r in readers
                                if isinstance(r.items[0], SluiceError)), None)
        if first_error is not None:
            self.close()
            raise first_error

    def __iter__(self):
        return self

    def __next__(self):
        if self._closed:
            raise StopIteration
        copy = False
        if self._held.value >= self._max_held:
            if self._on_max_held == "copy":
                copy = True
            elif self._on_max_held == "raise":
                raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                                  "holding %d shared-memory batches (max_held): drop one (and "
                                  "the arrays or tensors made from it) before the next"
                                  % self._held.value, self._readers[0].target)
            else:
                self._held.wait_below(self._max_held)
        item, target = self._take()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, SluiceError):
            self.close()
            raise item
        self._check_format(item.batch if isinstance(item, _Shared) else item, target)
        if isinstance(item, _Shared):
            if copy:
                item = _copied_out(item)
                self._copied += 1
            else:
                item.token.hand_over()
                item = item.batch
        self.position = item.position
        self.positions[target] = item.position
        return item

    def _check_format(self, batch, target):
        """Raises SluiceError(FAILED_PRECONDITION), closing the stream, when `batch` differs
        from the batches before in dtype, layout, whether it has mixed labels or labels, or its
        features' names, types, row shapes and raggedness: a fan-in over servers whose transform
        sets, features or labels disagree would hand one training step a mixture."""
        got = _format(batch)
        if self._format is None:
            self._format = got, target
            return
        first, first_target = self._format
        merged = _merge_format(first, got)
        if merged is not None:
            self._format = merged, first_target
        else:
            self.close()
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                              "batches of %s, after batches of %s from %s: the servers of a "
                              "stream must give one output (their transform sets, features or "
                              "labels differ)" % (_format_name(got), _format_name(first), first_target), target)

    def _take(self):
        """(item, target): the next batch round-robin among the servers with one ready, a
        server's error, or _END once every server's stream has ended."""
        n = len(self._readers)
        with self._hub:
            while True:
                all_done = True
                for k in range(n):
                    i = (self._next + k) % n
                    if self._done[i]:
                        continue
                    items = self._readers[i].items
                    if not items:
                        all_done = False
                        continue
                    item = items.popleft()
                    self._hub.notify_all()  # room in that reader's queue
                    if item is _END:
                        self._done[i] = True
                        continue
                    self._next = (i + 1) % n
                    return item, self._readers[i].target
                if all_done:
                    return _END, None
                self._hub.wait()

    @property
    def servers(self):
        """The servers (resolved targets) this stream reads from."""
        return [r.target for r in self._readers]

    @property
    def reconnects(self):
        """Reconnections made so far, over all servers."""
        return sum(r.reconnects for r in self._readers)

    @property
    def lost_batches(self):
        """Lockstep (num_consumers): batches of this consumer's share that a reconnect lost,
        each handed out as padding (zero images, label 0, valid all False, record_ids -1 when the
        stream asked for them) at its position, so that every consumer gets the same count; each
        loss is logged. Positions before the stream's first batch are not counted: a consumer
        that joins a running job (a restarted trainer) starts wherever the job is."""
        return sum(r.lost_batches for r in self._readers)

    @property
    def shared_memory_batches(self):
        """Batches received so far whose images came through shared memory."""
        return sum(r.shared_batches for r in self._readers)

    @property
    def copied_batches(self):
        """Shared-memory batches next() copied out of their slots because max_held were held
        (on_max_held "copy"). Copies the caller makes are not counted (SluiceDataset's
        DataLoader workers, under "wait", copy the batch that makes max_held themselves)."""
        return self._copied

    @property
    def held_batches(self):
        """Shared-memory batches handed out whose slots are not yet released (see max_held)."""
        return self._held.value

    @property
    def skipped_records(self):
        """Corrupt or unusable records the servers skipped in this stream so far: those of the
        batches received, and at the end of a server's stream those after its last batch."""
        return sum(r.epochs.total_skipped for r in self._readers)

    @property
    def skipped_by_epoch(self):
        """{epoch: records skipped} over the batches received so far, from all servers. The
        skips after an epoch's last batch count when the next epoch's first batch (or the
        stream's end) reports them."""
        return _merge(r.epochs.snapshot()[0] for r in self._readers)

    @property
    def records_by_epoch(self):
        """{epoch: records} that the batches received so far covered, skipped ones included
        (their positions' end_record; padding samples, Batch.valid false, are no records): the
        base of skipped_by_epoch's share."""
        return _merge(r.epochs.snapshot()[1] for r in self._readers)

    def close(self):
        """Cancels the calls and stops the reader threads. Idempotent."""
        self._closed = True
        _OPEN_STREAMS.discard(self)
        for r in self._readers:
            r.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # At interpreter exit the readers (daemon threads) may be frozen holding gRPC's locks:
        # _close_at_exit stopped every open stream before that.
        if sys.is_finalizing():
            return
        for r in getattr(self, "_readers", ()):
            r.stop(join=False)


_OPEN_STREAMS = weakref.WeakSet()  # BatchStreams not yet closed


@atexit.register
def _close_at_exit():
    """Cancels the streams still open when the interpreter exits, while their reader threads
    still run (a stream left to the finalizer could wait on a lock a frozen thread holds)."""
    for stream in list(_OPEN_STREAMS):
        stream.close()


def _format(batch):
    """What `batch` shows of its stream's output: (dtype, layout, mixed labels, labels,
    features), None for what a batch of 0 samples does not show (labels' and mixed labels'
    presence, a feature's raggedness)."""
    shown = len(batch.images) > 0
    features = batch._feature_format
    if features is None:
        features = tuple((name, None, None, None) for name in batch.features)
    return (batch.dtype, batch.layout, (batch.mixed_labels is not None) if shown else None,
            (batch.labels is not None) if shown else None, features)


def _merge_format(first, got):
    """`first` with what it did not show filled in from `got`, or None when they differ."""
    def merge(a, b):
        if isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b):
                raise ValueError
            return tuple(merge(x, y) for x, y in zip(a, b))
        if a is None or b is None:
            return b if a is None else a
        if a != b:
            raise ValueError
        return a

    dtype, layout, mixed, labels, features = first
    if (dtype, layout) != got[:2] or [f[0] for f in features] != [f[0] for f in got[4]]:
        return None
    try:
        return (dtype, layout, merge(mixed, got[2]), merge(labels, got[3]),
                tuple(merge(tuple(a), tuple(b)) for a, b in zip(features, got[4])))
    except ValueError:
        return None


def _format_name(fmt):
    dtype, layout, mixed, labels, features = fmt
    shown = lambda v, yes, no: "" if v is None else (yes if v else no)
    return "%s %s%s%s, features [%s]" % (
        dtype, layout, shown(mixed, " with mixed labels", " without mixed labels"),
        shown(labels, ", labelled", ", unlabeled"),
        ", ".join("%s %s%s%s" % (name, type_ or "", list(shape) if shape is not None else "",
                                 shown(ragged, " ragged", ""))
                  for name, type_, shape, ragged in features))


def _merge(dicts):
    out = {}
    for d in dicts:
        for key, value in d.items():
            out[key] = out.get(key, 0) + value
    return dict(sorted(out.items()))


def _real_samples(batch):
    """The samples of `batch` that are records, not padding (Batch.valid false: a repeat that
    covers no record of its own)."""
    return len(batch.images) if batch.valid is None else int(batch.valid.sum())


class _EpochSkips:
    """Records skipped per epoch in one server's stream, and the records each epoch's batches
    covered (thread-safe: the reader adds, the consumer reads).

    A batch's skipped_records are the records skipped since the server's previous batch, which
    may lie in the epoch before; its position's end_record counts the epoch's records up to its
    last image, skipped ones included. So the first batch of an epoch splits its skips: those
    before it in its own epoch (end_record less the images so far) and the rest, which close the
    previous epoch. A shared job's consumer sees only some of the job's batches, whose positions
    leave gaps: there each batch's skips count for its own epoch.
    """

    def __init__(self, what, warn_percent, start_position, shared_job):
        self._what = what
        self._warn_percent = warn_percent
        self._shared_job = shared_job
        self._lock = threading.Lock()
        self._skipped = {}  # epoch -> records skipped; guarded by _lock
        self._records = {}  # epoch -> records covered, skipped ones included; guarded by _lock
        self.total_skipped = 0
        self._epoch = None  # of the last batch; reader thread only
        self._end = 0       # end_record of the last batch; reader thread only
        # A stream started inside an epoch has not seen the records before its start.
        self._start = ((start_position.epoch, start_position.end_record)
                       if start_position is not None else None)

    def add(self, position, images, skipped):
        """Counts a batch of `images` records (its padding samples excluded) at `position`
        that reported `skipped` records."""
        epoch = position.epoch
        if self._shared_job:
            own, carried = skipped, 0
            records = images + skipped
        elif epoch != self._epoch:
            base = 0
            if self._start is not None and self._start[0] == epoch:
                base = self._start[1]
            self._start = None
            own = min(max(position.end_record - base - images, 0), skipped)
            carried = skipped - own
            records = position.end_record - base
        else:
            own, carried = skipped, 0
            records = position.end_record - self._end
        finished = None
        with self._lock:
            self.total_skipped += skipped
            if carried:
                previous = self._epoch if self._epoch is not None else epoch
                self._skipped[previous] = self._skipped.get(previous, 0) + carried
                self._records[previous] = self._records.get(previous, 0) + carried
            self._skipped[epoch] = self._skipped.get(epoch, 0) + own
            self._records[epoch] = self._records.get(epoch, 0) + max(records, images + own)
        if self._epoch is not None and epoch != self._epoch:
            finished = self._epoch
        self._epoch, self._end = epoch, position.end_record
        if finished is not None:
            self._warn(finished)

    def finish(self, trailing):
        """The stream ended; `trailing` records were skipped after its last batch."""
        with self._lock:
            self.total_skipped += trailing
            if trailing and self._epoch is not None:
                self._skipped[self._epoch] = self._skipped.get(self._epoch, 0) + trailing
                self._records[self._epoch] = self._records.get(self._epoch, 0) + trailing
        if self._epoch is not None:
            self._warn(self._epoch)

    def snapshot(self):
        with self._lock:
            return dict(self._skipped), dict(self._records)

    def _warn(self, epoch):
        with self._lock:
            skipped, records = self._skipped.get(epoch, 0), self._records.get(epoch, 0)
        if records and skipped * 100 > self._warn_percent * records:
            log.warning("%s: epoch %d skipped %d of %d records (%d%%, over skip_warn_percent "
                        "%d%%); the server's log and GetStats name the reasons",
                        self._what, epoch, skipped, records, skipped * 100 // records,
                        self._warn_percent)


class _Token:
    """A shared-memory batch's claim on the held count, from hand-over to release."""

    __slots__ = ("held", "handed", "attached", "lock")

    def __init__(self, held):
        self.held = held
        self.handed = False
        self.attached = False  # set when the batch's images are a view of a slot
        self.lock = threading.RLock()  # release() may run from a finalizer on any thread

    def hand_over(self):
        with self.lock:
            self.handed = True
            self.held.add(1)

    def release(self):  # the slot is free again (any thread, possibly the garbage collector's)
        with self.lock:
            if self.handed:
                self.held.add(-1)
                self.handed = False


class _Shared:
    """A queued batch whose images are in a shared-memory slot."""

    __slots__ = ("batch", "token")

    def __init__(self, batch, token):
        self.batch, self.token = batch, token


def _copied_out(shared):
    """The batch of a _Shared with its images copied into memory of their own (read-only, as
    every batch's): the slot goes back to the server as soon as `shared` is dropped."""
    batch = shared.batch
    images = np.array(batch.images)
    images.flags.writeable = False
    return batch._replace(images=images)


_RECONNECT = object()  # _Reader._after_error: reconnect


class _LockstepShare:
    """A lockstep consumer's positions, to find the batches a reconnect lost (reader thread only).

    Consumer c of N gets (e, c), (e, c + N), ... of each epoch e of the job's B batches (a
    multiple of N), from the run's start epoch on. Within one call the server hands them out in
    that order, each once; but a batch the server wrote before the connection went (into gRPC's
    flow-control window, the TCP buffers or a shared-memory slot) is gone with it, and the
    consumer's next call continues after it. Stand-ins for those batches (padding: zero images,
    label 0, valid all False) keep this consumer's count equal to the others', which a
    synchronous trainer needs (DDP waits for every rank's step). Before its first batch a
    consumer has lost nothing: one that joins a running job (a restarted trainer) starts
    wherever the job is.
    """

    def __init__(self, request):
        self._index = request.consumer_index
        self._n = request.num_consumers
        self._record_ids = request.record_ids
        # This stream's StreamPlan (DescribeStream), set by the reader before its first call.
        self.plan = None
        self.last = None  # (epoch, index) of the last batch handed on

    def _next(self, position):
        epoch, index = position
        if index + self._n < self.plan.batches_per_epoch * self._n:
            return (epoch, index + self._n)
        return (epoch + 1, self._index)

    def lost_before(self, position):
        """The positions of this consumer's share missing before `position`, a batch received
        after a reconnect. Raises SluiceError DATA_LOSS when `position` is not ahead in it."""
        here = (position.epoch, position.index)
        last = self.last
        if last is None:
            return []  # the first batch: taken as it comes
        if here[1] % self._n != self._index:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "consumer %d of %d: batch (epoch %d, index %d) is not in this "
                              "consumer's share" % (self._index, self._n, here[0], here[1]))
        if here <= last:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "consumer %d of %d: batch (epoch %d, index %d) comes after (epoch "
                              "%d, index %d): the job's run was probably aborted (a consumer "
                              "away past job_linger_seconds) and restarted under the same name, "
                              "so its positions started over"
                              % (self._index, self._n, here[0], here[1], last[0], last[1]))
        lost, expected = [], self._next(last)
        while expected < here:
            lost.append(expected)
            expected = self._next(expected)
        return lost

    def lost_at_end(self):
        """The positions of this consumer's share missing when its stream ended (none for a
        stream that repeats forever, or ended before its first batch)."""
        epochs = self.plan.epochs
        if epochs <= 0 or self.last is None:
            return []
        lost, expected = [], self._next(self.last)
        while expected[0] < epochs:
            lost.append(expected)
            expected = self._next(expected)
        return lost

    def padding(self, position):
        """A stand-in for the lost batch at `position` (epoch, index)."""
        plan = self.plan
        n = plan.batch_size
        if plan.dtype not in DTYPES or plan.layout not in LAYOUTS:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "StreamPlan names dtype %d, layout %d: not a known DType and Layout"
                              " (a server newer than this client?)" % (plan.dtype, plan.layout))
        dtype_name, dtype = DTYPES[plan.dtype]
        layout = LAYOUTS[plan.layout]
        shape = ((n, 3, plan.image_height, plan.image_width) if layout == "NCHW"
                 else (n, plan.image_height, plan.image_width, 3))
        images = np.zeros(shape, dtype=dtype)
        images.flags.writeable = False
        ids = np.full((n, 2), -1, dtype=np.int64) if self._record_ids else None
        mixed = weights = None
        if plan.mixes_labels:
            mixed, weights = np.zeros(n, dtype=np.int32), np.ones(n, dtype=np.float32)
        labels = None if plan.unlabeled else np.zeros(n, dtype=np.int32)
        features = {f.name: empty_feature(f, n) for f in plan.features}
        return Batch(images, labels, Position(position[0], position[1], 0),
                     np.zeros(n, dtype=np.bool_), ids, mixed, weights, dtype_name, layout,
                     features)


class _Reader:
    """The thread that receives, parses and queues one server's batches, reconnecting on
    UNAVAILABLE. It holds no reference to its BatchStream, so an abandoned stream is collected and
    stops its reader.

    items: the queue the consumer takes from (at most `prefetch` batches, then _END or a
    SluiceError, which end it); guarded by `hub`, which is notified on every change.
    """

    def __init__(self, client, target, request, prefetch, hub, held, skip_warn_percent,
                 shared_memory_asked=False):
        self._client = client
        self._shared_memory_asked = shared_memory_asked  # shared_memory=True, not the default
        # Whether the next call asks for shared memory (as the request does until _cannot_map);
        # written by the reader thread only.
        self._ask_shared_memory = request.shared_memory
        self.target = target
        self._request = request
        self._prefetch = prefetch
        self._hub = hub
        self.items = collections.deque()  # guarded by hub
        self._stop = threading.Event()
        # Reentrant: stop() may run from a BatchStream's __del__ on any thread.
        self._lock = threading.RLock()
        self._call = None   # the call in progress; guarded by _lock
        self._ready = None  # the connectivity wait in progress; guarded by _lock
        self.reconnects = 0       # written by the reader thread only
        self.shared_batches = 0   # written by the reader thread only
        # Lockstep: padding batches standing in for those a reconnect lost; reader thread only.
        self.lost_batches = 0
        self.held = held
        self._what = "stream of %r from %s" % (request.dataset, target)
        self.epochs = _EpochSkips(
            self._what, skip_warn_percent,
            request.start_position if request.HasField("start_position") else None,
            bool(request.job_name))
        self._thread = threading.Thread(target=self._run, name="sluice-stream", daemon=True)
        self._thread.start()

    def stop(self, join=True):
        self._stop.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()
            if self._ready is not None:
                self._ready.cancel()
        with self._hub:
            self._hub.notify_all()
        if join and threading.current_thread() is not self._thread:
            self._thread.join()
            self._drain()

    def _drain(self):
        """Drops the batches queued and never handed out: a stopped stream's shared-memory slots
        (and with the last of them the segment) go back to the server now, not when the stream
        object is collected."""
        with self._hub:
            self.items.clear()

    def _put(self, item, final=False):
        """Queues item, waiting for room (a final item, _END or an error, always has room);
        False when stopped first."""
        with self._hub:
            while not final and len(self.items) >= self._prefetch and not self._stop.is_set():
                self._hub.wait()
            if self._stop.is_set():
                return False
            self.items.append(item)
            self._hub.notify_all()
            return True

    def _trailing_skips(self, call):
        """The records the server skipped after the call's last batch (its trailers)."""
        # An RpcError raised outside a call (e.g. by an interceptor) has no trailers.
        trailing = getattr(call, "trailing_metadata", None)
        return sum(int(value) for key, value in (trailing() if trailing else None) or ()
                   if key == "sluice-skipped-records")

    def _map_segment(self, call, request):
        """The segment a server that agreed to shared memory names, mapped; None when it did not
        or when this process cannot map it (the attach key is then never written, and the server
        sends ordinary batches once its attach deadline passes: see _cannot_map)."""
        metadata = {key: value if isinstance(value, str) else value.decode()
                    for key, value in call.initial_metadata() or ()}
        if _shm.SEGMENT_KEY not in metadata or _shm.ATTACH_KEY_KEY not in metadata:
            return None
        try:
            return _shm.Segment(metadata[_shm.SEGMENT_KEY], metadata[_shm.ATTACH_KEY_KEY],
                                request.shared_memory_slots,
                                _shm.max_slot_bytes(request.batch_size, request.image_height,
                                                    request.image_width))
        except (OSError, SluiceError) as e:
            self._cannot_map(metadata[_shm.SEGMENT_KEY], e)
            return None

    def _cannot_map(self, name, error):
        """Notes that this process cannot map the target's segments: logged once per target,
        and, unless shared_memory=True asked for them, neither this stream's reconnects nor
        later streams ask that server for shared memory again (each ask costs the server's
        attach timeout)."""
        with _UNMAPPABLE_LOCK:
            first = self.target not in _UNMAPPABLE
            _UNMAPPABLE.setdefault(self.target, str(error))
        if self._shared_memory_asked:
            log.warning("%s: cannot map the server's shared-memory segment %s (%s): this "
                        "stream's batches come through the socket, each call after the "
                        "server's attach timeout (2 s); shared_memory=True keeps asking, "
                        "shared_memory=None stops after the first failure", self._what, name,
                        error)
            return
        self._ask_shared_memory = False
        if first:
            log.warning("%s: cannot map the server's shared-memory segment %s (%s): batches "
                        "come through the socket, and streams of this process ask %s for "
                        "shared memory no more (the server waits 2 s for an attachment that "
                        "never comes on each ask)", self._what, name, error, self.target)

    def _run(self):
        try:
            final = self._serve()
        except BaseException as e:  # a bug in the client, not a status: still end the stream
            final = SluiceError(grpc.StatusCode.INTERNAL, "sluice client: %r" % (e,),
                                self.target)
        if final is not None:
            self._put(final, final=True)
        if self._stop.is_set():
            self._drain()

    def _describe(self, channel):
        """This stream's StreamPlan, from its server, or None when stopped first (close()
        cancels it as it does the stream's call); raises grpc.RpcError."""
        describe = channel.unary_unary(
            "/sluice.v1.DataService/DescribeStream",
            request_serializer=service_pb2.StreamRequest.SerializeToString,
            response_deserializer=service_pb2.StreamPlan.FromString)
        with self._lock:
            if self._stop.is_set():
                return None
            future = describe.future(self._request, timeout=self._client.rpc_timeout,
                                     metadata=self._client._metadata)
            self._call = future
        try:
            return future.result()
        except grpc.FutureCancelledError:
            return None
        finally:
            with self._lock:
                self._call = None

    def _fill(self, share, lost):
        """Queues padding batches for the lost positions (logged and counted); False when
        stopped first."""
        if not lost:
            return True
        self.lost_batches += len(lost)
        log.warning("%s: consumer %d of %d lost %d batch(es) with its connection, (epoch, index) "
                    "%s: padding batches (valid all False) stand in for them so that this "
                    "consumer still gets its share's count", self._what,
                    self._request.consumer_index, self._request.num_consumers, len(lost),
                    ", ".join("(%d, %d)" % p for p in lost[:8]) + (" ..." if len(lost) > 8
                                                                      else ""))
        for position in lost:
            if not self._put(share.padding(position)):
                return False
            share.last = position
        return True

    def _after_error(self, e, started, last_progress, received, backoff, call=None,
                     describing=False):
        """After `e` (grpc.RpcError) from the stream's call, or from its DescribeStream when
        `describing`: (_RECONNECT, the next backoff) once the pause before the reconnect is
        over, or (what _serve returns, backoff)."""
        if self._stop.is_set():
            return None, backoff
        client = self._client
        now = time.monotonic()
        waited = now - (last_progress if received else started)
        limit = client.reconnect_deadline if received else client.connect_timeout
        # CANCELLED that we did not ask for (_stop is clear) comes from a server that is shutting
        # down: as transient as UNAVAILABLE (as in the C++ client). A DescribeStream that timed
        # out or was told to try again later is retried too: the share needs its plan.
        transient = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        if describing:
            transient += (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED)
        what = "DescribeStream, for a lockstep stream's plan: " if describing else ""
        if e.code() in transient:
            if waited < limit:
                # Before the first batch, never past connect_timeout.
                pause = backoff if received else min(backoff, limit - waited)
                self.reconnects += 1
                log.warning("%s: %s%s: %s; reconnect %d in %.1f s (%.0f s without a batch; "
                            "gives up after %g s)", self._what, what, e.code().name,
                            e.details(), self.reconnects, pause, waited, limit)
                if self._stop.wait(pause):
                    return None, backoff
                return _RECONNECT, min(backoff * 2, client.reconnect_max)
            # A call that is not resumed: its trailer counts (a resumed one would skip those
            # records again and say so itself).
            if call is not None:
                self.epochs.finish(self._trailing_skips(e))
            return SluiceError.from_rpc_error(
                e, self.target,
                " (%sgave up reconnecting after %.0f s%s)"
                % (what, waited, "" if received else " without a batch, connect_timeout")), backoff
        if call is not None:
            self.epochs.finish(self._trailing_skips(e))
        return SluiceError.from_rpc_error(
            e, self.target, " (%s)" % what[:-2] if describing else ""), backoff

    def _connected(self, channel, deadline):
        """Waits for the channel to connect until `deadline` (time.monotonic()): True when it
        did, False when not by then, None when stopped."""
        future = grpc.channel_ready_future(channel)
        with self._lock:
            if self._stop.is_set():
                return None
            self._ready = future
        try:
            future.result(timeout=max(deadline - time.monotonic(), 0))
            return True
        except grpc.FutureTimeoutError:
            return False
        except grpc.FutureCancelledError:
            return None
        finally:
            future.cancel()
            with self._lock:
                self._ready = None

    def _serve(self):
        """Runs the stream to its end. Returns _END, a SluiceError, or None when stopped."""
        client = self._client
        channel = client._new_channel(self.target)
        try:
            method = channel.unary_stream(
                _STREAM_METHOD,
                request_serializer=service_pb2.StreamRequest.SerializeToString,
                response_deserializer=None)  # raw bytes: decode_batch parses them copy-free
            backoff = client.reconnect_initial
            started = last_progress = time.monotonic()
            received = False  # a batch came: connect_timeout is over, reconnect_deadline rules
            resume = None  # private streams: the position after the last batch received
            share = None   # lockstep: this consumer's positions, to fill a reconnect's gap
            if self._request.num_consumers > 0:
                share = _LockstepShare(self._request)
            while True:
                if not received:
                    connected = self._connected(channel, started + client.connect_timeout)
                    if connected is None:
                        return None
                    if not connected:
                        return SluiceError(
                            grpc.StatusCode.UNAVAILABLE,
                            "no connection within connect_timeout %g s: is `sluice serve` "
                            "running there, on that port?" % client.connect_timeout,
                            self.target)
                call = segment = None
                try:
                    if share is not None and share.plan is None:
                        # Asked once, before the first call, so that no batch taken from the job
                        # waits on it; under the stream's reconnect policy below.
                        share.plan = self._describe(channel)
                        if share.plan is None:
                            return None
                except grpc.RpcError as e:
                    outcome, backoff = self._after_error(e, started, last_progress, received,
                                                         backoff, describing=True)
                    if outcome is _RECONNECT:
                        continue
                    return outcome
                request = self._request
                if resume is not None or request.shared_memory != self._ask_shared_memory:
                    request = service_pb2.StreamRequest()
                    request.CopyFrom(self._request)
                    if resume is not None:
                        _set_position(request.start_position, resume)
                    if not self._ask_shared_memory:
                        request.shared_memory, request.shared_memory_slots = False, 0
                with self._lock:
                    if self._stop.is_set():
                        return None
                    call = method(request, metadata=client._metadata)
                    self._call = call
                try:
                    segment = self._map_segment(call, request) if request.shared_memory else None
                    for message in call:
                        token = _Token(self.held)
                        batch, skipped = decode_batch(
                            message, segment, token, share.plan if share is not None else None)
                        if share is not None:
                            if self.reconnects and not self._fill(
                                    share, share.lost_before(batch.position)):
                                return None
                            share.last = (batch.position.epoch, batch.position.index)
                        self.epochs.add(batch.position, _real_samples(batch), skipped)
                        # A shared job goes on where it is: only a private stream resumes.
                        if not self._request.job_name:
                            resume = batch.position.after()
                        if token.attached:
                            self.shared_batches += 1
                            batch = _Shared(batch, token)
                        last_progress = time.monotonic()
                        received = True
                        backoff = client.reconnect_initial
                        if not self._put(batch):
                            return None
                    # Skips after the last batch ride on no batch: the trailers carry them.
                    self.epochs.finish(self._trailing_skips(call))
                    if share is not None and self.reconnects:
                        if not self._fill(share, share.lost_at_end()):
                            return None
                    return _END
                except grpc.RpcError as e:
                    outcome, backoff = self._after_error(e, started, last_progress, received,
                                                         backoff, call=call)
                    if outcome is _RECONNECT:
                        continue
                    return outcome
                except SluiceError as e:
                    call.cancel()
                    return SluiceError(e.code, e.message, self.target)
                finally:
                    with self._lock:
                        self._call = None
                    if segment is not None:
                        segment.close()
        finally:
            channel.close()

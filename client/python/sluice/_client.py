"""sluice.Client: the Python client of `sluice serve` (DataService, proto/sluice/v1/service.proto).

It mirrors the C++ client (client/client.h): a stream reads ahead `prefetch` batches on its own
thread; on UNAVAILABLE it reconnects with exponential backoff (0.1 s doubling to 5 s) and resumes a
private stream right after the last batch it received, so a deterministic stream loses and repeats
nothing; it gives up after `reconnect_deadline` seconds without a batch.
"""
import numbers
import queue
import threading
import time

import grpc

from sluice import _shm
from sluice._errors import SluiceError
from sluice._wire import decode_batch
from sluice.v1 import config_pb2, service_pb2, service_pb2_grpc

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
_END = object()  # the stream's end of sequence, as a queue item


class Client:
    """Connection to one `sluice serve`.

    target: "HOST:PORT", "unix:PATH" or any gRPC target name.
    token: sent as "authorization: Bearer TOKEN" (the server's token_file).
    root_certificates: PEM (bytes or str) of the CAs to trust; set to use TLS (the server's tls).
    rpc_timeout: seconds for datasets() and stats().
    reconnect_initial, reconnect_max: a stream's reconnect backoff, in seconds.
    reconnect_deadline: a stream gives up (SluiceError UNAVAILABLE) after this many seconds
        without a batch.

    Thread-safe; each stream has its own channel. Create clients after forking (e.g. in each
    DataLoader worker), as with any gRPC client.
    """

    def __init__(self, target, token=None, root_certificates=None, *, rpc_timeout=10.0,
                 reconnect_initial=0.1, reconnect_max=5.0, reconnect_deadline=60.0):
        if not target:
            raise ValueError("target must be HOST:PORT, unix:PATH or another gRPC target name")
        self.target = target
        self.rpc_timeout = rpc_timeout
        self.reconnect_initial = reconnect_initial
        self.reconnect_max = reconnect_max
        self.reconnect_deadline = reconnect_deadline
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        if isinstance(root_certificates, str):
            root_certificates = root_certificates.encode()
        self._root_certificates = root_certificates
        self._channel = self._new_channel()
        self._stub = service_pb2_grpc.DataServiceStub(self._channel)

    def _new_channel(self):
        if self._root_certificates is None:
            return grpc.insecure_channel(self.target, options=_CHANNEL_OPTIONS)
        credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
        return grpc.secure_channel(self.target, credentials, options=_CHANNEL_OPTIONS)

    def _unary(self, method, request):
        try:
            return method(request, timeout=self.rpc_timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise SluiceError.from_rpc_error(e, self.target) from None

    def datasets(self):
        """The datasets the server serves: a list of sluice.v1.DatasetInfo (name, files,
        num_classes, defaults, limits, fixed_fields)."""
        response = self._unary(self._stub.ListDatasets, service_pb2.ListDatasetsRequest())
        return list(response.datasets)

    def stats(self, dataset=""):
        """The server's live counters (sluice.v1.Stats), of one dataset or all."""
        return self._unary(self._stub.GetStats, service_pb2.GetStatsRequest(dataset=dataset))

    def stream(self, dataset, batch_size=None, image_size=None, mode=None, seed=None,
               epochs=None, shard=None, job_name=None, start_position=None,
               drop_remainder=None, prefetch=2, shared_memory=False, max_held=4):
        """Streams ready batches of `dataset`. Returns a BatchStream: iterate it for
        (images, labels, position) — images uint8 [N, H, W, 3] (a read-only view of the received
        message), labels int32 [N], position a Position.

        Unset (None) arguments take the dataset's defaults (see datasets()).
        image_size: N or (height, width).
        mode: "train" (random resized crop + flip) or "eval" (centre crop).
        epochs: 0 repeats forever.
        shard: (index, count): this consumer's disjoint part of the data.
        job_name: consumers naming the same job share one pipeline, each batch going to one of
            them; such a stream rejoins its job on reconnect instead of resuming at a position.
        start_position: resume a private stream (a Position, or (epoch, index, end_record[,
            shuffle_bytes])): give the last kept batch's position.after(), which carries the
            shuffle's byte share so that a resume under another share is refused, not reordered.
        prefetch: batches read ahead (at least 1).
        shared_memory: from a server on this host (unix: or loopback target; x86-64), take the
            images from a shared-memory segment in place instead of through the socket. Each
            batch's images then hold a slot of the segment until nothing references them, and at
            most `max_held` such batches may be held at once: one more next() raises
            SluiceError(FAILED_PRECONDITION) rather than wait for a slot only the caller can
            free. Falls back to ordinary batches when the server declines or the segment cannot
            be mapped.

        A request the server refuses raises SluiceError here, with the server's status and
        message; errors later in the stream are raised by the iteration.
        """
        request = service_pb2.StreamRequest(dataset=dataset)
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
        if start_position is not None:
            _set_position(request.start_position, start_position)
        if drop_remainder is not None:
            request.drop_remainder = drop_remainder
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if max_held < 1:
            raise ValueError("max_held must be at least 1")
        if shared_memory and _shm.supported() and _shm.is_local(self.target):
            request.shared_memory = True
            # Read ahead, being queued, and held: the server never waits on a slot we cannot free.
            request.shared_memory_slots = prefetch + max_held + 1
        return BatchStream(_Reader(self, request, prefetch), max_held)

    def close(self):
        """Closes the channel of datasets() and stats(); streams have their own."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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

    Iteration ends when the requested epochs are done. Each batch's arrays stay valid as long as
    they are referenced (they keep their message alive); nothing is reused.
    Close it (or use it as a context manager) to stop a stream before its end.
    """

    def __init__(self, reader, max_held=4):
        self._reader = reader
        self._max_held = max_held
        self._done = False
        self.position = None  # of the last batch handed out
        # As the C++ client: wait for the first batch or the final status, so that a request the
        # server refuses fails here rather than at the first next().
        first = reader.get()
        if isinstance(first, SluiceError):
            self.close()
            raise first
        self._first = first

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        held = self._reader.held.value
        if held >= self._max_held:
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                              "holding %d shared-memory batches (max_held): drop one (and the "
                              "arrays or tensors made from it) before the next" % held,
                              self._reader.target)
        if self._first is not None:
            item, self._first = self._first, None
        else:
            item = self._reader.get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, SluiceError):
            self.close()
            raise item
        if isinstance(item, _Shared):
            item.token.hand_over()
            item = item.batch
        self.position = item.position
        return item

    @property
    def reconnects(self):
        """Reconnections made so far."""
        return self._reader.reconnects

    @property
    def shared_memory_batches(self):
        """Batches received so far whose images came through shared memory."""
        return self._reader.shared_batches

    @property
    def skipped_records(self):
        """Corrupt or unusable records the server skipped in this stream so far: those of the
        batches received, and at the end of the stream those after its last batch."""
        return self._reader.skipped_records

    def close(self):
        """Cancels the call and stops the reader thread. Idempotent."""
        self._done = True
        self._first = None
        self._reader.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.stop(join=False)


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


class _Reader:
    """The thread that receives, parses and queues a stream's batches, reconnecting on
    UNAVAILABLE. It holds no reference to its BatchStream, so an abandoned stream is collected and
    stops its reader."""

    def __init__(self, client, request, prefetch):
        self._client = client
        self._request = request
        self._queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        # Reentrant: stop() may run from a BatchStream's __del__ on any thread.
        self._lock = threading.RLock()
        self._call = None  # the call in progress; guarded by _lock
        self.reconnects = 0       # written by the reader thread only
        self.skipped_records = 0  # written by the reader thread only
        self.shared_batches = 0   # written by the reader thread only
        self.held = _shm.HeldCount()
        self.target = client.target
        self._thread = threading.Thread(target=self._run, name="sluice-stream", daemon=True)
        self._thread.start()

    def get(self):
        """Blocks for the next item: a Batch, _END or a SluiceError (the last two end it)."""
        return self._queue.get()

    def stop(self, join=True):
        self._stop.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()
        if join and threading.current_thread() is not self._thread:
            self._thread.join()
            self._drain()

    def _drain(self):
        """Drops the batches queued and never handed out: a stopped stream's shared-memory slots
        (and with the last of them the segment) go back to the server now, not when the stream
        object is collected."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _put(self, item):
        """Queues item, waiting for room; False when stopped first."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def _add_trailing_skips(self, call):
        """Adds the records the server skipped after the call's last batch (its trailers)."""
        # An RpcError raised outside a call (e.g. by an interceptor) has no trailers.
        trailing = getattr(call, "trailing_metadata", None)
        for key, value in (trailing() if trailing else None) or ():
            if key == "sluice-skipped-records":
                self.skipped_records += int(value)

    @staticmethod
    def _map_segment(call, request):
        """The segment a server that agreed to shared memory names, mapped; None when it did not
        or when this process cannot map it (the attach key is then never written, and the server
        sends ordinary batches once its attach deadline passes)."""
        metadata = {key: value if isinstance(value, str) else value.decode()
                    for key, value in call.initial_metadata() or ()}
        if _shm.SEGMENT_KEY not in metadata or _shm.ATTACH_KEY_KEY not in metadata:
            return None
        try:
            return _shm.Segment(metadata[_shm.SEGMENT_KEY], metadata[_shm.ATTACH_KEY_KEY],
                                request.shared_memory_slots,
                                _shm.max_slot_bytes(request.batch_size, request.image_height,
                                                    request.image_width))
        except (OSError, SluiceError):
            return None

    def _run(self):
        try:
            final = self._serve()
        except BaseException as e:  # a bug in the client, not a status: still end the stream
            final = SluiceError(grpc.StatusCode.INTERNAL, "sluice client: %r" % (e,),
                                self._client.target)
        if final is not None:
            self._put(final)
        if self._stop.is_set():
            self._drain()

    def _serve(self):
        """Runs the stream to its end. Returns _END, a SluiceError, or None when stopped."""
        client = self._client
        channel = client._new_channel()
        try:
            method = channel.unary_stream(
                _STREAM_METHOD,
                request_serializer=service_pb2.StreamRequest.SerializeToString,
                response_deserializer=None)  # raw bytes: decode_batch parses them copy-free
            backoff = client.reconnect_initial
            last_progress = time.monotonic()
            resume = None  # private streams: the position after the last batch received
            while True:
                request = self._request
                if resume is not None:
                    request = service_pb2.StreamRequest()
                    request.CopyFrom(self._request)
                    _set_position(request.start_position, resume)
                with self._lock:
                    if self._stop.is_set():
                        return None
                    call = method(request, metadata=client._metadata)
                    self._call = call
                segment = None
                try:
                    segment = self._map_segment(call, request) if request.shared_memory else None
                    for message in call:
                        token = _Token(self.held)
                        batch, skipped = decode_batch(message, segment, token)
                        self.skipped_records += skipped
                        # A shared job goes on where it is: only a private stream resumes.
                        if not self._request.job_name:
                            resume = batch.position.after()
                        if token.attached:
                            self.shared_batches += 1
                            batch = _Shared(batch, token)
                        last_progress = time.monotonic()
                        backoff = client.reconnect_initial
                        if not self._put(batch):
                            return None
                    # Skips after the last batch ride on no batch: the trailers carry them.
                    self._add_trailing_skips(call)
                    return _END
                except grpc.RpcError as e:
                    if self._stop.is_set():
                        return None
                    waited = time.monotonic() - last_progress
                    # CANCELLED that we did not ask for (_stop is clear) comes from a server that
                    # is shutting down: as transient as UNAVAILABLE (as in the C++ client).
                    if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                        if waited < client.reconnect_deadline:
                            if self._stop.wait(backoff):
                                return None
                            backoff = min(backoff * 2, client.reconnect_max)
                            self.reconnects += 1
                            continue
                        # A call that is not resumed: its trailer counts (a resumed one would
                        # skip those records again and say so itself).
                        self._add_trailing_skips(e)
                        return SluiceError.from_rpc_error(
                            e, client.target, " (gave up reconnecting after %.0f s)" % waited)
                    self._add_trailing_skips(e)
                    return SluiceError.from_rpc_error(e, client.target)
                except SluiceError as e:
                    call.cancel()
                    return SluiceError(e.code, e.message, client.target)
                finally:
                    with self._lock:
                        self._call = None
                    if segment is not None:
                        segment.close()
        finally:
            channel.close()


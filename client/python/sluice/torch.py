"""PyTorch adapter: ready batches from `sluice serve` as an IterableDataset.

    ds = sluice.torch.SluiceDataset("127.0.0.1:50051", "train", batch_size=256, image_size=224)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(epochs):
        ds.set_epoch(epoch)  # optional: each iteration continues with the next epoch anyway
        for images, labels in loader:  # uint8 [256, 224, 224, 3] (NHWC), int64 [256]
            ...

A dataset with features (boxes, further Example features) adds a dict of them after the labels
(see SluiceDataset's Outputs); an unlabeled dataset's labels are None.

A transform set of the server's (SluiceDataset(..., transform_set="bf16")) delivers its output as
it is: torch.bfloat16, torch.float16 or torch.float32 tensors, [N, 3, H, W] under NCHW, ready for
the model (no conversion in Python); mixup/cutmix labels as soft labels (soft_labels=True) or as
(labels, mixed_labels, label_weights).

The server batches: use DataLoader(batch_size=None). Each DataLoader worker streams its own
disjoint shard (worker i of n asks for shard i of n within the dataset's own `shard`, which under
torch.distributed is (rank, world size) by default), so the workers together see every image once
per epoch, and equal shares give every rank's workers the same number of batches (with job_name
they are instead the consumers of one shared job in lockstep: see SluiceDataset). Each iteration
of the dataset is the next epoch of the server's numbering (new file order, shuffle and crops), as
a DistributedSampler's set_epoch gives. Workers create their client after they start. gRPC does
not support fork() while it is in use: when the parent process streams or calls the server itself
(len(), a describe()), start the workers with DataLoader(multiprocessing_context="spawn").
"""
import logging
import multiprocessing
import multiprocessing.context
import warnings
from typing import NamedTuple

import numpy as np
import torch
import torch.utils.data

from sluice import _shm
from sluice._client import Client
from sluice._malloc import tune_malloc as _tune_malloc
from sluice._wire import Position, Ragged

log = logging.getLogger("sluice")

# DataLoader workers whose epochs one dataset object keeps apart (worker ids 0..N-1).
_MAX_WORKERS = 1024


class RaggedTensor(NamedTuple):
    """A ragged feature as tensors: sample i's rows are values[row_splits[i]:row_splits[i + 1]]
    with row_splits the cumulative sum of row_lengths (int64 [N]); values [total_rows,
    *row_shape], or for bytes a list of total_rows bytes objects. torch.split(values,
    row_lengths.tolist()) gives the per-sample tensors (e.g. each image's [k, 4] boxes, the
    list torchvision's detection models take)."""
    values: object
    row_lengths: torch.Tensor


def features_tensors(features):
    """Batch.features as tensors: numpy arrays become tensors (int64, float32), a sluice.Ragged a
    RaggedTensor(values, row_lengths); bytes stay Python bytes (lists)."""
    out = {}
    for name, value in features.items():
        if isinstance(value, Ragged):
            values = value.values
            if isinstance(values, np.ndarray):
                values = torch.from_numpy(values)
            out[name] = RaggedTensor(values, torch.from_numpy(value.row_lengths))
        elif isinstance(value, np.ndarray):
            out[name] = torch.from_numpy(value)
        else:
            out[name] = value
    return out


def worker_shard(shard, worker_id, num_workers):
    """The shard of worker `worker_id` of `num_workers` within `shard` ((index, count) or None):
    index * num_workers + worker_id of count * num_workers, so that the workers of every rank
    together cover exactly that rank's part."""
    index, count = shard if shard is not None else (0, 1)
    if num_workers <= 1:
        return shard
    return index * num_workers + worker_id, count * num_workers


def _images_tensor(images, writable, dtype="uint8"):
    """The images of a Batch (its dtype's name: Batch.dtype) as a tensor of that dtype and the
    array's shape; bfloat16 (ml_dtypes' or uint16 bits, which torch.from_numpy takes neither
    of) through their bits as int16, viewed as torch.bfloat16: no copy either way."""
    if writable:
        images = np.array(images)  # one copy, into memory torch owns
    if dtype == "bfloat16":
        images = images.view(np.int16)
    # Zero copy: the tensor shares the received message's memory. That memory is an immutable
    # `bytes` object, and torch has no read-only tensors, so from_numpy warns that writing to it
    # would be undefined. Reading it (.float(), .to(device), .permute(), normalization, a
    # DataLoader worker's transfer to the main process) never writes; in-place operations on
    # the tensor itself need writable=True.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensor = torch.from_numpy(images)
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor


# Layout of _SharedState's int64s: each worker's next epoch, then each worker's resume (flag,
# epoch, index, end_record, shuffle_bytes, the end epoch of the iteration it resumes, 0 for
# none, and that iteration's first epoch), then the DataLoader worker count (assumed by a
# loaded state or a declared num_workers, and seen by the workers), -1 while unknown, then the
# count of load_state_dict() calls (what tells a persistent worker that its copy of the
# per-server resumes is stale), then the epoch after every consumer's so far, then the running
# iteration (its number, worker count and start epoch), then the iteration each worker joined
# last.
_RESUME = _MAX_WORKERS
_RESUME_FIELDS = 7
_WORKERS = _RESUME + _MAX_WORKERS * _RESUME_FIELDS
_LOADS = _WORKERS + 2
_NEXT = _LOADS + 1
_ITERATION, _ITERATION_WORKERS, _ITERATION_START = _NEXT + 1, _NEXT + 2, _NEXT + 3
_JOINED = _NEXT + 4
_SIZE = _JOINED + _MAX_WORKERS
# Resume flags. _AT_EPOCH: at an epoch's start, for a worker of a saved iteration that
# recorded none of its batches.
_FRESH, _AT_POSITION, _PER_SERVER, _AT_EPOCH = 0, 1, 2, 3


class _SharedState:
    """What a dataset object's consumers share: the epoch each consumer (DataLoader worker id,
    or the main process at slot 0) starts its next iteration at, the position each resumes
    at (load_state_dict), and the worker count. int64s in shared memory that the main process
    and every worker process of every DataLoader iteration map (a forked worker inherits the
    mapping and its lock; a spawned or forkserver one receives them while being started).
    Pickled any other way (a deepcopy, saving the dataset) it is copied, values and all, into a
    mapping and lock of its own.

    The workers of one DataLoader iteration start at one epoch whichever claims first: the
    first to claim opens the iteration (its start epoch, after every consumer's so far, and its
    worker count), the others join it. A worker opens a new one when it already joined the
    running one (its previous iteration's) or the worker count differs (none after set() or a
    main-process iteration), so a worker id new to the dataset, or idle in the iterations
    before, reads the epoch its peers read. A resume that load_state_dict() or start_position
    set for a worker wins: that worker starts at its own epoch and position.

    Claims and the epoch after every consumer's take the lock; each other slot has one writer
    at a time: worker i of the running iteration, or the main process (set_epoch,
    load_state_dict, and iterating without workers) while no worker runs.
    """

    def __init__(self, values=None):
        self._slots = multiprocessing.RawArray("q", _SIZE)
        # A spawn context's lock is one that forked, spawned and forkserver workers all take.
        self._lock = multiprocessing.get_context("spawn").Lock()
        if values is not None:
            self._slots[:] = values
        else:
            self._slots[_WORKERS:_WORKERS + 2] = [-1, -1]

    @classmethod
    def _shared(cls, slots, lock):
        self = cls.__new__(cls)
        self._slots, self._lock = slots, lock
        return self

    def __reduce__(self):
        if multiprocessing.context.get_spawning_popen() is not None:
            return _SharedState._shared, (self._slots, self._lock)
        with self._lock:
            return _SharedState, (list(self._slots),)

    def set(self, epoch, keep=True):
        """Every consumer's next iteration starts at `epoch`. With `keep`, a resume is kept when
        it is inside `epoch`, or in a later epoch of a resumed iteration that started at
        `epoch` (set_epoch of the saved iteration's first epoch, with epochs > 1 or endless);
        the others are dropped, and so are iteration ends not after `epoch`. Returns the
        workers whose resumes were kept."""
        kept = set()
        with self._lock:
            self._slots[:_MAX_WORKERS] = [epoch] * _MAX_WORKERS
            self._slots[_NEXT] = epoch
            self._slots[_ITERATION_WORKERS] = 0  # no worker joins an iteration from before
        for w in range(_MAX_WORKERS):
            base = _RESUME + w * _RESUME_FIELDS
            flag, at, end, first = (self._slots[base], self._slots[base + 1],
                                    self._slots[base + 5], self._slots[base + 6])
            if end <= epoch:
                self._slots[base + 5] = 0
            if not flag:
                continue
            if keep and (at == epoch or (first == epoch and (end > epoch or not end))):
                self._slots[w] = at  # the resume's own epoch
                kept.add(w)
            else:
                self._slots[base] = _FRESH
        return kept

    def set_worker(self, worker, epoch, resume=None, end=None, flag=_AT_POSITION, first=None):
        """Worker `worker`'s next iteration starts at `epoch`, at `resume` (a start_position in
        that epoch) when given or at the epoch's start with flag _AT_EPOCH, and ends before
        epoch `end` when given (a resumed iteration ends where the saved one would have), the
        rest of the iteration that started at epoch `first` (default `epoch`)."""
        self._slots[worker] = epoch
        base = _RESUME + worker * _RESUME_FIELDS
        self._slots[base + 5] = end if end is not None and end > epoch else 0
        self._slots[base + 6] = epoch if first is None else min(first, epoch)
        if flag == _AT_EPOCH:
            self._slots[base + 1:base + 5] = [epoch, 0, 0, 0]
            self._slots[base] = flag
        elif resume is None:
            self._slots[base] = _FRESH
        else:
            self._slots[base + 1:base + 5] = [
                int(resume[0]), int(resume[1]), int(resume[2]),
                int(getattr(resume, "shuffle_bytes", 0))]
            self._slots[base] = flag

    def claim(self, worker, epochs, num_workers=None):
        """(epoch, start_position or None, per_server, end, first): where iteration starts for
        `worker` (None: the main process, for all) of `num_workers` (None: as many as the
        running iteration's), which takes `epochs` (0: forever) from there, or ends before
        `end` when a resume set one; first: the epoch the iteration started at (the saved
        one's, for a resume). per_server: the resume is the per-server one load_state_dict()
        kept."""
        slot = 0 if worker is None else worker
        base = _RESUME + slot * _RESUME_FIELDS
        with self._lock:
            t = self._slots
            if worker is None:
                start = t[_NEXT]
                t[_ITERATION_WORKERS] = 0
            else:
                if num_workers is None:
                    num_workers = t[_ITERATION_WORKERS]
                if t[_JOINED + worker] == t[_ITERATION] or t[_ITERATION_WORKERS] != num_workers:
                    t[_ITERATION] += 1
                    t[_ITERATION_WORKERS] = num_workers
                    t[_ITERATION_START] = t[_NEXT]
                t[_JOINED + worker] = t[_ITERATION]
                start = t[_ITERATION_START]
            resume, flag = None, t[base]
            # A loaded resume's own epoch, else the iteration's.
            epoch = t[slot] if flag else start
            first = t[base + 6] if flag else epoch
            if flag:
                t[base] = _FRESH
                if flag != _AT_EPOCH and t[base + 1] == epoch:
                    resume = Position(*t[base + 1:base + 5])
            end = t[base + 5]
            t[base + 5] = 0
            if end <= epoch or not epochs:
                end = epoch + epochs if epochs else 0
                if epochs:
                    first = epoch
            after = end if epochs else epoch + 1
            t[_NEXT] = max(t[_NEXT], after)
        self.reached(worker, after - 1)
        return epoch, resume, resume is not None and flag == _PER_SERVER, end, first

    def reached(self, worker, epoch):
        """`worker`'s stream has a batch of `epoch`: its next iteration starts after it."""
        if worker is None:
            if self._slots[0] <= epoch:
                self._slots[:_MAX_WORKERS] = [epoch + 1] * _MAX_WORKERS
        elif self._slots[worker] <= epoch:
            self._slots[worker] = epoch + 1
        if self._slots[_NEXT] <= epoch:  # one aligned word: read without the lock
            with self._lock:
                self._slots[_NEXT] = max(self._slots[_NEXT], epoch + 1)

    @property
    def assumed_workers(self):
        """The DataLoader worker count __len__ or load_state_dict assumed, or None."""
        value = self._slots[_WORKERS]
        return None if value < 0 else value

    @assumed_workers.setter
    def assumed_workers(self, value):
        self._slots[_WORKERS] = -1 if value is None else value

    @property
    def loads(self):
        """How many times load_state_dict() filled this table."""
        return self._slots[_LOADS]

    @loads.setter
    def loads(self, value):
        self._slots[_LOADS] = value

    @property
    def seen_workers(self):
        """The worker count a consumer last iterated with (0: the main process), or None."""
        value = self._slots[_WORKERS + 1]
        return None if value < 0 else value

    @seen_workers.setter
    def seen_workers(self, value):
        self._slots[_WORKERS + 1] = value


class StreamPosition:
    """Where a SluiceDataset batch came from (with_position=True): give it to
    SluiceDataset.record() once the batch is trained on.

    worker: the DataLoader worker id (0 without workers); num_workers: the DataLoader's (0
    without workers); epoch; position: the batch's sluice.Position (in its server's stream);
    positions: {server: Position} of each server's last batch so far in that worker's stream
    (several when it fans in from a fleet); last: the batch is its worker's last of the epoch
    (from several servers: the stream ended, or every server's stream was already in a later
    epoch); end: the epoch the batch's iteration ends before (0: endless); first: the epoch
    it started at (a resumed iteration's: the saved one's).
    A plain object, so that DataLoader passes it through as it is.
    """

    __slots__ = ("worker", "num_workers", "position", "positions", "last", "end", "first")

    def __init__(self, worker, num_workers, position, last, positions=None, end=0, first=None):
        self.worker = worker
        self.num_workers = num_workers
        self.position = position
        self.last = last
        self.positions = positions or {}
        self.end = end
        self.first = position.epoch if first is None else first

    @property
    def epoch(self):
        return self.position.epoch

    def __getstate__(self):
        return (self.worker, self.num_workers, _plain(self.position), self.last,
                {t: _plain(p) for t, p in self.positions.items()}, self.end, self.first)

    def __setstate__(self, state):
        (self.worker, self.num_workers, position, self.last, positions, self.end,
         self.first) = state
        self.position = Position(*position)
        self.positions = {t: Position(*p) for t, p in positions.items()}

    def __repr__(self):
        return "StreamPosition(worker=%d, num_workers=%d, position=%r, last=%r)" % (
            self.worker, self.num_workers, self.position, self.last)


def _plain(position):
    """[epoch, index, end_record, shuffle_bytes] of a Position."""
    return [position.epoch, position.index, position.end_record, position.shuffle_bytes]


def _default_shard():
    """(rank, world size) when torch.distributed is initialized with several ranks, else
    None."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return None


class SluiceDataset(torch.utils.data.IterableDataset):
    """Ready (images, labels) batches of `dataset` served at `target`.

    images: uint8 [N, H, W, 3] (NHWC, RGB) by default; with a transform_set, that set's output
    as it is: torch.uint8, torch.float16, torch.bfloat16 or torch.float32, [N, H, W, 3] (NHWC)
    or [N, 3, H, W] (NCHW), zero-copy as uint8 is (Client.describe() tells which). labels: int64 [N]
    (the class-index type of torch's losses). Arguments are Client.stream()'s (batch_size,
    image_size, mode, seed, job_name, start_position, drop_remainder, prefetch,
    allow_partial_fleet, equal_shares, record_ids, transform_set) and Client's (target, with
    its fan-in from several servers, token, root_certificates, connect_timeout).
    soft_labels: False (default): labels are class indexes, and a transform set that mixes
        labels (mixup, cutmix) adds two outputs after them, mixed_labels int64 [N] and
        label_weights float32 [N] (sample i is label_weights[i] of labels[i] and the rest of
        mixed_labels[i]). True, or the number of classes: labels are float32 [N, classes] soft
        labels (one-hot without mixing), what cross_entropy takes as probabilities; True takes
        the class count from the server (DatasetInfo.num_classes).
    shard: (index, count), this process's part of the data. None (default): (rank, world size)
        when torch.distributed is initialized (when the dataset is made) with several ranks, as
        DistributedSampler does; else all of it. (0, 1) opts out. With job_name the job reads
        the whole data set, and shard only places this process among its consumers (below).
    equal_shares: None (default, the server's: "drop" in train, "pad" in eval), "drop", "pad"
        or "off": how the consumers of a sharded stream (ranks x DataLoader workers) are kept
        equal, so that every DDP rank gets the same number of batches per epoch and none waits
        forever in a collective (see Client.stream()).
    num_workers: the DataLoader's num_workers, for __len__ and state_dict (None: whatever the
        DataLoader has; __len__ then counts for the workers of the last iteration, or none
        before the first, and binds nothing; with job_name, before the first iteration it
        raises TypeError instead, as a shared job's share per consumer depends on the worker
        count). A worker that finds another count than the one declared here or in a loaded
        state raises ValueError.
    Outputs: (images, labels), then (mixed_labels, label_weights) when the transform set mixes
    labels and soft_labels is off, then the features when the dataset has any (a dict, name ->
    an int64 / float32 tensor [N] or [N, *row_shape], a RaggedTensor(values, row_lengths) for a
    ragged one such as "boxes", bytes as Python lists: see features_tensors), then in this order
    when asked for:
        with_valid=True: bool [N], False for a padding sample (equal_shares "pad": a repeat that
            losses and metrics should ignore), all True when the batch has no padding. Without
            it, padding is delivered unmarked and logged as a warning once per iteration
            (logger "sluice").
        record_ids=True: int64 [N, 2], (file, record) per sample (file: its index in the
            dataset's sorted file list; a padding sample names the record it repeats).
        with_position=True: a StreamPosition, for record() and state_dict().
    epochs: epochs per iteration of the dataset (default 1, an epoch per `for ... in loader`;
        0: one endless iteration).
    writable: copy each batch's images into a tensor of its own (default: share the received
        message, read-only; see _images_tensor).
    tune_malloc: call sluice.tune_malloc() in the process that streams (e.g. each worker).
    shared_memory: None (default): from a server on this host, take the images from same-host
        shared memory (x86-64; else the socket). In DataLoader workers they stay in place: a
        worker hands each tensor over by copying it into torch's shared memory and drops it, so
        it holds only the batches in flight, and it waits for one of those to go rather than
        fail when it holds max_held; the batch that makes max_held (one more with
        with_position's read-ahead) is copied out of its slot at once, so a worker never waits
        on tensors it keeps itself (auto-collation, a buffering wrapper). Without workers
        (num_workers=0) the tensors go to the caller, who may keep them: each batch is copied
        out of its slot at once (a tensor of its own, as writable=True; cheaper than the socket
        path). A server whose segment this process cannot map is logged once and then read
        through the socket (Client.stream()). True: in place there too, where holding more
        than max_held tensors at once raises SluiceError(FAILED_PRECONDITION)
        (Client.stream()). False: the socket.

    Length. len(dataset) (and so len(loader)) is the batches this process gets per iteration:
    DescribeStream of every worker's shard, from every server, summed (exact under equal shares
    "drop" and "pad"; with "off" or unsharded an upper bound when records turn out corrupt). It
    asks the server: with DataLoader workers started by fork, call it after they started or use
    multiprocessing_context="spawn" (gRPC does not survive fork() while in use). A shared job
    (job_name) with lockstep=False, or epochs=0, has no length (TypeError).

    Epochs. Iteration i of the dataset starts at the epoch set_epoch() set, or else where the
    iteration before it ended (epoch 0, 1, 2, ... with the default epochs=1): file order,
    shuffle and crops are those of that epoch of the server's numbering, exactly as the same
    epoch of one long stream, so `for epoch in range(E): for x, y in loader` trains on E
    different epochs, with or without set_epoch. It works whichever way DataLoader runs its
    workers: the next epoch is kept in a small shared-memory table that the dataset object
    carries into every worker process (fresh ones each iteration, or persistent_workers=True
    ones, which read it at each iteration), where all workers of an iteration agree on its
    epoch, also when num_workers changes between iterations (a loaded state's resume still
    starts its worker at its own position). A start_position (a
    Position, single-process loading only) resumes the first iteration inside its epoch.

    Resuming mid-epoch (with or without DataLoader workers):
        ds = SluiceDataset(..., with_position=True)
        if checkpoint: ds.load_state_dict(checkpoint["data"])   # before iterating
        for images, labels, pos in loader:
            ...train...
            ds.record(pos)                  # in the main process, once the batch is trained on
            checkpoint = {"model": ..., "data": ds.state_dict()}
    Each worker then resumes right after its own last recorded batch (batches never recorded
    come again; a worker whose epoch's last batch was recorded while another's was not gets no
    more of that epoch; a worker none of whose batches was recorded starts the saved
    iteration at its first epoch), the iteration ends where the saved one would have (its last
    epoch, with epochs > 1 too), and later ones continue with the next epochs. From several servers
    each server's stream resumes after its own last batch. Nothing is lost or repeated when the
    DataLoader, rank and worker counts are the same; load_state_dict refuses another shard or
    worker count (ValueError). In DDP each rank saves and loads its own state. With
    persistent_workers=True and several servers, load the state before the first iteration:
    workers that started before it hold their own copy of the servers' positions, and raise
    ValueError rather than resume from the wrong ones.

    Shared job. With job_name, the DataLoader workers of every rank are the consumers of one
    shared job on the server, in lockstep, instead of each reading a shard: one pipeline reads
    the whole data set once per epoch, and batch i of each epoch goes to consumer i mod N, where
    N = ranks x workers (shard's count, the world size by default, times the DataLoader's
    num_workers, 1 without workers) and this worker is consumer rank x workers + worker id. Every
    consumer gets the same number of batches of the same size per epoch (equal shares "drop",
    or "pad" with the mask; "off" is refused), and len() says how many (before the first
    iteration only with num_workers= given to the dataset: TypeError without). Each iteration
    is the run of the job that starts at that iteration's epoch, so iterations see new epochs
    exactly as without job_name (set_epoch too), and the consumers' i-th iterations meet in the
    same run. Every consumer must take part: one that stays away longer than the server's
    job_linger_seconds ends the job for all (SluiceError ABORTED, naming it). A shared job does
    not resume at a position (state_dict() and load_state_dict() raise ValueError); set_epoch()
    restarts at an epoch. lockstep=False: batches go to whichever consumer asks first (the
    counts per consumer then differ, and there is no length).
    """

    def __init__(self, target, dataset, batch_size=None, image_size=None, mode=None, seed=None,
                 epochs=1, shard=None, job_name=None, start_position=None,
                 drop_remainder=None, prefetch=2, token=None, root_certificates=None,
                 writable=False, tune_malloc=False, shared_memory=None, max_held=4,
                 connect_timeout=10.0, allow_partial_fleet=False, equal_shares=None,
                 record_ids=False, with_valid=False, with_position=False, num_workers=None,
                 lockstep=True, transform_set=None, soft_labels=False):
        super().__init__()
        if epochs is None or epochs < 0:
            raise ValueError("epochs is the epochs per iteration, 0 (forever) or more; got %r"
                             % (epochs,))
        if num_workers is not None and num_workers < 0:
            raise ValueError("num_workers must be None or 0 or more, got %r" % (num_workers,))
        if job_name and start_position is not None and tuple(start_position)[1:3] != (0, 0):
            raise ValueError("a shared job (job_name) starts only at an epoch's start, "
                             "(epoch, 0, 0); got start_position %r" % (start_position,))
        if shard is None:
            shard = _default_shard()
        elif tuple(shard) == (0, 1):
            shard = None
        self.target = target
        self.dataset = dataset
        self.token = token
        self.root_certificates = root_certificates
        self.connect_timeout = connect_timeout
        self.writable = writable
        self.tune_malloc = tune_malloc
        self.epochs = epochs
        self.shared_memory = shared_memory
        self.job_name = job_name
        self.lockstep = lockstep
        self.start_position = start_position
        self.shard = None if shard is None else tuple(shard)
        self.num_workers = num_workers
        self.with_valid = with_valid
        self.record_ids = record_ids
        self.with_position = with_position
        if soft_labels is not False and not (soft_labels is True or (
                isinstance(soft_labels, int) and soft_labels > 0)):
            raise ValueError("soft_labels must be False, True (the dataset's num_classes) or a "
                             "number of classes, got %r" % (soft_labels,))
        self.soft_labels = soft_labels
        self.transform_set = transform_set
        self.stream_args = dict(batch_size=batch_size, image_size=image_size, mode=mode,
                                seed=seed, shard=self.shard, job_name=job_name,
                                drop_remainder=drop_remainder, prefetch=prefetch,
                                max_held=max_held, allow_partial_fleet=allow_partial_fleet,
                                equal_shares=equal_shares, record_ids=record_ids,
                                transform_set=transform_set)
        self._state = _SharedState()
        self._base_epoch = 0       # main process: where iteration starts when nothing recorded
        self._recorded = {}        # main process: worker -> its last recorded StreamPosition
        # worker -> {server: start_position} of a loaded state that fans in from several
        # servers (the shared table holds one position per worker); pickled into the workers.
        self._resumes = {}
        self._loads = 0            # the shared table's load count that _resumes belongs to
        self._lengths = {}         # workers -> batches per epoch
        if start_position is not None:
            self._base_epoch = int(start_position[0])
            self._state.set(self._base_epoch)
            self._state.set_worker(0, self._base_epoch, start_position)

    def _client(self):
        return Client(self.target, token=self.token, root_certificates=self.root_certificates,
                      connect_timeout=self.connect_timeout)

    def set_epoch(self, epoch):
        """The next iteration (of this process, or of every DataLoader worker) starts at `epoch`;
        the ones after it continue from there. A loaded state's resumes inside `epoch`, or inside
        the saved iteration when it started at `epoch` (epochs > 1), are kept, and so are the
        records state_dict() needs for them (so a loop calling set_epoch(epoch) before every
        iteration resumes where it stopped)."""
        if epoch < 0:
            raise ValueError("epoch must be 0 or more, got %r" % (epoch,))
        epoch = int(epoch)
        kept = self._state.set(epoch)
        self._base_epoch = epoch
        # What state_dict() says of a worker: its record where the worker resumes after it (a
        # loaded resume kept above, or a record inside `epoch`, its last batch too), or ends
        # just before `epoch`.
        self._recorded = {w: p for w, p in self._recorded.items()
                          if w in kept or p.epoch <= epoch <= p.epoch + (1 if p.last else 0)}

    def _workers_for_length(self):
        if self.num_workers is not None:
            return self.num_workers
        for known in (self._state.assumed_workers, self._state.seen_workers):
            if known is not None:
                return known
        return 0

    def _consumer_args(self, args, worker, workers):
        """args for the stream of DataLoader worker `worker` (0 without workers) of `workers`
        (0 without): its shard, or its place among a shared job's consumers."""
        args = dict(args)
        if not self.job_name:
            args["shard"] = worker_shard(args["shard"], worker, workers)
            return args
        args["shard"] = None  # the job reads the whole data set
        if self.lockstep:
            rank, ranks = self.shard if self.shard is not None else (0, 1)
            per_rank = max(workers, 1)
            args["consumer_index"] = rank * per_rank + worker
            args["num_consumers"] = ranks * per_rank
        return args

    def __len__(self):
        if self.job_name and not self.lockstep:
            raise TypeError("SluiceDataset with job_name and lockstep=False has no length: the "
                            "job's batches go to its consumers as they ask")
        if not self.epochs:
            raise TypeError("SluiceDataset with epochs=0 is endless: it has no length")
        if (self.job_name and self.num_workers is None and self._state.assumed_workers is None
                and self._state.seen_workers is None):
            # Each consumer's share is the job's batches over ranks x workers: a guess of the
            # worker count would be a wrong length, not a bound.
            raise TypeError("SluiceDataset with job_name (consumers in lockstep): its length "
                            "depends on the DataLoader's worker count, unknown before the "
                            "first iteration: pass num_workers= (the DataLoader's, 0 without "
                            "workers) to the dataset")
        workers = self._workers_for_length()
        if workers not in self._lengths:
            total = 0
            with self._client() as client:
                for w in range(max(workers, 1)):
                    total += client.describe(
                        self.dataset, **self._consumer_args(self.stream_args, w, workers)
                    ).batches_per_epoch
            self._lengths[workers] = total
        return self._lengths[workers] * self.epochs

    def record(self, position):
        """Notes that the batch at `position` (the StreamPosition a with_position=True batch
        carries) is consumed: state_dict() resumes after it. Call it in the main process for
        every batch, in the order the DataLoader delivers them."""
        if not isinstance(position, StreamPosition):
            raise TypeError("record() takes the StreamPosition of a batch of a SluiceDataset "
                            "with with_position=True, got %r" % (position,))
        self._recorded[position.worker] = position

    def state_dict(self):
        """Where iteration resumes: per DataLoader worker the last position record() saw (a
        dict of plain values, for torch.save with the model's)."""
        if self.job_name:
            raise ValueError("a shared job (job_name) cannot resume at a position; set_epoch() "
                             "starts an iteration at an epoch")
        counts = {p.num_workers for p in self._recorded.values()}
        if len(counts) > 1:
            raise ValueError("record() saw batches of DataLoaders with %s workers: one "
                             "state resumes one DataLoader" % sorted(counts))
        num_workers = counts.pop() if counts else self._workers_for_length()
        nexts = [p.epoch + 1 if p.last else min([p.epoch] + [q.epoch for q in p.positions.values()])
                 for p in self._recorded.values()]
        state = {"version": 1, "dataset": self.dataset, "shard": self.shard,
                 "num_workers": num_workers,
                 "workers": {w: _plain(p.position) + [bool(p.last), {
                                 t: _plain(q) for t, q in p.positions.items()}, int(p.end),
                                 int(p.first)]
                             for w, p in sorted(self._recorded.items())}}
        if self._recorded and len(self._recorded) < max(num_workers, 1):
            # Workers none of whose batches were recorded start the latest iteration a
            # recorded worker is in at its first epoch, and end it where it ends.
            latest = max(self._recorded.values(), key=lambda p: p.first)
            state["unrecorded"] = [int(latest.first), int(latest.end)]
            nexts.append(latest.first)
        state["epoch"] = min(nexts) if nexts else self._base_epoch
        return state

    def load_state_dict(self, state):
        """Resumes from a state_dict(): each worker's next iteration starts right after its
        last recorded batch (or at the next epoch when that was its epoch's last). Call before
        iterating (persistent workers read it at their next iteration too). ValueError when the
        state is of another dataset, shard or DataLoader worker count."""
        if self.job_name:
            raise ValueError("a shared job (job_name) cannot resume at a position; set_epoch() "
                             "starts an iteration at an epoch")
        if state.get("version") != 1:
            raise ValueError("not a SluiceDataset state (version %r)" % (state.get("version"),))
        shard = None if state["shard"] is None else tuple(state["shard"])
        if state["dataset"] != self.dataset or shard != self.shard:
            raise ValueError("the state is of dataset %r shard %r; this SluiceDataset reads %r "
                             "shard %r" % (state["dataset"], shard, self.dataset, self.shard))
        workers = int(state["num_workers"])
        if self.num_workers is not None and max(self.num_workers, 1) != max(workers, 1):
            raise ValueError("the state is of a DataLoader with %d workers; this dataset "
                             "declares num_workers=%d" % (workers, self.num_workers))
        epoch = int(state["epoch"])
        self._state.set(epoch, keep=False)
        self._recorded = {}
        self._resumes = {}
        self._state.loads += 1
        self._loads = self._state.loads
        for w, entry in state["workers"].items():
            e, index, end_record, shuffle_bytes, last, servers = entry[:6]
            end = int(entry[6]) if len(entry) > 6 else 0  # the iteration's end epoch
            first = int(entry[7]) if len(entry) > 7 else None  # and its first
            w = int(w)
            if not 0 <= w < max(workers, 1):
                raise ValueError("the state names worker %d of %d" % (w, workers))
            position = Position(e, index, end_record, shuffle_bytes)
            servers = {t: Position(*p) for t, p in servers.items()}
            # With the iteration's first epoch: a state saved before any new record() says
            # what this one says.
            self._recorded[w] = StreamPosition(w, workers, position, last, servers, end, first)
            if last and e + 1 == epoch and all(q.epoch <= e for q in servers.values()):
                # Every worker finished epoch e: the next iteration starts at e + 1 (still the
                # saved iteration when it has epochs left). Not when a server of a fan-in had
                # sent batches of a later epoch already: those would come again.
                self._state.set_worker(w, e + 1, end=end, first=first)
            elif len(servers) > 1:
                # Each server's stream resumes after its own last batch, from the earliest.
                self._resumes[w] = {t: p.after() for t, p in servers.items()}
                earliest = min(servers.values(), key=lambda p: p.epoch)
                self._state.set_worker(w, earliest.epoch, earliest.after(), end=end,
                                       flag=_PER_SERVER, first=first)
            else:
                # Also after an epoch's last batch while other workers are still in it: the
                # server starts just after that batch, with no more of the epoch, so this worker
                # iterates the same epochs as the others.
                self._state.set_worker(w, e, position.after(), end=end, first=first)
        if "unrecorded" in state:
            first, end = map(int, state["unrecorded"])
            for w in range(max(workers, 1)):
                if w not in self._recorded:
                    self._state.set_worker(w, first, end=end, flag=_AT_EPOCH)
        self._state.assumed_workers = workers
        self._base_epoch = epoch

    def __iter__(self):
        args = dict(self.stream_args)
        info = torch.utils.data.get_worker_info()
        worker = None if info is None else info.id
        count = 0 if info is None else info.num_workers
        expected = self.num_workers
        if expected is None:
            expected = self._state.assumed_workers
        if expected is not None and max(expected, 1) != max(count, 1):
            raise ValueError(
                "SluiceDataset: iterated %s, but its length and resume state assume %d "
                "DataLoader workers (num_workers=%r given to the dataset, or assumed by "
                "len() or load_state_dict()): pass the DataLoader's num_workers to the "
                "dataset" % ("with %d DataLoader workers" % count if count else
                             "without DataLoader workers", expected, self.num_workers))
        if worker is None or worker == 0:
            self._state.seen_workers = count
        if count > 1 and self.start_position is not None and not self.job_name:
            raise ValueError("SluiceDataset: start_position applies to one stream; with "
                             "%d DataLoader workers use num_workers=0 or load_state_dict"
                             % count)
        if worker is not None and worker >= _MAX_WORKERS:
            raise ValueError("SluiceDataset keeps the epochs of at most %d DataLoader workers"
                             % _MAX_WORKERS)
        args = self._consumer_args(args, worker or 0, count)
        epoch, resume, per_server, args["epochs"], first = self._state.claim(
            worker, self.epochs, count)
        if self.job_name:
            # The run of the job that starts at this iteration's epoch (epoch 0's too).
            args["start_position"] = (epoch, 0, 0)
        elif per_server:
            resumes = self._resumes.get(0 if worker is None else worker)
            if resumes is None or self._loads != self._state.loads:
                # Raised by the first next(), so that a DataLoader worker hands it over.
                return self._fail(ValueError(
                    "SluiceDataset: load_state_dict() of a state that fans in from several "
                    "servers was called after this DataLoader's persistent workers started, "
                    "and they hold their own copy of each server's position: load the state "
                    "before the first iteration, or use persistent_workers=False"))
            args["start_position"] = resumes
        elif resume is not None:
            args["start_position"] = resume
        elif epoch > 0:
            args["start_position"] = (epoch, 0, 0)
        args["shared_memory"] = self.shared_memory
        if self.with_position:
            # The read-ahead (below) holds one batch more than the caller.
            args["max_held"] += 1
        # A worker's tensors are released by its queue's feeder thread, never by its caller.
        args["on_max_held"] = "wait" if worker is not None else "raise"
        return self._batches(worker, count, args, first)

    @staticmethod
    def _fail(error):
        raise error
        yield

    def _batches(self, worker, count, args, first):
        if self.tune_malloc:
            _tune_malloc()
        # The client is made here, in the process that iterates (a DataLoader worker).
        with self._client() as client:
            # Without workers, by default, a shared-memory batch is copied out of its slot at
            # once (its tensor may be kept); the copy costs less than the socket path.
            copy = self.writable or (
                worker is None and self.shared_memory is None and _shm.supported()
                and any(map(_shm.is_local, client.targets)))
            servers = len(client.targets)
            num_classes = self.soft_labels
            if num_classes is True:
                num_classes = client.dataset_info(self.dataset).num_classes
                if num_classes < 1:
                    raise ValueError("SluiceDataset %r: soft_labels=True, but the server does "
                                     "not say the dataset's num_classes: pass soft_labels="
                                     "<number of classes>" % self.dataset)
            with client.stream(self.dataset, **args) as stream:

                def take():
                    """The stream's next batch or None. In a worker, the batch that makes the
                    stream's max_held is copied out of its slot at once: the next take would
                    wait for one of them to go, and a caller in the worker that keeps tensors
                    before handing them on (DataLoader's auto-collation of batch_size
                    batches, a wrapper that buffers) would then wait for ever."""
                    batch = next(stream, None)
                    if (batch is not None and worker is not None and not copy
                            and stream.held_batches >= args["max_held"]):
                        batch = batch._replace(images=np.array(batch.images))
                    return batch

                warned = False
                batch = take()
                while batch is not None:
                    positions = dict(stream.positions)
                    # A position says whether it is its epoch's last: read one batch ahead.
                    following = take() if self.with_position else None
                    out = [_images_tensor(batch.images, copy, batch.dtype)]
                    if batch.labels is None:
                        if num_classes:
                            raise ValueError("SluiceDataset %r: soft_labels, but the dataset "
                                             "is unlabeled" % self.dataset)
                        out.append(None)
                    elif num_classes:
                        out.append(torch.from_numpy(batch.soft_labels(num_classes)))
                    else:
                        out.append(torch.from_numpy(batch.labels.astype(np.int64)))
                        if batch.mixed_labels is not None:
                            out += [torch.from_numpy(batch.mixed_labels.astype(np.int64)),
                                    torch.from_numpy(batch.label_weights)]
                    if batch.features:
                        out.append(features_tensors(batch.features))
                    if batch.valid is not None and not self.with_valid and not warned:
                        warned = True
                        log.warning("SluiceDataset %r: batches carry padding samples (equal "
                                    "shares \"pad\"), repeats that losses and metrics should "
                                    "ignore: pass with_valid=True for their mask",
                                    self.dataset)
                    if self.with_valid:
                        out.append(torch.from_numpy(batch.valid) if batch.valid is not None
                                   else torch.ones(len(batch.images), dtype=torch.bool))
                    if self.record_ids:
                        out.append(torch.from_numpy(batch.record_ids))
                    position = batch.position
                    if self.with_position:
                        if following is None:
                            last = True
                        elif servers > 1:
                            # The next batch may be another server's: the epoch ended only once
                            # every server's stream is past it.
                            last = len(stream.positions) == servers and all(
                                q.epoch > position.epoch for q in stream.positions.values())
                        else:
                            last = following.position.epoch != position.epoch
                        out.append(StreamPosition(0 if worker is None else worker, count,
                                                  position, last, positions, args["epochs"],
                                                  first))
                    # Hold nothing of a batch once it is handed out: a shared-memory slot goes
                    # back as soon as the consumer (a worker's queue) drops the tensor.
                    del batch
                    self._state.reached(worker, position.epoch)
                    yield tuple(out)
                    del out
                    batch = following if self.with_position else take()

"""PyTorch adapter: ready batches from `sluice serve` as an IterableDataset.

    ds = sluice.torch.SluiceDataset("127.0.0.1:50051", "train", batch_size=256, image_size=224)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(epochs):
        ds.set_epoch(epoch)  # optional: each iteration continues with the next epoch anyway
        for images, labels in loader:  # uint8 [256, 224, 224, 3] (NHWC), int64 [256]
            ...

The server batches: use DataLoader(batch_size=None). Each DataLoader worker streams its own
disjoint shard (worker i of n asks for shard i of n within the dataset's own `shard`), so the
workers together see every image once per epoch. Each iteration of the dataset is the next epoch
of the server's numbering (new file order, shuffle and crops), as a DistributedSampler's
set_epoch gives. Workers create their client after they start. gRPC does not support fork() while
it is in use: when the parent process streams or calls the server itself, start the workers with
DataLoader(multiprocessing_context="spawn").
"""
import multiprocessing
import multiprocessing.context
import warnings

import numpy as np
import torch
import torch.utils.data

from sluice import _shm
from sluice._client import Client
from sluice._malloc import tune_malloc as _tune_malloc

# DataLoader workers whose epochs one dataset object keeps apart (worker ids 0..N-1).
_MAX_WORKERS = 1024


def worker_shard(shard, worker_id, num_workers):
    """The shard of worker `worker_id` of `num_workers` within `shard` ((index, count) or None):
    index * num_workers + worker_id of count * num_workers, so that the workers of every rank
    together cover exactly that rank's part."""
    index, count = shard if shard is not None else (0, 1)
    if num_workers <= 1:
        return shard
    return index * num_workers + worker_id, count * num_workers


def _images_tensor(images, writable):
    if writable:
        return torch.from_numpy(np.array(images))  # one copy, into memory torch owns
    # Zero copy: the tensor shares the received message's memory. That memory is an immutable
    # `bytes` object, and torch has no read-only tensors, so from_numpy warns that writing to it
    # would be undefined. Reading it (.float(), .to(device), .permute(), normalization, a
    # DataLoader worker's transfer to the main process) never writes; in-place operations on
    # the tensor itself need writable=True.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(images)


class _NextEpochs:
    """The epoch each consumer of a dataset object starts its next iteration at: one int64 per
    DataLoader worker id, in shared memory that the main process and every worker process of
    every DataLoader iteration map (a forked worker inherits the mapping; a spawned or
    forkserver one receives it while being started). Pickled any other way (a deepcopy, saving
    the dataset) it is copied, values and all, into a mapping of its own.

    Each slot has one writer at a time: worker i of the running iteration, or the main process
    (set_epoch, and iterating without workers) while no worker runs.
    """

    def __init__(self, values=None):
        self._slots = multiprocessing.RawArray("q", _MAX_WORKERS)
        if values is not None:
            self._slots[:] = values

    @classmethod
    def _shared(cls, slots):
        self = cls.__new__(cls)
        self._slots = slots
        return self

    def __reduce__(self):
        if multiprocessing.context.get_spawning_popen() is not None:
            return _NextEpochs._shared, (self._slots,)
        return _NextEpochs, (list(self._slots),)

    def set(self, epoch):
        self._slots[:] = [epoch] * _MAX_WORKERS

    def claim(self, worker, epochs):
        """The epoch iteration starts at for `worker` (None: the main process, for all), which
        takes `epochs` (0: forever) from there."""
        epoch = self._slots[0 if worker is None else worker]
        self.reached(worker, epoch + max(epochs, 1) - 1)
        return epoch

    def reached(self, worker, epoch):
        """`worker`'s stream has a batch of `epoch`: its next iteration starts after it."""
        if worker is None:
            if self._slots[0] <= epoch:
                self.set(epoch + 1)
        elif self._slots[worker] <= epoch:
            self._slots[worker] = epoch + 1


class SluiceDataset(torch.utils.data.IterableDataset):
    """Ready (images, labels) batches of `dataset` served at `target`.

    images: uint8 [N, H, W, 3] (NHWC, RGB); labels: int64 [N] (the class-index type of torch's
    losses). Arguments are Client.stream()'s (batch_size, image_size, mode, seed, shard,
    job_name, start_position, drop_remainder, prefetch, allow_partial_fleet) and Client's
    (target, with its fan-in from several servers, token, root_certificates, connect_timeout).
    epochs: epochs per iteration of the dataset (default 1, an epoch per `for ... in loader`;
        0: one endless iteration).
    writable: copy each batch's images into a tensor of its own (default: share the received
        message, read-only; see _images_tensor).
    tune_malloc: call sluice.tune_malloc() in the process that streams (e.g. each worker).
    shared_memory: None (default): from a server on this host, take the images from same-host
        shared memory (x86-64; else the socket). In DataLoader workers they stay in place: a
        worker hands each tensor over by copying it into torch's shared memory and drops it, so
        it holds only the batches in flight, and it waits for one of those to go rather than
        fail when it holds max_held. Without workers (num_workers=0) the tensors go to the
        caller, who may keep them: each batch is copied out of its slot at once (a tensor of its
        own, as writable=True; cheaper than the socket path). True: in place there too, where
        holding more than max_held tensors at once raises SluiceError(FAILED_PRECONDITION)
        (Client.stream()). False: the socket.

    Epochs. Iteration i of the dataset starts at the epoch set_epoch() set, or else where the
    iteration before it ended (epoch 0, 1, 2, ... with the default epochs=1): file order,
    shuffle and crops are those of that epoch of the server's numbering, exactly as the same
    epoch of one long stream, so `for epoch in range(E): for x, y in loader` trains on E
    different epochs, with or without set_epoch. It works whichever way DataLoader runs its
    workers: the next epoch of each worker id is kept in a small shared-memory table that the
    dataset object carries into every worker process. With the default persistent_workers=False,
    every iter(loader) starts new workers with a copy of the dataset: they read and advance the
    table that the main process's dataset (where set_epoch writes) shares. With
    persistent_workers=True the same workers serve every iteration, each calling iter() on its
    own copy per iteration: they read the table too, so a set_epoch() in the main process between
    iterations reaches them. A start_position (a Position, single-process loading only) resumes
    the first iteration inside its epoch; the ones after continue from there.

    With job_name, workers join that shared job instead of taking shards: each batch goes to one
    of them, and the epochs are the job's (a shared job cannot start at a chosen epoch).
    """

    def __init__(self, target, dataset, batch_size=None, image_size=None, mode=None, seed=None,
                 epochs=1, shard=None, job_name=None, start_position=None,
                 drop_remainder=None, prefetch=2, token=None, root_certificates=None,
                 writable=False, tune_malloc=False, shared_memory=None, max_held=4,
                 connect_timeout=10.0, allow_partial_fleet=False):
        super().__init__()
        if epochs is None or epochs < 0:
            raise ValueError("epochs is the epochs per iteration, 0 (forever) or more; got %r"
                             % (epochs,))
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
        self.start_position = start_position
        self.stream_args = dict(batch_size=batch_size, image_size=image_size, mode=mode,
                                seed=seed, shard=shard, job_name=job_name,
                                drop_remainder=drop_remainder, prefetch=prefetch,
                                max_held=max_held, allow_partial_fleet=allow_partial_fleet)
        self._next_epochs = _NextEpochs()
        if start_position is not None:
            self._next_epochs.set(int(start_position[0]))

    def set_epoch(self, epoch):
        """The next iteration (of this process, or of every DataLoader worker) starts at `epoch`;
        the ones after it continue from there."""
        if epoch < 0:
            raise ValueError("epoch must be 0 or more, got %r" % (epoch,))
        self._next_epochs.set(int(epoch))

    def __iter__(self):
        args = dict(self.stream_args)
        info = torch.utils.data.get_worker_info()
        worker = None if info is None else info.id
        if info is not None and info.num_workers > 1:
            if self.start_position is not None:
                raise ValueError("SluiceDataset: start_position applies to one stream; with "
                                 "%d DataLoader workers use num_workers=0" % info.num_workers)
            if not args["job_name"]:
                args["shard"] = worker_shard(args["shard"], info.id, info.num_workers)
        if worker is not None and worker >= _MAX_WORKERS:
            raise ValueError("SluiceDataset keeps the epochs of at most %d DataLoader workers"
                             % _MAX_WORKERS)
        if self.job_name:
            args["epochs"] = self.epochs
        else:
            epoch = self._next_epochs.claim(worker, self.epochs)
            args["epochs"] = epoch + self.epochs if self.epochs else 0
            resume = self.start_position
            if resume is not None and resume[0] == epoch:
                self.start_position = None  # the first iteration only
                args["start_position"] = resume
            elif epoch > 0:
                args["start_position"] = (epoch, 0, 0)
        args["shared_memory"] = self.shared_memory is not False
        # A worker's tensors are released by its queue's feeder thread, never by its caller.
        args["on_max_held"] = "wait" if worker is not None else "raise"
        return self._batches(worker, args)

    def _batches(self, worker, args):
        if self.tune_malloc:
            _tune_malloc()
        # The client is made here, in the process that iterates (a DataLoader worker).
        with Client(self.target, token=self.token, root_certificates=self.root_certificates,
                    connect_timeout=self.connect_timeout) as client:
            # Without workers, by default, a shared-memory batch is copied out of its slot at
            # once (its tensor may be kept); the copy costs less than the socket path.
            copy = self.writable or (
                worker is None and self.shared_memory is None and _shm.supported()
                and any(map(_shm.is_local, client.targets)))
            with client.stream(self.dataset, **args) as stream:
                while True:
                    try:
                        images, labels, position = next(stream)
                    except StopIteration:
                        return
                    out = (_images_tensor(images, copy),
                           torch.from_numpy(labels.astype(np.int64)))
                    # Hold nothing of a batch once it is handed out: a shared-memory slot goes
                    # back as soon as the consumer (a worker's queue) drops the tensor.
                    del images, labels
                    if not self.job_name:
                        self._next_epochs.reached(worker, position.epoch)
                    yield out
                    del out

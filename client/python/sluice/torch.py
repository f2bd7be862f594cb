"""PyTorch adapter: ready batches from `sluice serve` as an IterableDataset.

    loader = torch.utils.data.DataLoader(
        sluice.torch.SluiceDataset("127.0.0.1:50051", "train", batch_size=256, image_size=224),
        batch_size=None, num_workers=2)
    for images, labels in loader:  # uint8 [256, 224, 224, 3] (NHWC), int64 [256]
        ...

The server batches: use DataLoader(batch_size=None). Each DataLoader worker streams its own
disjoint shard (worker i of n asks for shard i of n within the dataset's own `shard`), so the
workers together see every image once per epoch. Workers create their client after they start.
gRPC does not support fork() while it is in use: when the parent process streams or calls the
server itself, start the workers with DataLoader(multiprocessing_context="spawn").
"""
import warnings

import numpy as np
import torch
import torch.utils.data

from sluice._client import Client
from sluice._malloc import tune_malloc as _tune_malloc


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


class SluiceDataset(torch.utils.data.IterableDataset):
    """Ready (images, labels) batches of `dataset` served at `target`.

    images: uint8 [N, H, W, 3] (NHWC, RGB); labels: int64 [N] (the class-index type of torch's
    losses). Arguments are Client.stream()'s (batch_size, image_size, mode, seed, epochs, shard,
    job_name, start_position, drop_remainder, prefetch) and Client's (token, root_certificates).
    writable: copy each batch's images into a tensor of its own (default: share the received
    message, read-only; see _images_tensor).
    tune_malloc: call sluice.tune_malloc() in the process that streams (e.g. each worker).
    shared_memory, max_held: Client.stream()'s: from a server on this host, images in place in
    shared memory; a tensor holds its batch's slot until it is freed (DataLoader workers hand
    their tensors over by copying them, so a worker holds only the batches in flight).

    With job_name, workers join that shared job instead of taking shards: each batch goes to one
    of them. start_position applies to single-process loading only (num_workers=0).
    """

    def __init__(self, target, dataset, batch_size=None, image_size=None, mode=None, seed=None,
                 epochs=None, shard=None, job_name=None, start_position=None,
                 drop_remainder=None, prefetch=2, token=None, root_certificates=None,
                 writable=False, tune_malloc=False, shared_memory=False, max_held=4):
        super().__init__()
        self.target = target
        self.dataset = dataset
        self.token = token
        self.root_certificates = root_certificates
        self.writable = writable
        self.tune_malloc = tune_malloc
        self.stream_args = dict(batch_size=batch_size, image_size=image_size, mode=mode,
                                seed=seed, epochs=epochs, shard=shard, job_name=job_name,
                                start_position=start_position, drop_remainder=drop_remainder,
                                prefetch=prefetch, shared_memory=shared_memory,
                                max_held=max_held)

    def __iter__(self):
        args = dict(self.stream_args)
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            if args["start_position"] is not None:
                raise ValueError("SluiceDataset: start_position applies to one stream; with "
                                 "%d DataLoader workers use num_workers=0" % info.num_workers)
            if not args["job_name"]:
                args["shard"] = worker_shard(args["shard"], info.id, info.num_workers)
        if self.tune_malloc:
            _tune_malloc()
        # The client is made here, in the process that iterates (a DataLoader worker).
        with Client(self.target, token=self.token,
                    root_certificates=self.root_certificates) as client:
            with client.stream(self.dataset, **args) as stream:
                for images, labels, _ in stream:
                    yield _images_tensor(images, self.writable), torch.from_numpy(
                        labels.astype(np.int64))

#!/usr/bin/python3
"""Competitor benchmark: a plain PyTorch DataLoader over TFRecord shards of JPEGs.

Measures images/s of the TRAIN pipeline as a PyTorch user would write it: an IterableDataset that
reads TFRecord shards (the files split among DataLoader workers), parses tf.train.Example, decodes
with PIL and applies torchvision transforms on the PIL image, batched by the DataLoader (batch 256,
persistent workers, prefetch_factor 2):
  --recipe plain:  RandomResizedCrop(224) (area [0.08, 1], aspect [3/4, 4/3], bilinear)
                   + RandomHorizontalFlip(0.5) + PILToTensor                  -> uint8 NCHW
  --recipe jitter: the same + ColorJitter(0.4, 0.4, 0.4) + ToTensor + Normalize(ImageNet mean,
                   std) + .to(torch.bfloat16)                                  -> bfloat16 NCHW
It repeats epochs forever; after --warmup batches it times --batches batches and prints one JSON
line, e.g.
  {"loader": "pytorch", "images_per_sec": 812.3, "batches": 30, "workers": 2, ...}
with the CPU time its processes used meanwhile (images_per_cpu_sec: less sensitive to other load).

Layout: batches are NCHW (the tensors' CHW per image), the layout PyTorch models consume; Sluice's
plain recipe writes NHWC. Same bytes per image, so the difference does not matter to throughput.

Run with Debian's python (packages python3-torch, python3-torchvision, python3-pil; installed by
`deploy/install-deps.sh`), pinned to the cores under test:
  taskset -c 0-1 /usr/bin/python3 tests/bench/pytorch_loader.py '/tmp/sluice-bench-data/train-*' \
      --workers 2 --batches 30 --recipe jitter
tests/bench/compare.sh runs this next to `sluice profile`, tf.data and DALI.
"""
import io
import os
import random
import struct
import time

import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchvision import transforms

import loader_common


def read_tfrecords(path):
    """Yields each record of an uncompressed TFRecord file as bytes.

    Framing: uint64 length (LE), uint32 masked CRC32C of the length, data, uint32 masked CRC32C
    of the data. The CRCs are NOT verified: pure-Python CRC32C would dominate the profile, and the
    common PyTorch TFRecord readers skip it too. `sluice inspect` verifies the shards.
    """
    with open(path, 'rb', buffering=1 << 20) as f:
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) != 12:
                raise ValueError(f'{path}: truncated record header')
            (length,) = struct.unpack_from('<Q', header)
            data = f.read(length)
            if len(data) != length or len(f.read(4)) != 4:
                raise ValueError(f'{path}: truncated record')
            yield data


def _varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf, pos, end):
    """Yields (field_number, wire_type, value) of one protobuf message; value is the integer for
    varints and the (start, end) span for length-delimited and fixed-width fields."""
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value = (pos, pos + n)
            pos += n
        elif wire == 1:
            value = (pos, pos + 8)
            pos += 8
        elif wire == 5:
            value = (pos, pos + 4)
            pos += 4
        else:
            raise ValueError(f'unsupported wire type {wire}')
        yield number, wire, value


def parse_example(record):
    """Returns (JPEG bytes, label) from a serialized tf.train.Example, by hand from the wire format:
    Example.features=1 -> Features.feature=1 (map entries: key=1, value=2) -> Feature
    {bytes_list=1, float_list=2, int64_list=3}, each list's values in field 1 (int64 packed or not)."""
    buf = memoryview(record)
    jpeg = label = None
    for n, w, features in _fields(buf, 0, len(buf)):
        if n != 1 or w != 2:
            continue
        for n, w, entry in _fields(buf, *features):
            if n != 1 or w != 2:
                continue
            key = value = None
            for n, w, span in _fields(buf, *entry):
                if n == 1 and w == 2:
                    key = buf[span[0]:span[1]]
                elif n == 2 and w == 2:
                    value = span
            if value is None:
                continue
            if key == b'image/encoded':
                for n, w, lst in _fields(buf, *value):
                    if n == 1 and w == 2:  # bytes_list
                        for n, w, v in _fields(buf, *lst):
                            if n == 1 and w == 2:
                                jpeg = bytes(buf[v[0]:v[1]])
                                break
            elif key == b'image/class/label':
                for n, w, lst in _fields(buf, *value):
                    if n == 3 and w == 2:  # int64_list
                        for n, w, v in _fields(buf, *lst):
                            if n == 1 and w == 0:
                                label = v
                            elif n == 1 and w == 2 and v[1] > v[0]:  # packed
                                label, _ = _varint(buf, v[0])
                            if label is not None:
                                break
    if jpeg is None or label is None:
        raise ValueError('record lacks image/encoded or image/class/label')
    if label >= 1 << 63:
        label -= 1 << 64
    return jpeg, label


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _to_bfloat16(tensor):
    return tensor.to(torch.bfloat16)


class TFRecordImages(IterableDataset):
    """(CHW tensor, label) for every record, epoch after epoch (files shuffled per epoch)."""

    def __init__(self, files, image_size, recipe='plain', seed=0):
        self.files = list(files)
        self.seed = seed
        geometry = [
            transforms.RandomResizedCrop(image_size),  # scale (0.08, 1), ratio (3/4, 4/3), bilinear
            transforms.RandomHorizontalFlip(),
        ]
        if recipe == 'plain':
            self.transform = transforms.Compose(geometry + [transforms.PILToTensor()])
        else:
            self.transform = transforms.Compose(geometry + [
                transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4),
                transforms.ToTensor(),
                transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                _to_bfloat16,
            ])

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        if len(self.files) >= workers:  # each worker reads its own files
            files, stride = self.files[worker::workers], 1
        else:  # fewer files than workers: every worker reads all, keeps every workers-th record
            files, stride = self.files, workers
        epoch = 0
        while True:
            order = list(files)
            random.Random(self.seed * 1000003 + epoch * 101 + worker).shuffle(order)
            produced = 0
            for path in order:
                for i, record in enumerate(read_tfrecords(path)):
                    if stride > 1 and i % stride != worker:
                        continue
                    jpeg, label = parse_example(record)
                    image = Image.open(io.BytesIO(jpeg)).convert('RGB')
                    produced += 1
                    yield self.transform(image), label
            if produced == 0:
                return
            epoch += 1


def _worker_init(_):
    torch.set_num_threads(1)


def _cpu_seconds(pids):
    """CPU time (user + system) used so far by this process and the processes `pids`."""
    ticks = 0
    for pid in pids:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return time.process_time() + ticks / os.sysconf('SC_CLK_TCK')


def main():
    args = loader_common.parse_args(__doc__.split('\n')[0], parallelism='workers')
    files = loader_common.shard_files(args.files, 'pytorch_loader')
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    multiprocess = {}
    if args.workers > 0:  # torch 1.13 rejects these options without workers
        multiprocess = dict(persistent_workers=True, prefetch_factor=2, worker_init_fn=_worker_init)
    loader = DataLoader(
        TFRecordImages(files, args.image_size, args.recipe, args.seed),
        batch_size=args.batch_size,
        num_workers=args.workers,
        drop_last=True,
        **multiprocess,
    )
    it = iter(loader)
    workers = [w.pid for w in getattr(it, '_workers', [])]
    # Main process + workers, while timed.
    images, n, seconds, cpu_seconds = loader_common.time_batches(
        lambda: next(it)[0], lambda images: images.shape[0], args.warmup, args.batches,
        cpu_clock=lambda: _cpu_seconds(workers))
    dtype = str(images.dtype)
    del it
    loader_common.report(
        'pytorch', args, 'workers', n, seconds, cpu_seconds,
        shape=list(images.shape),
        dtype=dtype,
        image_bytes=images[0].numel() * images.element_size(),
        output='%s NCHW' % dtype.replace('torch.', ''),
        torch=torch.__version__,
        torchvision=torchvision.__version__)


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Competitor benchmark: an NVIDIA DALI pipeline on the CPU over TFRecord shards of JPEGs.

Measures images/s of the TRAIN pipeline as written for DALI without a GPU (device_id=None, every
op on device "cpu", --threads worker threads): fn.readers.tfrecord (random_shuffle, initial_fill
512, as tf.data's shuffle(512)) -> fn.decoders.image_random_crop (ROI decode of a random window:
area [0.08, 1], aspect [3/4, 4/3], 10 attempts) -> fn.resize to 224x224 (linear, antialiased) ->
  --recipe plain:  fn.flip (horizontal, p 0.5)                    -> uint8 NHWC
  --recipe jitter: fn.color_twist (brightness, contrast, saturation each uniform in [0.6, 1.4])
                   -> fn.crop_mirror_normalize (flip p 0.5, ImageNet mean/std, CHW) -> float16 NCHW
DALI has no bfloat16 type (DALIDataType lists FLOAT16, FLOAT, FLOAT64), so the jitter recipe's
output is float16, the same bytes per image as the others' bfloat16. Its colour twist is a fixed
order and a YIQ-space saturation, not torchvision's random order and grey blend: the closest ops.

DALI's reader needs an index per shard (one "<offset> <length>" line per record, the format of
DALI's tfrecord2idx and of `sluice index`): <shard>.idx next to the shard when present (Sluice's
writers make them), else one this script writes into a temporary folder.

After --warmup batches it times --batches batches and prints one JSON line, e.g.
  {"loader": "dali", "images_per_sec": 1234.5, "batches": 30, "threads": 2, ...}
with the CPU time its threads used meanwhile (images_per_cpu_sec: less sensitive to other load).

Run with build/venv-bench's python (nvidia-dali-cuda130 from `deploy/install-deps.sh --bench`),
pinned to the cores under test:
  taskset -c 0-1 build/venv-bench/bin/python tests/bench/dali_loader.py \
      '/tmp/sluice-bench-data/train-*.tfrecord' --threads 2 --batches 30 --recipe jitter
tests/bench/compare.sh runs this next to `sluice profile`, PyTorch and tf.data.
"""
import os
import struct
import tempfile

import nvidia.dali as dali
import nvidia.dali.tfrecord as tfrec
from nvidia.dali import fn, pipeline_def, types

import loader_common

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def write_index(shard, index):
    """Writes DALI's index of an uncompressed TFRecord file: each record's offset and frame length
    (12-byte header + data + 4-byte CRC). Raises ValueError naming the file and offset of a
    truncated record."""
    size = os.path.getsize(shard)
    with open(shard, 'rb') as f, open(index, 'w') as out:
        offset = 0
        while offset < size:
            header = f.read(12)
            if len(header) != 12:
                raise ValueError(f'{shard}: truncated record header at offset {offset}')
            (length,) = struct.unpack_from('<Q', header)
            frame = 12 + length + 4
            if offset + frame > size:
                raise ValueError(f'{shard}: record at offset {offset} runs past the end')
            out.write(f'{offset} {frame}\n')
            offset += frame
            f.seek(offset)


def indexes_for(files, scratch):
    """The index path of each file: <file>.idx when it exists, else one written under scratch."""
    paths = []
    for i, path in enumerate(files):
        index = path + '.idx'
        if not os.path.isfile(index):
            index = os.path.join(scratch, f'{i:05d}.idx')
            write_index(path, index)
        paths.append(index)
    return paths


def build_pipeline(files, indexes, recipe, threads, batch_size, image_size, seed):
    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=seed)
    def train():
        inputs = fn.readers.tfrecord(
            path=files, index_path=indexes, random_shuffle=True, initial_fill=512, name='Reader',
            features={
                'image/encoded': tfrec.FixedLenFeature((), tfrec.string, ''),
                'image/class/label': tfrec.FixedLenFeature([1], tfrec.int64, -1),
            })
        images = fn.decoders.image_random_crop(
            inputs['image/encoded'], device='cpu', output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
        images = fn.resize(images, resize_x=image_size, resize_y=image_size,
                           interp_type=types.INTERP_LINEAR, antialias=True)
        flip = fn.random.coin_flip(probability=0.5)
        if recipe == 'plain':
            images = fn.flip(images, horizontal=flip)
        else:
            def factor():
                return fn.random.uniform(range=[0.6, 1.4])
            images = fn.color_twist(images, brightness=factor(), contrast=factor(),
                                    saturation=factor())
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT16, output_layout='CHW', mirror=flip,
                mean=[m * 255 for m in IMAGENET_MEAN], std=[s * 255 for s in IMAGENET_STD])
        return images, inputs['image/class/label']

    return train()


def main():
    args = loader_common.parse_args(__doc__.split('\n')[0])
    files = loader_common.shard_files(args.files, 'dali_loader',
                                      keep=lambda f: not f.endswith('.idx'))
    with tempfile.TemporaryDirectory(prefix='dali-index-') as scratch:
        pipe = build_pipeline(files, indexes_for(files, scratch), args.recipe, args.threads,
                              args.batch_size, args.image_size, args.seed)
        pipe.build()
        images, n, seconds, cpu_seconds = loader_common.time_batches(
            lambda: pipe.run()[0], len, args.warmup, args.batches)
        batch = images.as_array()
        del pipe
    loader_common.report(
        'dali', args, 'threads', n, seconds, cpu_seconds,
        shape=list(batch.shape),
        dtype=str(batch.dtype),
        image_bytes=batch.nbytes // len(batch),
        output='%s %s' % (batch.dtype, 'NHWC' if batch.shape[-1] == 3 else 'NCHW'),
        dali=dali.__version__)


if __name__ == '__main__':
    main()

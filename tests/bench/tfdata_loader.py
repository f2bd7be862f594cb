#!/usr/bin/env python3
"""Competitor benchmark: a tf.data input pipeline over TFRecord shards of JPEGs.

Measures images/s of the TRAIN pipeline as written for TensorFlow, using TF's fast path:
TFRecordDataset(num_parallel_reads=AUTOTUNE) -> shuffle(512) -> repeat -> map(parse_single_example,
sample_distorted_bounding_box (area [0.08, 1], aspect [3/4, 4/3], 10 attempts) + decode_and_crop_jpeg
(fused crop decode) + resize to 224x224 (bilinear, no antialias) + random_flip_left_right + the
recipe's pixel ops, num_parallel_calls=AUTOTUNE) -> batch(256, drop_remainder) -> prefetch(AUTOTUNE).
  --recipe plain:  cast uint8                                                  -> uint8 NHWC
  --recipe jitter: / 255, then brightness (x * f), contrast (random_contrast) and saturation
                   (random_saturation), each factor f uniform in [0.6, 1.4] as torchvision's
                   ColorJitter(0.4, 0.4, 0.4) draws them, clipped to [0, 1]; (x - mean) / std
                   (ImageNet), cast bfloat16, transposed to CHW                -> bfloat16 NCHW
The jitter is tf.image's closest equivalent, not torchvision's exact ops: a fixed order rather
than a random one, random_contrast around each channel's mean rather than the grey mean, and
saturation scaled in HSV rather than blended with grey.

tf.data runs on a private thread pool of --threads threads and intra/inter-op parallelism is set to
--threads too; deterministic order is off (the usual training setting, and tf.data's fastest).
After --warmup batches it times --batches batches and prints one JSON line, e.g.
  {"loader": "tf.data", "images_per_sec": 1234.5, "batches": 30, "threads": 2, ...}
with the CPU time it used meanwhile (images_per_cpu_sec: less sensitive to other load).

Run with the venv python (tensorflow-cpu from deploy/install-deps.sh), pinned to the cores under test:
  taskset -c 0-1 build/venv/bin/python tests/bench/tfdata_loader.py \
      '/tmp/sluice-bench-data/train-*' --threads 2 --batches 30 --recipe jitter
tests/bench/compare.sh runs this next to `sluice profile`, PyTorch and DALI.
"""
import os

import loader_common

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
import tensorflow as tf  # noqa: E402


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def jitter(image):
    """ColorJitter(0.4, 0.4, 0.4) + Normalize + bfloat16 CHW of a float HWC image in [0, 255]."""
    image = image / 255.0
    image = tf.clip_by_value(image * tf.random.uniform([], 0.6, 1.4), 0.0, 1.0)
    image = tf.clip_by_value(tf.image.random_contrast(image, 0.6, 1.4), 0.0, 1.0)
    image = tf.clip_by_value(tf.image.random_saturation(image, 0.6, 1.4), 0.0, 1.0)
    image = (image - IMAGENET_MEAN) / IMAGENET_STD
    return tf.transpose(tf.cast(image, tf.bfloat16), [2, 0, 1])


def build_dataset(files, recipe, threads, batch_size, image_size, seed):
    features = {
        'image/encoded': tf.io.FixedLenFeature([], tf.string),
        'image/class/label': tf.io.FixedLenFeature([], tf.int64),
    }
    no_boxes = tf.zeros([1, 0, 4], tf.float32)  # with use_image_if_no_bounding_boxes: whole image

    def train_map(record):
        example = tf.io.parse_single_example(record, features)
        jpeg = example['image/encoded']
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.image.extract_jpeg_shape(jpeg), no_boxes,
            min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        image = tf.image.decode_and_crop_jpeg(jpeg, tf.stack([y, x, h, w]), channels=3)
        image = tf.image.resize(image, [image_size, image_size], method='bilinear',
                                antialias=False)
        image = tf.image.random_flip_left_right(image)
        image = tf.cast(image, tf.uint8) if recipe == 'plain' else jitter(image)
        return image, tf.cast(example['image/class/label'], tf.int32)

    ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
    ds = ds.shuffle(512, seed=seed).repeat()
    ds = ds.map(train_map, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.deterministic = False
    return ds.with_options(options)


def main():
    args = loader_common.parse_args(__doc__.split('\n')[0])
    files = loader_common.shard_files(args.files, 'tfdata_loader')
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.random.set_seed(args.seed)

    it = iter(build_dataset(files, args.recipe, args.threads, args.batch_size, args.image_size, args.seed))
    images, n, seconds, cpu_seconds = loader_common.time_batches(
        lambda: next(it)[0], lambda images: int(images.shape[0]), args.warmup, args.batches)
    loader_common.report(
        'tf.data', args, 'threads', n, seconds, cpu_seconds,
        shape=list(images.shape),
        dtype=images.dtype.name,
        image_bytes=images.dtype.size * int(tf.reduce_prod(images.shape[1:])),
        output='%s %s' % (images.dtype.name, 'NHWC' if images.shape[-1] == 3 else 'NCHW'),
        tensorflow=tf.__version__)


if __name__ == '__main__':
    main()

"""What the competitor loaders (dali_loader.py, tfdata_loader.py, pytorch_loader.py) share: their
command line, the shard list, the timed loop and the one JSON line each prints for compare.sh.

They run as scripts, so this module is found next to them on sys.path.
"""
import argparse
import glob
import json
import sys
import time


def parse_args(description, parallelism='threads'):
    """The loaders' flags; `parallelism` names the flag that sets their threads or workers."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument('files', nargs='+', help='TFRecord files or globs')
    ap.add_argument('--recipe', choices=('plain', 'jitter'), default='plain')
    ap.add_argument('--' + parallelism, type=int, default=2)
    ap.add_argument('--batches', type=int, default=30, help='timed batches')
    ap.add_argument('--warmup', type=int, default=2, help='untimed batches first')
    ap.add_argument('--batch-size', type=int, default=256)
    ap.add_argument('--image-size', type=int, default=224)
    ap.add_argument('--seed', type=int, default=1)
    return ap.parse_args()


def shard_files(patterns, loader, keep=lambda f: True):
    """The files the globs name (a pattern matching nothing stands for itself), sorted; exits
    naming `loader` when none is left."""
    files = sorted({f for pattern in patterns for f in (glob.glob(pattern) or [pattern])})
    files = [f for f in files if keep(f)]
    if not files:
        sys.exit('%s: no files' % loader)
    return files


def time_batches(next_batch, count, warmup, batches, cpu_clock=time.process_time):
    """Runs `warmup` untimed batches, then `batches` timed ones. `next_batch()` returns a batch's
    images, `count(images)` how many images that is, `cpu_clock()` the CPU seconds used so far by
    everything doing the work (process time covers all of a process's threads). Returns the last
    batch's images, the images timed, the wall seconds and the CPU seconds they took."""
    images = None
    for _ in range(warmup):
        images = next_batch()
    cpu_start, start = cpu_clock(), time.perf_counter()
    n = 0
    for _ in range(batches):
        images = next_batch()
        n += count(images)
    seconds = time.perf_counter() - start
    cpu_seconds = cpu_clock() - cpu_start
    return images, n, seconds, cpu_seconds


def report(loader, args, parallelism, n, seconds, cpu_seconds, **details):
    """Prints the one JSON line compare.sh reads: the rates, then `details` (shape, dtype,
    image_bytes, output, versions) in the order given."""
    print(json.dumps({
        'loader': loader,
        'recipe': args.recipe,
        'images_per_sec': round(n / seconds, 1),
        'batches': args.batches,
        parallelism: getattr(args, parallelism),
        'images': n,
        'seconds': round(seconds, 3),
        'cpu_seconds': round(cpu_seconds, 2),
        'images_per_cpu_sec': round(n / cpu_seconds, 1),
        **details,
    }), flush=True)

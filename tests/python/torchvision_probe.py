"""Runs one op of Sluice's pixel kernels (tests/formats/pixel_ops_probe.cc) on an RGB image, for
the tests that compare them with torchvision's functional ops (test_torchvision_*.py)."""
import os
import subprocess
import tempfile

import numpy as np


def probe(image, op, out_dtype=np.uint8, out_shape=None, **params):
    """image: HxWx3 uint8. Returns the probe's output as out_dtype, reshaped to out_shape (default:
    the input's shape)."""
    exe = os.environ["PIXEL_OPS_PROBE"]
    image = np.ascontiguousarray(image, dtype=np.uint8)
    h, w, _ = image.shape
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.rgb"), os.path.join(d, "out.bin")
        image.tofile(src)
        args = [exe, src, str(w), str(h), dst, op] + [f"{k}={v}" for k, v in params.items()]
        run = subprocess.run(args, capture_output=True, text=True)
        assert run.returncode == 0, f"{' '.join(args)}: {run.stderr}"
        out = np.fromfile(dst, dtype=out_dtype)
    return out.reshape(out_shape if out_shape is not None else image.shape)


def photo_like(h, w, seed=0):
    """An image with smooth gradients, edges and noise: what photos have, in a few KB."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([128 + 100 * np.sin(x / 7.0 + c) * np.cos(y / 11.0 - c) for c in range(3)], -1)
    base[h // 3: h // 2, w // 4: w // 2] = [250, 20, 60]
    base += rng.normal(0, 12, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)

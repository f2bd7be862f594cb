"""What the decoder-against-PIL tests (test_pil_png.py, test_pil_webp.py) share: a decode probe
(tests/formats/*_decode_probe.cc) run on bytes, PIL's reading of the same bytes, and a real
`sluice serve` of a folder of such files whose batches are checked against PIL.
"""
import io
import os
import subprocess
import zlib

import numpy as np
import pytest
from PIL import Image

SERVED = 256  # the served images' size: EVAL at 224 resizes 256 to 256 (a copy), then crops 224

ALPHA_POLICIES = (("drop", "ALPHA_DROP"), ("white", "ALPHA_COMPOSITE_WHITE"),
                  ("black", "ALPHA_COMPOSITE_BLACK"))


def probe_fixture(env, name):
    """A module fixture: the path of the built probe `name`, which the variable `env` names."""
    @pytest.fixture(scope="module")
    def probe_bin():
        path = os.environ.get(env)
        if not path or not os.path.exists(path):
            pytest.fail(f"{env} must point at the built {name}")
        return path
    return probe_bin


def run_probe(probe_bin, tmp_path, data, alpha="drop"):
    src = tmp_path / "in"  # the probe goes by the bytes, not the file's name
    out = tmp_path / "out.rgb"
    src.write_bytes(data)
    return subprocess.run([probe_bin, str(src), str(out), alpha], capture_output=True, text=True,
                          timeout=60), out


def decode(probe_bin, tmp_path, data, alpha="drop"):
    proc, out = run_probe(probe_bin, tmp_path, data, alpha)
    assert proc.returncode == 0, proc.stderr
    width, height = map(int, proc.stdout.split())
    return np.frombuffer(out.read_bytes(), np.uint8).reshape(height, width, 3)


def decode_error(probe_bin, tmp_path, data):
    """The probe's message for data it refuses (it must refuse it)."""
    proc, _ = run_probe(probe_bin, tmp_path, data)
    assert proc.returncode == 2, "decoded, but should be refused"
    return proc.stderr


def pil_rgb(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def pil_composite(data, background):
    im = Image.open(io.BytesIO(data)).convert("RGBA")
    back = Image.new("RGBA", im.size, (background,) * 3 + (255,))
    return np.asarray(Image.alpha_composite(back, im).convert("RGB"))


def pil_encode(im, image_format, **params):
    buf = io.BytesIO()
    im.save(buf, image_format, **params)
    return buf.getvalue()


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def write_class_folders(root, images, ext):
    """images (name -> bytes) as root/images/<name>/0.<ext>: one class each, in name order."""
    for name, data in images.items():
        (root / "images" / name).mkdir(parents=True)
        (root / "images" / name / f"0.{ext}").write_bytes(data)


def convert(sluice_bin, images, shards):
    subprocess.run([sluice_bin, "convert", "--from", str(images), "--out", str(shards),
                    "--shards", "1"], check=True, capture_output=True, timeout=120)


def alpha_datasets(files, prefix=""):
    """Config text: the data set <prefix><policy> of `files` (a `files: "…"` line) in EVAL at 224,
    batches of 4, one epoch, under each alpha policy."""
    text = ""
    for name, alpha in ALPHA_POLICIES:
        text += f"""datasets {{
  name: "{prefix}{name}"
  pipeline {{ {files} mode: MODE_EVAL batch_size: 4 image_height: 224 epochs: 1
    alpha: {alpha} }}
}}
"""
    return text


def assert_served_as_pil_centre_cropped(server, dataset, files, alpha):
    """Streams `dataset` (of alpha_datasets) from server: every image is PIL's pixels of
    files[label] under `alpha`, centre-cropped to 224."""
    import sluice  # here, not at the top: this venv's client is imported only where it runs

    with sluice.Client(server.target) as client:
        batches = list(client.stream(dataset))
    images = np.concatenate([b.images for b in batches])
    labels = np.concatenate([b.labels for b in batches])
    assert sorted(labels.tolist()) == list(range(len(files)))
    for image, label in zip(images, labels):
        data = files[label]
        if alpha == "drop":
            expected = pil_rgb(data)
        else:
            expected = pil_composite(data, 255 if alpha == "white" else 0)
        margin = (SERVED - 224) // 2
        np.testing.assert_array_equal(image, expected[margin:margin + 224, margin:margin + 224],
                                      err_msg=f"label {label}")

"""Sluice's labels for image files against torchvision.datasets.ImageFolder on the same tree,
served by a real `sluice serve`: awkward class names (spaces, upper case, non-ASCII), upper-case
extensions, and a nested folder.

ImageFolder walks each class folder recursively (a file in train/b/sub/ is class "b"); a glob
train/*/*.jpg matches only the files directly in a class folder, and labels by the folder that
holds the file. So the glob serves ImageFolder's samples less the nested ones, each with
ImageFolder's label (its classes all hold a direct file here); a file list written from
ImageFolder's samples serves exactly its samples.
"""
import os
import subprocess
import time
from pathlib import Path

import pytest

PHOTOS = Path("/usr/share/backgrounds/mate/nature")
TREE = {
    "b": ["1.jpg", "2.JPG"],
    "A cat": ["x y.jpg", "UPPER.JPEG"],
    "\u00e9t\u00e9": ["a.jpg", "b.jpg"],
    "Zebra": ["z.jpg"],
    "z": ["only.jpg"],
}
NESTED = ("b", "sub", "deep.jpg")


def write_tree(root):
    from PIL import Image
    photos = sorted(PHOTOS.glob("*.jpg")) if PHOTOS.is_dir() else []
    n = 0
    for folder, names in list(TREE.items()) + [(os.path.join(*NESTED[:2]), [NESTED[2]])]:
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name in names:
            if photos:
                img = Image.open(photos[n % len(photos)]).convert("RGB")
                img.thumbnail((96, 96))
            else:
                img = Image.new("RGB", (80, 60), (n * 30 % 256, 90, 200))
            img.save(root / folder / name, format="JPEG", quality=90)
            n += 1


def serve(sluice_bin, workdir, source):
    conf = workdir / "sluice.textproto"
    conf.write_text(f"""listen: "127.0.0.1:0"
datasets {{
  name: "images"
  pipeline {{ {source} batch_size: 3 image_height: 32 epochs: 1 threads: 2 }}
}}
""")
    log = workdir / "serve.log"
    out = open(log, "w")
    proc = subprocess.Popen([sluice_bin, "serve", "--config", str(conf), "--drain-seconds", "1"],
                            stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log.read_text()
        if "listening on 127.0.0.1:" in text:
            return proc, "127.0.0.1:" + text.split("listening on 127.0.0.1:")[1].split()[0]
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("sluice serve did not start:\n" + log.read_text())


def served_labels(sluice_bin, workdir, source, files):
    """{path: [labels]} of one epoch; `files` is the dataset's sorted file list (record_ids'
    file index)."""
    import sluice
    proc, target = serve(sluice_bin, workdir, source)
    try:
        got = {}
        with sluice.Client(target) as c:
            for batch in c.stream("images", record_ids=True, equal_shares="off"):
                for (f, r), label in zip(batch.record_ids.tolist(), batch.labels.tolist()):
                    assert r == 0
                    got.setdefault(files[f], []).append(label)
        return got
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "train"
    write_tree(root)
    return root


def test_folder_glob_labels_equal_torchvision_image_folder_torch(sluice_bin, tree, tmp_path):
    from torchvision.datasets import ImageFolder
    reference = ImageFolder(str(tree))
    # sorted() of the names: code points, the byte order of their UTF-8 that Sluice sorts by.
    assert list(reference.class_to_idx) == ["A cat", "Zebra", "b", "z", "\u00e9t\u00e9"]
    want = {path: label for path, label in reference.samples}
    nested = str(tree.joinpath(*NESTED))
    assert nested in want
    files = sorted(p for p in want if p != nested)
    got = served_labels(sluice_bin, tmp_path, f'files: "{tree}/*/*.{{jpg,JPG,JPEG}}"', files)
    assert got == {p: [want[p]] for p in files}


def test_file_list_from_image_folder_samples_serves_exactly_them_torch(sluice_bin, tree,
                                                                      tmp_path):
    import json
    from torchvision.datasets import ImageFolder
    reference = ImageFolder(str(tree))
    lines = [json.dumps({"path": os.path.relpath(p, tmp_path), "label": label})
             for p, label in reference.samples]
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    files = sorted(p for p, _ in reference.samples)
    got = served_labels(sluice_bin, tmp_path, f'file_list: "{tmp_path}/train.jsonl"', files)
    assert got == {p: [label] for p, label in reference.samples}

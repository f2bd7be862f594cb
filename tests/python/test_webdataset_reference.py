"""WebDataset tar shards written by the webdataset package (1.0.2, build/venv-torch) read by Sluice:
the same samples in the same order as webdataset reads them, with the same labels and images,
through a real `sluice serve` and `sluice inspect --json`; a shard cut mid-member is reported
with file:offset and, under ERROR_POLICY_SKIP, serves the samples before the cut and counts the
skip (ERROR_POLICY_FAIL ends the stream naming the same place); a shard cut between members (no
end-of-archive marker) serves what webdataset reads from it, with a warning naming the cut, and
fails inspect; image_key "jpg" reads the jpg members as the images.
"""
import collections
import io
import json
import subprocess
import tarfile

import numpy as np
import pytest
import webdataset as wds
from PIL import Image

from client_support import Server

SIZE = 32
SHARDS = [  # (file name, TarWriter arguments, sample key prefix)
    ("shard-0.tar", {}, "a.b/c.d/sample"),  # keys with dots in their folders
    ("shard-1.tar.gz", {"compress": True}, "gz/sample"),
    ("shard-2.tar", {"format": "PAX_FORMAT"}, "long-" + "x" * 150 + "/sample"),  # pax paths
]
PER_SHARD = 10


def _image(rng):
    """A smooth random RGB image (a 4x4 grid upscaled), distinct for every sample, as JPEG."""
    small = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
    buf = io.BytesIO()
    small.resize((SIZE, SIZE), Image.BILINEAR).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    out = tmp_path_factory.mktemp("wds")
    (out / "good").mkdir()
    rng = np.random.default_rng(17)
    for name, kwargs, prefix in SHARDS:
        with wds.TarWriter(str(out / "good" / name), **kwargs) as w:
            for i in range(PER_SHARD):
                w.write({"__key__": "%s%03d" % (prefix, i), "jpg": _image(rng),
                         "cls": int(rng.integers(0, 10)), "json": {"i": i, "shard": name},
                         "txt": "caption %d" % i})
    return out


def _webdataset_samples(paths):
    """What webdataset reads: its samples as dicts of bytes, in order, nothing decoded."""
    return list(wds.WebDataset([str(p) for p in paths], shardshuffle=False))


class _TarServer(Server):
    def datasets(self):
        pipeline = ("mode: MODE_EVAL batch_size: 8 image_height: %d epochs: 1 "
                    "no_shuffle_files: true interleave { cycle_length: 1 } accurate_idct: true "
                    "transforms { center_crop { size: [%d, %d] } }" % (SIZE, SIZE, SIZE))
        blocks = [("wds", "%s/good/shard-*" % self.data, ""),
                  ("cut_skip", "%s/cut/cut.tar" % self.data, ""),
                  ("cut_fail", "%s/cut/cut.tar" % self.data, "error_policy: ERROR_POLICY_FAIL"),
                  ("bad_header", "%s/cut/bad-header.tar" % self.data, ""),
                  ("odd", "%s/odd/odd.tar" % self.data, ""),
                  ("clean_cut", "%s/cut/clean-cut.tar" % self.data, ""),
                  ("wds_jpg", "%s/good/shard-*" % self.data, 'image_key: "jpg"')]
        return "".join('datasets {\n  name: "%s"\n  pipeline { files: "%s" %s %s }\n}\n'
                       % (name, files, extra, pipeline) for name, files, extra in blocks)


def _cut_shard(shards):
    """shard-0 cut in the middle of sample 5's jpg: returns (path, offset of that member's
    header, the samples webdataset reads from the whole shard)."""
    src = shards / "good" / "shard-0.tar"
    with tarfile.open(src) as t:
        member = t.getmember("a.b/c.d/sample005.jpg")
    (shards / "cut").mkdir(exist_ok=True)
    path = shards / "cut" / "cut.tar"
    path.write_bytes(src.read_bytes()[:member.offset_data + 100])
    return path, member.offset, _webdataset_samples([src])


def _bad_header_shard(shards):
    """shard-0 with a flipped byte in sample 5's jpg header: returns (path, its offset)."""
    src = shards / "good" / "shard-0.tar"
    with tarfile.open(src) as t:
        member = t.getmember("a.b/c.d/sample005.jpg")
    (shards / "cut").mkdir(exist_ok=True)
    path = shards / "cut" / "bad-header.tar"
    data = bytearray(src.read_bytes())
    data[member.offset + 3] ^= 0x01
    path.write_bytes(bytes(data))
    return path, member.offset


def _clean_cut_shard(shards):
    """shard-0 cut just before sample 5's first member (its cls: TarWriter writes a sample's
    members in key order), at a block boundary, without the end-of-archive blocks: returns
    (path, offset of the cut)."""
    src = shards / "good" / "shard-0.tar"
    with tarfile.open(src) as t:
        member = t.getmember("a.b/c.d/sample005.cls")
    (shards / "cut").mkdir(exist_ok=True)
    path = shards / "cut" / "clean-cut.tar"
    path.write_bytes(src.read_bytes()[:member.offset])
    return path, member.offset


def _odd_shard(shards):
    """A tar written member by member with what webdataset skips or splits in its own way: a
    folder entry, names without a dot, hidden names, metadata, upper-case extensions, a key that
    comes back after another one, a symlink. Returns its path."""
    rng = np.random.default_rng(5)
    (shards / "odd").mkdir(exist_ok=True)
    path = shards / "odd" / "odd.tar"
    members = [("x", None), ("x/a.jpg", _image(rng)), ("x/README", b"r"), (".hidden.txt", b"h"),
               ("__meta__", b"m"), ("__index__/y.txt", b"i"), ("x/a.CLS", b" 3\n"),
               ("x/a.Seg.PNG", b"png?"), ("x/b.jpg", _image(rng)), ("x/b.cls", b"4"),
               ("x/link.jpg", "x/b.jpg"), ("x/b.meta.json", b"{}"), ("x/.c.txt", b"c"),
               ("x/a.jpg", _image(rng)), ("x/a.cls", b"5")]
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def server(sluice_bin, shards, tmp_path_factory):
    _cut_shard(shards)
    _bad_header_shard(shards)
    _odd_shard(shards)
    _clean_cut_shard(shards)
    s = _TarServer(sluice_bin, tmp_path_factory.mktemp("serve"), shards)
    yield s
    s.stop()


def _served(server, dataset):
    import sluice
    with sluice.Client(server.target) as c:
        stream = c.stream(dataset, record_ids=True, shared_memory=False)
        images, labels, ids = [], [], []
        for batch in stream:
            valid = batch.valid if batch.valid is not None else np.ones(len(batch.labels), bool)
            images += [np.array(im) for im, v in zip(batch.images, valid) if v]
            labels += [int(x) for x, v in zip(batch.labels, valid) if v]
            ids += [tuple(r) for r, v in zip(batch.record_ids.tolist(), valid) if v]
        return images, labels, ids, stream.skipped_records


def test_served_samples_are_webdatasets_in_order_with_their_labels_and_images(server, shards):
    paths = [shards / "good" / name for name, _, _ in SHARDS]
    reference = _webdataset_samples(paths)
    assert len(reference) == len(SHARDS) * PER_SHARD
    images, labels, ids, skipped = _served(server, "wds")
    assert skipped == 0
    assert ids == [(f, r) for f in range(len(SHARDS)) for r in range(PER_SHARD)]
    assert labels == [int(s["cls"]) for s in reference]
    decoded = [np.asarray(Image.open(io.BytesIO(s["jpg"])).convert("RGB")) for s in reference]
    assert len({d.tobytes() for d in decoded}) == len(decoded)  # every sample's image differs
    # A centre crop of the whole image, decoded with the accurate IDCT: PIL's pixels exactly.
    for i, (image, expected) in enumerate(zip(images, decoded)):
        assert np.array_equal(image, expected), i


def test_inspect_json_counts_webdatasets_samples_labels_and_members(run_sluice, shards):
    paths = [shards / "good" / name for name, _, _ in SHARDS]
    reference = _webdataset_samples(paths)
    report = json.loads(run_sluice("inspect", "--json", *paths).stdout)
    assert [f["records"] for f in report["files"]] == [PER_SHARD] * len(SHARDS)
    assert [f["compression"] for f in report["files"]] == ["none", "gzip", "none"]
    assert report["corrupt"] == 0 and report["malformed"] == 0
    assert report["labels"] == {str(k): n for k, n in
                                collections.Counter(int(s["cls"]) for s in reference).items()}
    assert report["features"] == {"__key__": "bytes_list", "image/class/label": "int64_list",
                                  "image/encoded": "bytes_list", "json": "bytes_list",
                                  "txt": "bytes_list"}
    member_bytes = sum(len(s[k]) for s in reference for k in ("jpg", "cls", "json", "txt"))
    assert report["data_bytes"] == member_bytes
    assert report["jpeg"]["count"] == len(reference)


def test_shard_cut_mid_member_serves_the_samples_before_it_and_counts_the_skip(server, shards):
    path, offset, whole = _cut_shard(shards)
    images, labels, ids, skipped = _served(server, "cut_skip")
    # Samples 0-4 are whole (sample 5's first member, its cls, was read); 5 is the one cut.
    assert labels == [int(s["cls"]) for s in whole[:5]]
    assert ids == [(0, r) for r in range(5)]
    assert skipped == 1
    where = f"{path}:{offset}: tar member 'a.b/c.d/sample005.jpg' cut short"
    assert where in (server.workdir / "serve.log").read_text()


def test_shard_cut_mid_member_fails_a_fail_policy_stream_naming_file_and_offset(server, shards):
    import sluice
    path, offset, _ = _cut_shard(shards)
    with pytest.raises(sluice.SluiceError) as e:
        _served(server, "cut_fail")
    assert f"{path}:{offset}: tar member 'a.b/c.d/sample005.jpg' cut short" in e.value.message


def test_inspect_names_the_cut_and_counts_the_samples_before_it(run_sluice, shards):
    path, offset, _ = _cut_shard(shards)
    proc = run_sluice("inspect", "--json", path, check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["records"] == 5 and report["corrupt"] == 1
    assert report["files"][0]["stopped"].startswith(f"{path}:{offset}: tar member")


def test_bad_header_checksum_is_skipped_naming_file_and_offset(server, shards):
    path, offset = _bad_header_shard(shards)
    images, labels, ids, skipped = _served(server, "bad_header")
    # TarWriter writes a sample's members in key order: cls, jpg, json, txt. Sample 5's cls was
    # read, so sample 4 is whole and sample 5 is the record reported (webdataset's tarfile would
    # end the shard at the bad header without a word).
    assert ids == [(0, r) for r in range(5)]
    assert skipped == 1
    assert f"{path}:{offset}: bad tar header checksum" in (server.workdir / "serve.log").read_text()


def test_skipped_and_oddly_named_members_group_as_webdataset_groups_them(server, shards,
                                                                         run_sluice):
    path = _odd_shard(shards)
    reference = _webdataset_samples([path])
    # x/a (jpg, cls, seg.png), x/b (jpg, cls, meta.json), x/ (c.txt: base_plus_ext's answer for
    # "x/.c.txt"), x/a again (jpg, cls): the rest is skipped.
    assert [s["__key__"] for s in reference] == ["x/a", "x/b", "x/", "x/a"]
    labels = [int(s["cls"]) for s in reference if "cls" in s]
    report = json.loads(run_sluice("inspect", "--json", path).stdout)
    assert report["records"] == len(reference)
    members = {k for s in reference for k in s} - {"__url__", "__local_path__", "jpg", "cls"}
    assert set(report["features"]) == members | {"image/encoded", "image/class/label"}
    # Served (the image-less sample x/ is skipped as a bad record, with its reason in the log).
    _, served_labels, ids, skipped = _served(server, "odd")
    assert served_labels == labels and skipped == 1
    assert ids == [(0, 0), (0, 1), (0, 3)]


def test_shard_cut_between_members_serves_what_webdataset_reads_and_inspect_warns(
        server, shards, run_sluice):
    path, offset = _clean_cut_shard(shards)
    reference = _webdataset_samples([path])
    assert len(reference) == 5  # tarfile ends there without a word
    _, labels, ids, skipped = _served(server, "clean_cut")
    assert labels == [int(s["cls"]) for s in reference]
    assert ids == [(0, r) for r in range(5)] and skipped == 0
    warning = f"no end-of-archive marker: the shard may be cut short at {path}:{offset}"
    assert (server.workdir / "serve.log").read_text().count(warning) == 1
    proc = run_sluice("inspect", "--json", path, check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["records"] == 5 and report["corrupt"] == 0 and report["warnings"] == 1
    assert report["files"][0]["warnings"] == [warning]
    assert warning in proc.stderr


def test_image_key_jpg_reads_the_jpg_members_as_the_images(server, shards, run_sluice):
    paths = [shards / "good" / name for name, _, _ in SHARDS]
    reference = _webdataset_samples(paths)
    report = json.loads(run_sluice("inspect", "--json", "--image-key", "jpg", *paths).stdout)
    assert report["records"] == len(reference) and report["corrupt"] == 0
    assert "jpg" in report["features"] and "image/encoded" not in report["features"]
    assert report["jpeg"]["count"] == len(reference)
    images, labels, _, skipped = _served(server, "wds_jpg")
    assert skipped == 0
    assert labels == [int(s["cls"]) for s in reference]
    decoded = [np.asarray(Image.open(io.BytesIO(s["jpg"])).convert("RGB")) for s in reference]
    for i, (image, expected) in enumerate(zip(images, decoded)):
        assert np.array_equal(image, expected), i


def _wds2idx(path):
    """The index DALI's tools/wds2idx.py writes for a shard when GNU tar is not on the PATH (its
    IndexCreator._get_data_tarfile, then create_index), restated here as nvidia-dali is not
    installed: each regular member's data offset (tarfile's stream position after its headers,
    in the uncompressed stream), name and size; the extension after the first dot of the last
    path component; consecutive members with one base name one sample; "v1.2 <samples>" first."""
    samples, last = [], None
    with tarfile.open(path) as archive:
        for member in archive:
            if member.type != tarfile.REGTYPE:
                continue
            offset = archive.fileobj.tell()
            assert offset == member.offset_data
            dot = member.name.find(".", member.name.rfind("/") + 1)
            base, ext = member.name[:dot], member.name[dot + 1:]
            if not base or base.endswith("/"):
                continue
            if base != last:
                samples.append([])
                last = base
            samples[-1].append((ext, offset, member.size, member.name))
    lines = ["v1.2 %d" % len(samples)]
    lines += [" ".join(" ".join(map(str, c)) for c in sample) for sample in samples]
    return "\n".join(lines) + "\n"


def test_sluice_index_writes_what_dali_wds2idx_writes(run_sluice, shards, tmp_path):
    """webdataset's shards (keys with dotted folders, gzip, pax long paths): `sluice index` writes
    byte for byte the index wds2idx's algorithm makes of them, and inspect finds it matches."""
    paths = []
    for name, _, _ in SHARDS:
        paths.append(tmp_path / name)
        paths[-1].write_bytes((shards / "good" / name).read_bytes())
    out = run_sluice("index", *paths).stdout
    assert out == "".join("%s.idx: %d samples\n" % (p, PER_SHARD) for p in paths)
    for path in paths:
        assert (tmp_path / (path.name + ".idx")).read_text() == _wds2idx(path), path.name
    report = json.loads(run_sluice("inspect", "--json", *paths).stdout)
    assert [f["index"] for f in report["files"]] == ["matches"] * len(SHARDS)

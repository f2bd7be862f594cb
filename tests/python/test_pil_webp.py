"""WebP decode (formats/webp_codec.h) against PIL, through webp_decode_probe, on files PIL writes:
lossy and lossless, RGB and RGBA (alpha exact or not), gray-looking content, odd sizes. Debian's
Pillow links the same system libwebp (1.2.4) as Sluice; the test checks that it does.

- Every still file: the probe's bytes equal np.asarray(Image.open(f).convert("RGB")).
- Alpha composited onto white or black equals PIL's Image.alpha_composite of
  Image.open(f).convert("RGBA") onto an opaque background, byte for byte (the PNG rule).
- An animated WebP is refused ("animated WebP ... is not decoded"); PIL opens its first frame.
- A file cut short is refused, as PIL refuses it; past its headers, naming the byte it ends at.
- A VP8X file whose alpha flag is clear is opaque, ALPH chunk or not, as PIL opens it.
- A folder of WebP files, the same folder converted by `sluice convert`, and a WebDataset tar of
  them written by the webdataset package, served by a real `sluice serve` under each alpha policy:
  every image is PIL's pixels centre-cropped.
- A crafted lossless file whose Huffman tables (1.3 GB in libwebp) exceed the decode share is
  skipped by a real server from its header; its peak RSS stays small.
"""
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, features

from pil_decode_support import (SERVED, alpha_datasets, assert_served_as_pil_centre_cropped,
                                convert, decode, decode_error, pil_composite, pil_encode, pil_rgb,
                                probe_fixture, rng_for, write_class_folders)

WIDTH, HEIGHT = 37, 23  # odd: lossy chroma is subsampled 2x2, the last column and row alone

probe_bin = probe_fixture("WEBP_DECODE_PROBE", "webp_decode_probe")


def test_pil_links_the_libwebp_sluice_links():
    assert features.version("webp") == "1.2.4"


def pil_save(im, **params):
    return pil_encode(im, "WEBP", **params)


def smooth(r, height, width, channels):
    """A photograph-like image: a smooth gradient and noise (pure noise is no test of lossy)."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)),
                     ((x + y) * 127 // max(width + height - 2, 1))] + [x * 0 + 200] * 3, -1)
    noisy = base[..., :channels] + r.integers(-40, 41, (height, width, channels))
    return np.clip(noisy, 0, 255).astype(np.uint8)


def pil_files():
    """(name, WebP bytes, has alpha) for what PIL writes."""
    files = []
    r = rng_for("pil")
    rgb = smooth(r, HEIGHT, WIDTH, 3)
    rgba = smooth(r, HEIGHT, WIDTH, 4)
    rgba[..., 3] = r.integers(0, 256, (HEIGHT, WIDTH))
    rgba[0, :, 3] = 0
    rgba[1, :, 3] = 255
    gray = smooth(r, HEIGHT, WIDTH, 1)[..., 0]
    for quality in (50, 90):
        files.append((f"lossy RGB q{quality}",
                      pil_save(Image.fromarray(rgb, "RGB"), quality=quality), False))
    files.append(("lossy RGB noise", pil_save(Image.fromarray(
        r.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8), "RGB"), quality=80), False))
    files.append(("lossy RGBA", pil_save(Image.fromarray(rgba, "RGBA"), quality=80), True))
    files.append(("lossy RGBA alpha_quality 50",
                  pil_save(Image.fromarray(rgba, "RGBA"), quality=80, alpha_quality=50), True))
    files.append(("lossy gray-looking", pil_save(Image.fromarray(gray, "L").convert("RGB"),
                                                 quality=80), False))
    files.append(("lossy from L", pil_save(Image.fromarray(gray, "L"), quality=80), False))
    files.append(("lossless RGB", pil_save(Image.fromarray(rgb, "RGB"), lossless=True), False))
    files.append(("lossless RGBA", pil_save(Image.fromarray(rgba, "RGBA"), lossless=True), True))
    files.append(("lossless RGBA exact",
                  pil_save(Image.fromarray(rgba, "RGBA"), lossless=True, exact=True), True))
    files.append(("lossless gray-looking", pil_save(Image.fromarray(gray, "L").convert("RGB"),
                                                    lossless=True), False))
    files.append(("lossless 1x1", pil_save(Image.new("RGB", (1, 1), (1, 2, 3)), lossless=True),
                  False))
    files.append(("lossy 1x1", pil_save(Image.new("RGB", (1, 1), (1, 2, 3))), False))
    return files


PIL_FILES = pil_files()


@pytest.mark.parametrize("name,data,_", PIL_FILES, ids=[f[0] for f in PIL_FILES])
def test_pil_written_webp_decodes_as_pil_converts_it(probe_bin, tmp_path, name, data, _):
    np.testing.assert_array_equal(decode(probe_bin, tmp_path, data), pil_rgb(data))


WITH_ALPHA = [f for f in PIL_FILES if f[2]]


@pytest.mark.parametrize("alpha,background", [("white", 255), ("black", 0)])
@pytest.mark.parametrize("name,data,_", WITH_ALPHA, ids=[f[0] for f in WITH_ALPHA])
def test_alpha_composites_as_pil_alpha_composite(probe_bin, tmp_path, name, data, _, alpha,
                                                  background):
    assert Image.open(io.BytesIO(data)).mode == "RGBA"
    ours = decode(probe_bin, tmp_path, data, alpha)
    np.testing.assert_array_equal(ours, pil_composite(data, background))
    assert not np.array_equal(ours, pil_rgb(data))  # the alpha did change something


@pytest.mark.parametrize("name,data,_", [f for f in PIL_FILES if not f[2]][:3],
                         ids=[f[0] for f in PIL_FILES if not f[2]][:3])
def test_opaque_webp_is_the_same_under_every_alpha_policy(probe_bin, tmp_path, name, data, _):
    rgb = decode(probe_bin, tmp_path, data)
    for alpha in ("white", "black"):
        np.testing.assert_array_equal(decode(probe_bin, tmp_path, data, alpha), rgb)


@pytest.mark.parametrize("lossless", [False, True], ids=["lossy", "lossless"])
def test_animated_webp_is_refused_where_pil_opens_its_first_frame(probe_bin, tmp_path, lossless):
    r = rng_for(f"animated/{lossless}")
    frames = [Image.fromarray(smooth(r, HEIGHT, WIDTH, 3), "RGB") for _ in range(3)]
    data = pil_save(frames[0], save_all=True, append_images=frames[1:], lossless=lossless,
                    duration=100)
    im = Image.open(io.BytesIO(data))
    assert im.is_animated and im.n_frames == 3
    assert im.convert("RGB").size == (WIDTH, HEIGHT)
    message = decode_error(probe_bin, tmp_path, data)
    assert f"animated WebP ({WIDTH}x{HEIGHT} canvas) is not decoded" in message


def pil_refuses(data):
    try:
        pil_rgb(data)
    except (OSError, SyntaxError, ValueError):
        return True
    return False


@pytest.mark.parametrize("name", ["lossy RGBA", "lossless RGBA"])
def test_cut_file_is_refused_as_pil_refuses_it(probe_bin, tmp_path, name):
    data = dict((f[0], f[1]) for f in PIL_FILES)[name]
    # Every 7th byte and the last 16 (every cut point is in tests/formats/webp_codec_test.cc).
    for cut in sorted(set(range(0, len(data), 7)) | set(range(len(data) - 16, len(data)))):
        head = data[:cut]
        assert pil_refuses(head), cut
        message = decode_error(probe_bin, tmp_path, head)
        if cut >= 30:  # past the RIFF and the VP8X or VP8L header: where the data ends
            assert f"DATA_LOSS: WebP data ends at byte {cut}" in message, (cut, message)


@pytest.mark.parametrize("alpha,background", [("drop", None), ("white", 255), ("black", 0)])
def test_alph_chunk_with_vp8x_alpha_flag_clear_is_opaque_as_pil_opens_it(probe_bin, tmp_path,
                                                                        alpha, background):
    data = bytearray(dict((f[0], f[1]) for f in PIL_FILES)["lossy RGBA"])
    assert data[12:16] == b"VP8X" and data[30:34] == b"ALPH" and data[20] & 0x10
    data[20] &= ~0x10  # non-conforming: the flags say no alpha, an ALPH chunk is there
    data = bytes(data)
    assert (np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))[..., 3] == 255).all()
    ours = decode(probe_bin, tmp_path, data, alpha)
    np.testing.assert_array_equal(ours, pil_rgb(data))
    if background is not None:
        np.testing.assert_array_equal(ours, pil_composite(data, background))


def test_vp8x_with_no_image_data_is_refused_as_pil_refuses_it(probe_bin, tmp_path):
    vp8x = b"VP8X" + (10).to_bytes(4, "little") + bytes([0x10, 0, 0, 0]) + \
        (9999).to_bytes(3, "little") * 2
    data = b"RIFF" + (4 + len(vp8x)).to_bytes(4, "little") + b"WEBP" + vp8x
    assert len(data) == 30 and pil_refuses(data)
    assert "WebP data ends at byte 30 with no VP8/VP8L image data" in \
        decode_error(probe_bin, tmp_path, data)


def test_not_a_webp_names_what_it_starts_with(probe_bin, tmp_path):
    assert "not a WebP image (no RIFF....WEBP at byte 0; starts with 0x89 0x50 0x4E 0x47)" in \
        decode_error(probe_bin, tmp_path, b"\x89PNG\r\n\x1a\n")


# ---- Through a real server: a folder, `sluice convert` of it, a webdataset tar ----

def served_images():
    """One WebP per class (the label says which): lossy and lossless, with and without alpha."""
    r = rng_for("served")
    rgba = smooth(r, SERVED, SERVED, 4)
    rgba[..., 3] = r.integers(0, 256, (SERVED, SERVED))
    rgb = smooth(r, SERVED, SERVED, 3)
    return {
        "a_lossy_rgba": pil_save(Image.fromarray(rgba, "RGBA"), quality=85),
        "b_lossless_rgba": pil_save(Image.fromarray(rgba, "RGBA"), lossless=True),
        "c_lossy_rgb": pil_save(Image.fromarray(rgb, "RGB"), quality=85),
        "d_lossless_rgb": pil_save(Image.fromarray(rgb, "RGB"), lossless=True),
    }


@pytest.fixture(scope="module")
def webp_server(sluice_bin, tmp_path_factory):
    import webdataset as wds
    from client_support import Server

    root = tmp_path_factory.mktemp("webp-served")
    images = served_images()
    write_class_folders(root, images, "webp")
    shards = root / "shards"
    convert(sluice_bin, root / "images", shards)
    with wds.TarWriter(str(root / "webp.tar")) as w:
        for label, name in enumerate(sorted(images)):
            w.write({"__key__": name, "webp": images[name], "cls": str(label).encode()})

    sources = {
        "folder": f'files: "{root}/images/*/*.webp"',
        "converted": f'files: "{shards}/train-*.tfrecord"',
        "tar": f'files: "{root}/webp.tar"',
    }

    class WebpServer(Server):
        def datasets(self):
            return "".join(alpha_datasets(files, f"{source}-") for source, files in sources.items())

    server = WebpServer(sluice_bin, root, shards)
    yield server, [images[k] for k in sorted(images)]
    server.stop()


@pytest.mark.parametrize("alpha", ["drop", "white", "black"])
@pytest.mark.parametrize("source", ["folder", "converted", "tar"])
def test_served_webp_batches_are_pils_pixels_centre_cropped(webp_server, source, alpha):
    server, files = webp_server
    assert_served_as_pil_centre_cropped(server, f"{source}-{alpha}", files, alpha)


def many_groups_webp(size, cache_bits, groups):
    """A size x size lossless WebP whose entropy image gives each 4x4 tile its own Huffman group
    (tile i group i % groups), every group five one-symbol codes, every pixel 0
    (tests/webp_test_images.h's ManyGroupsWebp): libwebp 1.2.4 allocates all groups' tables,
    20 KB each at an 11-bit colour cache, before it decodes a pixel."""
    bits = []

    def put(value, n):
        bits.extend((value >> i) & 1 for i in range(n))

    def flat_256_code(alphabet_size):  # symbols 0..255 8 bits each
        put(0, 1), put(19 - 4, 4)
        for c in (17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15):
            put(1 if c == 8 else 0, 3)
        if alphabet_size > 256:
            put(1, 1), put(3, 3), put(254, 8)
        else:
            put(0, 1)

    def flat_symbol(symbol):
        for i in range(7, -1, -1):
            put((symbol >> i) & 1, 1)

    put(0x2F, 8), put(size - 1, 14), put(size - 1, 14), put(1, 1), put(0, 3)
    put(0, 1), put(1, 1), put(cache_bits, 4)  # no transforms; the colour cache
    put(1, 1), put(0, 3), put(0, 1)  # an entropy image of 4x4 tiles, without a cache
    flat_256_code(280), flat_256_code(256)
    for _ in range(3):
        put(0b0001, 4)  # one-symbol codes of symbol 0
    for i in range(((size + 3) // 4) ** 2):
        flat_symbol((i % groups) & 255), flat_symbol((i % groups) >> 8)
    for _ in range(groups * 5):
        put(0b0001, 4)
    put(0, 64)
    stream = bytes(sum(b << j for j, b in enumerate(bits[i:i + 8]))
                   for i in range(0, len(bits), 8))
    chunk = b"VP8L" + len(stream).to_bytes(4, "little") + stream + b"\0" * (len(stream) % 2)
    return b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + chunk


def test_served_webp_whose_huffman_tables_exceed_the_decode_share_is_skipped(sluice_bin,
                                                                            tmp_path):
    """The review's crafted file: 295 KB that libwebp 1.2.4 decodes (all pixels 0) after
    allocating 1.3 GB of Huffman tables. Under a 256 MiB budget the server refuses it from its
    header and serves the others."""
    import sluice
    from client_support import Server

    crafted = many_groups_webp(1024, 11, 65536)
    assert 290_000 < len(crafted) < 300_000
    images = served_images()
    images["e_crafted"] = crafted
    write_class_folders(tmp_path, images, "webp")

    class BudgetServer(Server):
        def datasets(self):
            return f"""datasets {{
  name: "budget"
  pipeline {{ files: "{tmp_path}/images/*/*.webp" mode: MODE_EVAL batch_size: 4
    image_height: 224 epochs: 1 memory_budget_bytes: {256 << 20} }}
}}
"""

    server = BudgetServer(sluice_bin, tmp_path, tmp_path)
    try:
        with sluice.Client(server.target) as client:
            labels = np.concatenate([b.labels for b in client.stream("budget")])
        status = Path(f"/proc/{server.proc.pid}/status").read_text()
        peak_kb = int(status.split("VmHWM:")[1].split()[0])
        assert sorted(labels.tolist()) == [0, 1, 2, 3]  # not 4, the crafted one
        log = (tmp_path / "serve.log").read_text()
        assert "decoding it needs an estimated 1" in log, log
        # Measured: 24 MB; 395 MB when libwebp built the tables (1.3 GB allocated).
        assert peak_kb < 200 << 10, status
    finally:
        server.stop()

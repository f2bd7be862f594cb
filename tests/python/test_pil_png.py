"""PNG decode (formats/png_codec.h) against PIL, through png_decode_probe, on files of every mode:
written by PIL itself (1, L, LA, RGB, RGBA, P at 1/2/4/8 bits with and without transparency,
I;16, with text chunks and an ICC profile), and by a plain writer here for what PIL cannot write
(gray at 2 and 4 bits; RGB, RGBA and gray+alpha at 16 bits; Adam7 interlacing of every layout).

- 8 bits and fewer: the probe's bytes equal np.asarray(Image.open(f).convert("RGB")).
- 16 bits: the probe keeps each sample's high byte (v >> 8). For 16-bit RGB, RGBA and gray+alpha
  that is what PIL gives too (it reads them as "RGB;16B", "RGBA;16B", "LA;16B": the high byte).
  For 16-bit gray PIL opens mode "I" with the full values and convert("RGB") clips them to 255,
  min(v, 255): the probe equals np.asarray(Image.open(f)) >> 8 there, and the test pins PIL's
  clip beside it so a Pillow that changes this shows here.
- Alpha composited onto white or black equals PIL's Image.alpha_composite of
  Image.open(f).convert("RGBA") onto an opaque background, byte for byte.
- A file cut after its last row (the zlib stream's checksum, the last IDAT's CRC or IEND
  missing) decodes as PIL decodes it; cut before, it is refused where PIL says "truncated".
- A palette's tRNS longer than its PLTE gives the PLTE's entries their alpha, as PIL does
  (libpng alone would drop the chunk).

Where Sluice differs from PIL on purpose (the C++ tests pin the PNG rule,
tests/formats/png_codec_test.cc):
- A palette index past the PLTE's entries: PIL shows gray (i, i, i), Sluice refuses the image
  ("palette index N beyond the PLTE's M entries"): a silently wrong image is worse (pinned here).
- A tRNS colour for gray at 2 or 4 bits or for 16-bit gray or RGB: PIL compares the raw tRNS
  value with samples it has already scaled to 8 bits, so other pixels or none turn transparent;
  Sluice follows the PNG spec (the raw sample equals the tRNS value).
- An IDAT whose CRC does not match, its data intact: refused as damage; PIL does not check IDAT
  CRCs.
"""
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageCms, PngImagePlugin

from pil_decode_support import (SERVED, alpha_datasets, assert_served_as_pil_centre_cropped,
                                convert, decode, decode_error, pil_composite, pil_encode, pil_rgb,
                                probe_fixture, rng_for, write_class_folders)

WIDTH, HEIGHT = 37, 23  # odd: partial bytes at 1/2/4 bits, every Adam7 pass uneven

probe_bin = probe_fixture("PNG_DECODE_PROBE", "png_decode_probe")


def pil_save(im, **params):
    return pil_encode(im, "PNG", **params)


# ---- Files PIL writes ----

def pil_files():
    """(name, PNG bytes, has transparency) for every mode PIL writes."""
    files = []
    r = rng_for("pil")
    rgb = r.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)
    rgba = r.integers(0, 256, (HEIGHT, WIDTH, 4), np.uint8)
    rgba[0, :, 3] = 0
    rgba[1, :, 3] = 255
    gray = r.integers(0, 256, (HEIGHT, WIDTH), np.uint8)
    files.append(("1", pil_save(Image.fromarray(gray > 127).convert("1")), False))
    files.append(("L", pil_save(Image.fromarray(gray, "L")), False))
    la = np.stack([gray, rgba[..., 3]], -1)
    files.append(("LA", pil_save(Image.fromarray(la, "LA")), True))
    files.append(("RGB", pil_save(Image.fromarray(rgb, "RGB")), False))
    files.append(("RGBA", pil_save(Image.fromarray(rgba, "RGBA")), True))
    # A transparent colour (tRNS) that some pixels have.
    gray_t = gray.copy()
    gray_t[::3, ::2] = 77
    files.append(("L tRNS", pil_save(Image.fromarray(gray_t, "L"), transparency=77), True))
    rgb_t = rgb.copy()
    rgb_t[::2, ::3] = (10, 200, 30)
    files.append(("RGB tRNS", pil_save(Image.fromarray(rgb_t, "RGB"), transparency=(10, 200, 30)),
                  True))
    for bits in (1, 2, 4, 8):
        colours = 1 << bits
        idx = r.integers(0, colours, (HEIGHT, WIDTH), np.uint8)
        p = Image.fromarray(idx, "P")
        p.putpalette(r.integers(0, 256, colours * 3, np.uint8).tobytes())
        files.append((f"P {bits}-bit", pil_save(p, bits=bits), False))
        alphas = bytes(r.integers(0, 256, max(1, colours // 2), np.uint8))
        files.append((f"P {bits}-bit tRNS", pil_save(p, bits=bits, transparency=alphas), True))
        files.append((f"P {bits}-bit one transparent index",
                      pil_save(p, bits=bits, transparency=0), True))
    g16 = r.integers(0, 65536, (HEIGHT, WIDTH), np.uint16)
    g16[0, :6] = (0, 255, 256, 0x7FFF, 0x8080, 0xFFFF)
    files.append(("I;16", pil_save(Image.fromarray(g16, "I;16")), False))
    # Ancillary chunks change no pixel: text (tEXt, zTXt, iTXt) and an ICC profile.
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "hello")
    info.add_text("Long", "x" * 2000, zip=True)
    info.add_itxt("Title", "\u00e9t\u00e9", lang="fr")
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    files.append(("RGB text+ICC", pil_save(Image.fromarray(rgb, "RGB"), pnginfo=info,
                                           icc_profile=icc), False))
    files.append(("RGB optimize", pil_save(Image.fromarray(rgb, "RGB"), optimize=True), False))
    return files


PIL_FILES = pil_files()


@pytest.mark.parametrize("name,data,_", PIL_FILES, ids=[f[0] for f in PIL_FILES])
def test_pil_written_png_decodes_as_pil_converts_it(probe_bin, tmp_path, name, data, _):
    ours = decode(probe_bin, tmp_path, data)
    if name == "I;16":
        values = np.asarray(Image.open(io.BytesIO(data)))
        assert values.max() > 255
        expected = np.repeat((values >> 8).astype(np.uint8)[..., None], 3, -1)
        np.testing.assert_array_equal(ours, expected)
        # PIL's own convert("RGB") of 16-bit gray clips (documented above; not what we do).
        np.testing.assert_array_equal(pil_rgb(data)[..., 0], np.minimum(values, 255))
        return
    np.testing.assert_array_equal(ours, pil_rgb(data))


TRANSPARENT = [f for f in PIL_FILES if f[2]]


@pytest.mark.parametrize("alpha,background", [("white", 255), ("black", 0)])
@pytest.mark.parametrize("name,data,_", TRANSPARENT, ids=[f[0] for f in TRANSPARENT])
def test_alpha_composites_as_pil_alpha_composite(probe_bin, tmp_path, name, data, _, alpha,
                                                  background):
    ours = decode(probe_bin, tmp_path, data, alpha)
    np.testing.assert_array_equal(ours, pil_composite(data, background))
    assert not np.array_equal(ours, pil_rgb(data))  # the alpha did change something


# ---- Files written here: what PIL cannot write ----

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def pack_row(samples, depth):
    """One filtered scanline (filter 0) of samples at depth bits, big-endian."""
    if depth == 16:
        return b"\0" + samples.astype(">u2").tobytes()
    if depth == 8:
        return b"\0" + samples.astype(np.uint8).tobytes()
    per_byte = 8 // depth
    padded = np.zeros(-(-len(samples) // per_byte) * per_byte, np.uint8)
    padded[:len(samples)] = samples
    groups = padded.reshape(-1, per_byte).astype(np.uint16)
    shifts = np.arange(8 - depth, -1, -depth, dtype=np.uint16)
    return b"\0" + (groups << shifts).sum(1).astype(np.uint8).tobytes()


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def write_png(samples, color_type, depth, interlaced=False, plte=None):
    """samples: (height, width, channels) array of raw sample values."""
    height, width, _ = samples.shape
    raw = b""
    if interlaced:
        for xs, ys, dx, dy in ADAM7:
            sub = samples[ys::dy, xs::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += b"".join(pack_row(row.reshape(-1), depth) for row in sub)
    else:
        raw = b"".join(pack_row(row.reshape(-1), depth) for row in samples)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, int(interlaced))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if plte is not None:
        out += chunk(b"PLTE", plte)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


LAYOUTS = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1), (3, 2), (3, 4),
           (3, 8), (4, 8), (4, 16), (6, 8), (6, 16)]


def raw_file(color_type, depth, interlaced):
    r = rng_for(f"{color_type}/{depth}/{interlaced}")
    samples = r.integers(0, 1 << depth, (HEIGHT, WIDTH, CHANNELS[color_type]), np.uint32)
    plte = r.integers(0, 256, (1 << depth) * 3, np.uint8).tobytes() if color_type == 3 else None
    return samples, write_png(samples, color_type, depth, interlaced, plte)


@pytest.mark.parametrize("interlaced", [False, True], ids=["plain", "adam7"])
@pytest.mark.parametrize("color_type,depth", LAYOUTS, ids=[f"type{t}-{d}bit" for t, d in LAYOUTS])
def test_every_layout_decodes_as_pil_converts_it(probe_bin, tmp_path, color_type, depth,
                                                 interlaced):
    samples, data = raw_file(color_type, depth, interlaced)
    assert Image.open(io.BytesIO(data)).info.get("interlace", 0) == int(interlaced)
    ours = decode(probe_bin, tmp_path, data)
    if color_type == 0 and depth == 16:
        # PIL clips (see the module's docstring); the high byte is the rule.
        expected = np.repeat((samples >> 8).astype(np.uint8), 3, -1)
        np.testing.assert_array_equal(ours, expected)
        return
    np.testing.assert_array_equal(ours, pil_rgb(data))
    if depth == 16:
        colour = samples[..., :3] if color_type != 4 else np.repeat(samples[..., :1], 3, -1)
        np.testing.assert_array_equal(ours, (colour >> 8).astype(np.uint8))
    if color_type in (4, 6):
        for alpha, background in (("white", 255), ("black", 0)):
            np.testing.assert_array_equal(decode(probe_bin, tmp_path, data, alpha),
                                          pil_composite(data, background))


def test_composite_rounding_is_exact_over_every_colour_and_alpha(probe_bin, tmp_path):
    # Every (value, alpha) pair once: out = round((c * a + bg * (255 - a)) / 255).
    c, a = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    samples = np.stack([c, c, c, a], -1).astype(np.uint32)
    data = write_png(samples, 6, 8)
    for alpha, bg in (("white", 255), ("black", 0)):
        ours = decode(probe_bin, tmp_path, data, alpha)
        expected = (c * a + bg * (255 - a) + 127) // 255
        np.testing.assert_array_equal(ours[..., 0], expected)
        np.testing.assert_array_equal(ours, pil_composite(data, bg))


def pil_rgb_or_none(data):
    try:
        return pil_rgb(data)
    except OSError:  # "image file is truncated"
        return None


@pytest.mark.parametrize("kind", ["pil_rgba", "adam7_rgba16"])
def test_cut_tail_decodes_where_pil_does_and_is_data_loss_where_it_does_not(probe_bin, tmp_path,
                                                                             kind):
    r = rng_for(kind)
    if kind == "pil_rgba":
        data = pil_save(Image.fromarray(r.integers(0, 256, (HEIGHT, WIDTH, 4), np.uint8)))
    else:
        data = write_png(r.integers(0, 1 << 16, (HEIGHT, WIDTH, 4), np.uint32), 6, 16, True)
    whole = pil_rgb(data)
    # From 40 bytes before the last IDAT's data ends: its last rows, the zlib checksum, the
    # chunk's CRC and IEND.
    start = len(data) - 12 - 4 - 40
    decoded = 0
    for cut in range(start, len(data)):
        head = data[:cut]
        expected = pil_rgb_or_none(head)
        if expected is None:
            assert f"ends at byte {cut}" in decode_error(probe_bin, tmp_path, head), cut
            continue
        np.testing.assert_array_equal(expected, whole)
        np.testing.assert_array_equal(decode(probe_bin, tmp_path, head), expected,
                                      err_msg=f"cut at {cut}")
        decoded += 1
    assert 20 <= decoded < len(data) - start  # the checksum, CRC and IEND; not the last rows


def test_palette_index_beyond_the_plte_is_refused_where_pil_shows_gray(probe_bin, tmp_path):
    samples = np.array([[[0], [1], [2], [5], [7]]], np.uint32)
    data = write_png(samples, 3, 8, plte=bytes(range(9)))  # three entries
    assert pil_rgb(data).tolist() == [[[0, 1, 2], [3, 4, 5], [6, 7, 8], [5, 5, 5], [7, 7, 7]]]
    assert "palette index 7 beyond the PLTE's 3 entries" in decode_error(probe_bin, tmp_path,
                                                                         data)


@pytest.mark.parametrize("interlaced", [False, True], ids=["plain", "adam7"])
def test_trns_longer_than_the_plte_composites_as_pil_does(probe_bin, tmp_path, interlaced):
    r = rng_for(f"long-trns/{interlaced}")
    samples = r.integers(0, 3, (HEIGHT, WIDTH, 1), np.uint32)
    data = write_png(samples, 3, 4, interlaced, plte=r.integers(0, 256, 9, np.uint8).tobytes())
    idat = data.index(b"IDAT") - 4
    data = data[:idat] + chunk(b"tRNS", bytes([0, 90, 200, 30, 255])) + data[idat:]
    for alpha, background in (("white", 255), ("black", 0)):
        np.testing.assert_array_equal(decode(probe_bin, tmp_path, data, alpha),
                                      pil_composite(data, background))


# ---- Through a real server: `sluice convert` of PIL's files, then `sluice serve` ----

def served_images():
    """One PNG per class (the label says which), every one with alpha or tRNS to composite."""
    r = rng_for("served")
    rgba = r.integers(0, 256, (SERVED, SERVED, 4), np.uint8)
    la = r.integers(0, 256, (SERVED, SERVED, 2), np.uint8)
    idx = r.integers(0, 256, (SERVED, SERVED), np.uint8)
    p = Image.fromarray(idx, "P")
    p.putpalette(r.integers(0, 256, 768, np.uint8).tobytes())
    rgb16 = r.integers(0, 1 << 16, (SERVED, SERVED, 4), np.uint32)
    return {
        "a_rgba": pil_save(Image.fromarray(rgba, "RGBA")),
        "b_la": pil_save(Image.fromarray(la, "LA")),
        "c_palette": pil_save(p, transparency=bytes(range(0, 256, 2))),
        "d_rgba16_adam7": write_png(rgb16, 6, 16, interlaced=True),
    }


@pytest.fixture(scope="module")
def png_server(sluice_bin, tmp_path_factory):
    from client_support import Server

    root = tmp_path_factory.mktemp("png-served")
    images = served_images()
    write_class_folders(root, images, "png")
    shards = root / "shards"
    convert(sluice_bin, root / "images", shards)

    class PngServer(Server):
        def datasets(self):
            return alpha_datasets(self.files)

    server = PngServer(sluice_bin, root, shards)
    yield server, [images[k] for k in sorted(images)]
    server.stop()


@pytest.mark.parametrize("alpha", ["drop", "white", "black"])
def test_served_png_batches_are_pils_pixels_centre_cropped(png_server, alpha):
    server, files = png_server
    assert_served_as_pil_centre_cropped(server, alpha, files, alpha)

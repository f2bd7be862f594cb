#!/usr/bin/env python3
"""Writes the seed inputs of each fuzz target into tests/fuzz/corpus/<target>/seed-*.

Seeds are small valid inputs (and a few damaged ones) that a campaign starts from; the corpus
keeps them beside what campaigns add. Run with the test venv's Python, which has TensorFlow (its
tf.train.Example), the sluice client's protos and, for the JPEGs, Pillow:
    build/venv/bin/pip install pillow && build/venv/bin/python tests/fuzz/make_seeds.py
The output is deterministic; the seeds are committed, so builds never run this.
"""
import gzip
import io
import json
import os
import random
import struct
import zlib

from PIL import Image
import tensorflow as tf
from sluice.v1 import config_pb2, service_pb2

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record):
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked(length)) + record + struct.pack("<I", masked(record))


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, "seed-" + name), "wb") as f:
        f.write(data)


def jpeg(mode, size, **options):
    rng = random.Random(size[0] * 1000 + size[1])
    channels = {"L": 1, "RGB": 3, "CMYK": 4}[mode]
    pixels = bytes(rng.randrange(256) for _ in range(size[0] * size[1] * channels))
    out = io.BytesIO()
    Image.frombytes(mode, size, pixels).save(out, "JPEG", **options)
    return out.getvalue()


def png_chunk(kind, body):
    return (struct.pack(">I", len(body)) + kind + body
            + struct.pack(">I", zlib.crc32(kind + body)))


def png(color_type, depth, width, height, interlaced=False, extra=b""):
    """A PNG of random samples, written here byte by byte (filter 0 rows; Adam7 when
    interlaced); a palette of 2^depth entries for colour type 3; extra: chunks before IDAT."""
    rng = random.Random(color_type * 100 + depth * 10 + width + interlaced)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    rows = [[rng.randrange(1 << depth) for _ in range(width * channels)] for _ in range(height)]

    def pack(samples):
        if depth == 16:
            return b"\0" + b"".join(struct.pack(">H", v) for v in samples)
        if depth == 8:
            return b"\0" + bytes(samples)
        out, bits, acc = bytearray(), 0, 0
        for v in samples:
            acc, bits = (acc << depth) | v, bits + depth
            if bits == 8:
                out.append(acc)
                acc, bits = 0, 0
        if bits:
            out.append(acc << (8 - bits))
        return b"\0" + bytes(out)

    if interlaced:
        raw = b""
        for xs, ys, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                               (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            for y in range(ys, height, dy):
                picked = [rows[y][x * channels + c] for x in range(xs, width, dx)
                          for c in range(channels)]
                if picked:
                    raw += pack(picked)
    else:
        raw = b"".join(pack(r) for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, int(interlaced))
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
    if color_type == 3:
        out += png_chunk(b"PLTE", bytes(rng.randrange(256) for _ in range(3 << depth)))
    out += extra
    idat = zlib.compress(raw)
    half = len(idat) // 2  # two IDAT chunks: the stream crosses a chunk boundary
    return (out + png_chunk(b"IDAT", idat[:half]) + png_chunk(b"IDAT", idat[half:])
            + png_chunk(b"IEND", b""))


def png_decode_seeds():
    images = {
        "gray-1.png": png(0, 1, 9, 7),
        "gray-4-adam7.png": png(0, 4, 9, 7, interlaced=True),
        "gray-16-trns.png": png(0, 16, 5, 5, extra=png_chunk(b"tRNS", b"\x01\x02")),
        "rgb-8.png": png(2, 8, 9, 7),
        "rgb-16-adam7.png": png(2, 16, 11, 9, interlaced=True),
        "palette-2-trns.png": png(3, 2, 9, 7, extra=png_chunk(b"tRNS", b"\x00\x80")),
        "palette-8-adam7.png": png(3, 8, 10, 10, interlaced=True),
        "gray-alpha-8.png": png(4, 8, 6, 6, extra=png_chunk(b"tEXt", b"Comment\0seed")),
        "rgba-8-adam7.png": png(6, 8, 9, 7, interlaced=True),
        "rgba-16.png": png(6, 16, 7, 3),
    }
    for i, (name, data) in enumerate(sorted(images.items())):
        # Byte 0 picks the alpha policy (see png_decode_fuzz.cc), then the file.
        write("png_decode", name, bytes([i % 3]) + data)
    rgba = images["rgba-8-adam7.png"]
    write("png_decode", "truncated.png", bytes([1]) + rgba[: len(rgba) * 2 // 3])


def webp_decode_seeds():
    rng = random.Random(17)

    def image(mode, size):
        channels = len(mode)
        return Image.frombytes(mode, size, bytes(rng.randrange(256)
                                                 for _ in range(size[0] * size[1] * channels)))

    def save(im, **params):
        out = io.BytesIO()
        im.save(out, "WEBP", **params)
        return out.getvalue()

    frames = [image("RGB", (8, 6)), image("RGB", (8, 6))]
    files = {
        "lossy-rgb.webp": save(image("RGB", (9, 7)), quality=80),
        "lossy-rgba.webp": save(image("RGBA", (9, 7)), quality=80),
        "lossless-rgb.webp": save(image("RGB", (9, 7)), lossless=True),
        "lossless-rgba-exact.webp": save(image("RGBA", (9, 7)), lossless=True, exact=True),
        "animated.webp": save(frames[0], save_all=True, append_images=frames[1:], lossless=True),
    }
    for i, (name, data) in enumerate(sorted(files.items())):
        # Byte 0 picks the alpha policy (see webp_decode_fuzz.cc), then the file.
        write("webp_decode", name, bytes([i % 3]) + data)
    for name in ("lossy-rgba.webp", "lossless-rgb.webp"):
        data = files[name]
        write("webp_decode", "truncated-" + name, bytes([1]) + data[: len(data) * 2 // 3])
    # An entropy image naming a Huffman group per tile: as the image (colour cache 11 bits) and
    # as a lossy image's lossless alpha; then bare streams, of the size byte 0 gives them.
    write("webp_decode", "many-groups.webp",
          bytes([0]) + riff_webp([riff_chunk(b"VP8L", many_groups_stream(32, 32, 11, 64, True))]))
    lossy = save(image("RGB", (32, 32)), quality=80)
    assert lossy[12:16] == b"VP8 "
    vp8x = riff_chunk(b"VP8X", bytes([0x10, 0, 0, 0]) + (31).to_bytes(3, "little") * 2)
    alph = riff_chunk(b"ALPH", b"\x01" + many_groups_stream(32, 32, 0, 64, False))
    write("webp_decode", "many-groups-alpha.webp",
          bytes([2]) + riff_webp([vp8x, alph, lossy[12:]]))
    # Byte 0 of 15: a 16x16 VP8L stream; of 128: an 18x14 ALPH stream.
    write("webp_decode", "bare-vp8l", bytes([15]) + many_groups_stream(16, 16, 3, 16, True))
    write("webp_decode", "bare-alph", bytes([128]) + many_groups_stream(18, 14, 0, 20, False))


def many_groups_stream(width, height, cache_bits, groups, vp8l_header):
    """A lossless image stream whose entropy image gives its 4x4 tiles `groups` Huffman groups
    (tile i group i % groups), each of five one-symbol codes (tests/webp_test_images.h's
    ManyGroupsLosslessStream): libwebp allocates every group's tables before a pixel."""
    bits = []

    def put(value, n):
        bits.extend((value >> i) & 1 for i in range(n))

    def one_symbol_code():
        put(1, 1), put(0, 1), put(0, 1), put(0, 1)

    def flat_256_code(alphabet_size):
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

    if vp8l_header:
        put(0x2F, 8), put(width - 1, 14), put(height - 1, 14), put(1, 1), put(0, 3)
    put(0, 1)
    if cache_bits:
        put(1, 1), put(cache_bits, 4)
    else:
        put(0, 1)
    put(1, 1), put(0, 3), put(0, 1)
    flat_256_code(280), flat_256_code(256)
    for _ in range(3):
        one_symbol_code()
    for i in range(((width + 3) // 4) * ((height + 3) // 4)):
        flat_symbol((i % groups) & 255), flat_symbol((i % groups) >> 8)
    for _ in range(groups * 5):
        one_symbol_code()
    put(0, 64)
    return bytes(sum(b << j for j, b in enumerate(bits[i:i + 8])) for i in range(0, len(bits), 8))


def riff_chunk(tag, body):
    return tag + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def riff_webp(chunks):
    body = b"WEBP" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def example(features):
    def feature(v):
        if isinstance(v, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
        if isinstance(v, float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=[v, -v]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v, v + 1]))

    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
    ).SerializeToString()


def feature_extract_seeds():
    """Records for feature_extract_fuzz.cc's schema (keys a..i, boxes x0 y0 x1 y1 l): one that
    satisfies every column, one with the defaults taken, and bad ones."""
    def f(kind, values):
        return tf.train.Feature(**{kind: {"int64_list": tf.train.Int64List,
                                          "float_list": tf.train.FloatList,
                                          "bytes_list": tf.train.BytesList}[kind](value=values)})

    def record(features):
        return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()

    full = {
        "a": f("int64_list", [1, -2, 2**62]), "b": f("float_list", [0.5, float("nan")]),
        "c": f("bytes_list", [b"x", b""]), "d": f("int64_list", [4]),
        "e": f("float_list", [1.5]), "f": f("bytes_list", [b"l", b"r"]),
        "g": f("float_list", [1, 2, 3]), "h": f("int64_list", [0, 7, 7]),
        "i": f("int64_list", [3]),
        "x0": f("float_list", [0.1, -0.2]), "y0": f("float_list", [0.2, 0.0]),
        "x1": f("float_list", [0.9, 1.4]), "y1": f("float_list", [0.8, 1.0]),
        "l": f("int64_list", [5, 6]),
    }
    write("feature_extract", "full", record(full))
    write("feature_extract", "defaults", record({"e": full["e"], "i": full["i"]}))
    write("feature_extract", "inverted-box", record({**full, "x1": f("float_list", [0.0, 1.0])}))
    write("feature_extract", "wrong-kind", record({**full, "g": f("int64_list", [1, 2, 3])}))
    write("feature_extract", "over-max-bytes", record({**full, "c": f("bytes_list", [b"y" * 600])}))


def main():
    feature_extract_seeds()
    small = jpeg("RGB", (16, 12), quality=90)
    images = {
        "rgb-420.jpg": small,
        "rgb-444.jpg": jpeg("RGB", (33, 17), quality=95, subsampling=0),
        "rgb-422-restart.jpg": jpeg("RGB", (40, 24), quality=80, subsampling=1,
                                    restart_marker_blocks=2),
        "progressive.jpg": jpeg("RGB", (24, 24), quality=90, progressive=True),
        "gray.jpg": jpeg("L", (20, 9), quality=90),
        "cmyk.jpg": jpeg("CMYK", (16, 16), quality=90),
        "gray-progressive.jpg": jpeg("L", (17, 31), progressive=True),
    }
    for name, data in images.items():
        # Crop bytes, output size, flags (see jpeg_decode_fuzz.cc), then the file.
        write("jpeg_decode", name, bytes([0, 0, 255, 255, 16, 0]) + data)
        write("jpeg_decode", "crop-" + name, bytes([100, 60, 90, 200, 7, 3]) + data)
    write("jpeg_decode", "truncated.jpg", bytes([0, 0, 255, 255, 16, 0]) + small[: len(small) // 2])
    png_decode_seeds()
    webp_decode_seeds()

    records = [
        example({"image/encoded": small, "image/class/label": 3, "image/format": b"JPEG"}),
        example({"image/encoded": b"x" * 40, "image/class/label": -7, "score": 0.5}),
        b"",
    ]
    for i, r in enumerate(records):
        write("example_scanner", "example-%d" % i, r)
    plain = b"".join(frame(r) for r in records)
    # Flags byte (buffer size, CRC repair), loan seed, then the file.
    write("tfrecord_reader", "plain", bytes([1, 7]) + plain)
    write("tfrecord_reader", "plain-tiny-buffer", bytes([0, 9]) + plain)
    write("tfrecord_reader", "gzip", bytes([2, 3]) + gzip.compress(plain, mtime=0))
    write("tfrecord_reader", "zlib", bytes([3, 5]) + zlib.compress(plain))
    write("tfrecord_reader", "truncated", bytes([4, 1]) + plain[:-9])
    write("tfrecord_reader", "length-damaged", bytes([2, 2]) + b"\x05" + plain[1:])

    write("record_index", "three", b"0 16\n16 100\n116 20\n")
    write("record_index", "crlf", b"0 32\r\n32 16\r\n")
    write("tar_index", "two-samples",
          b"v1.2 2\njpg 512 700 s1.jpg cls 2048 2 s1.cls\njpg 3584 1400 s2.jpg\n")
    write("tar_index", "tfrecord-index", b"0 16\n16 100\n")
    write("tar_index", "crlf-empty-lines", b"v1.2 1\r\nseg.png 1024 0 a/b.c/k.seg.png\r\n\n")

    meta = service_pb2.Batch()
    meta.position.epoch, meta.position.index, meta.position.end_record = 1, 2, 8
    meta.shape.extend([2, 2, 3, 3])
    meta.labels.extend([4, -1])
    meta.skipped_records = 1
    batch = service_pb2.Batch()
    batch.CopyFrom(meta)
    batch.images = bytes(range(36))
    write("batch_wire", "images", bytes([5]) + batch.SerializeToString())
    shared = service_pb2.Batch()
    shared.CopyFrom(meta)
    shared.shared_memory.slot, shared.shared_memory.length = 3, 36
    write("batch_wire", "shared-memory", bytes([9]) + shared.SerializeToString())
    padded = service_pb2.Batch()
    padded.CopyFrom(batch)
    padded.valid.extend([True, False])
    padded.record_files.extend([3, 3])
    padded.record_indexes.extend([7, 1 << 33])
    write("batch_wire", "padded-with-record-ids", bytes([7]) + padded.SerializeToString())
    empty = service_pb2.Batch()
    empty.shape.extend([0, 4, 4, 3])
    write("batch_wire", "empty", bytes([1]) + empty.SerializeToString())

    header = {"image_size": 8, "patch": 4, "width": 2, "depth": 1, "classes": 2, "step": 5,
              "adam_updates": 4, "has_position": True, "epoch": 0, "index": 4, "end_record": 40,
              "parameters": 3, "loss_scale": 1024.0, "loss_scale_good_steps": 2}
    text = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack("<9f", *[0.5 * i for i in range(9)])
    file = b"SLCKPT01" + struct.pack("<I", len(text)) + text + body
    file += struct.pack("<I", masked(file))
    # Mode byte: 0 the file as it is, 1 its checksum repaired, 2 header and body framed.
    write("checkpoint", "whole", bytes([0]) + file)
    write("checkpoint", "repaired", bytes([1]) + file[:20] + b"9" + file[21:])
    write("checkpoint", "framed", bytes([2]) + text + b"\0" + body)

    requests = [
        service_pb2.StreamRequest(dataset="train", batch_size=64, image_height=224, seed=5),
        service_pb2.StreamRequest(dataset="eval", batch_size=32, image_height=128, epochs=1),
        service_pb2.StreamRequest(dataset="sharded", job_name="j1", shard={"index": 2, "count": 4}),
    ]
    r = service_pb2.StreamRequest(dataset="train", mode=config_pb2.MODE_EVAL)
    r.start_position.epoch, r.start_position.index = 1, 3
    requests.append(r)
    for i, r in enumerate(requests):
        write("stream_request", "request-%d" % i, r.SerializeToString())

    shared_segment_seeds()
    http_seeds()
    tar_seeds(small)


def shared_segment_seeds():
    """Inputs of shared_segment_fuzz.cc: a mode byte (even: hostile server, odd: hostile client),
    then what that mode reads (see the target)."""
    u32 = lambda v: struct.pack("<I", v)
    # Hostile server, a real segment of 4 slots of 5000 bytes (8192 each), the client asking for
    # 4 of at most 8192: slot 0 set full, then announced.
    announce = b"\x00" + u32(1) + b"\x00\x00" + b"\x01\x00" + u32(100) + b"\x02" + u32(0) + \
        struct.pack("<Q", 1 << 40)
    asks = b"\x03" + u32(8191)
    write("shared_segment", "server-real",
          b"\x00\x00\x03" + u32(5000) + b"\x00" + asks + announce)
    # The same with its slot count and id overwritten.
    write("shared_segment", "server-real-patched",
          b"\x00\x00\x03" + u32(5000) + b"\x02" + b"\x08\x03\xff\xff\xff\xff" +
          b"\x20\x0f" + bytes(range(16)) + asks + announce)
    # The client asking for fewer slots, and for smaller ones, than the server made.
    write("shared_segment", "server-real-fewer-slots",
          b"\x00\x00\x03" + u32(5000) + b"\x00" + b"\x02" + u32(8191) + announce)
    write("shared_segment", "server-real-smaller-slots",
          b"\x00\x00\x03" + u32(5000) + b"\x00" + b"\x03" + u32(4095) + announce)
    # A memfd the server made: well-formed header (2 slots of a page), sealed or not, named with
    # its id or another; a zero attach key; the client asking for 2 slots of at most a page.
    header = bytearray(128)
    header[8] = 1
    for name, seals, id_bytes in (("sealed", 7, b"\x00"), ("unsealed", 0, b"\x00"),
                                  ("shrink-only", 2, b"\x00"),
                                  ("other-id", 7, b"\x01" + bytes(range(1, 17)))):
        write("shared_segment", "server-memfd-" + name,
              b"\x00\x01\x01" + u32(0) + bytes(header) + b"\x00" + bytes([seals]) + id_bytes +
              bytes(16) + b"\x01" + u32(4095) + announce)
    # Hostile client: fills, honest frees, a word neither free nor full.
    write("shared_segment", "client-protocol",
          b"\x01\x02" + b"\x00\x00" + b"\x02\x00\x00" + b"\x00" +
          b"\x01" + u32(0xDEADBEEF) + bytes([13]) + b"\x00")
    # Hostile client: holes, truncation and resealing, attach fields (the key, the key one byte
    # off, zeros), full on an unfilled slot.
    write("shared_segment", "client-resize",
          b"\x01\x01" + b"\x00" + b"\x03\x01\x01" + b"\x00" + b"\x04" + u32(4096) +
          b"\x05\x00\x03\x00" + b"\x05\x00\x05\x01" + b"\x05\x01" + bytes(16) +
          b"\x02\x02\x01" + b"\x00")


def http_seeds():
    """What a client may write on the metrics port: one connection's bytes each."""
    get = b"GET /metrics HTTP/1.1\r\nHost: localhost:9100\r\nUser-Agent: Prometheus/2.45\r\n" \
          b"Accept: text/plain;version=0.0.4\r\n\r\n"
    seeds = {
        "get": get,
        "healthz-kubelet": b"GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:9100\r\n"
                           b"User-Agent: kube-probe/1.29\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        "head": b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
        "http10": b"GET /healthz?x=1 HTTP/1.0\r\n\r\n",
        "http10-keep-alive": b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /metrics HTTP/1.0\r\n\r\n",
        "pipelined": get + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nHEAD /echo?a HTTP/1.1\r\nHost: x\r\n\r\n",
        "truncated-request-line": b"GET /metr",
        "truncated-headers": b"GET /metrics HTTP/1.1\r\nHost: loc",
        "truncated-body": b"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
        "oversized-header": b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 3000 + b"\r\n\r\n",
        "oversized-body": b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n" + b"b" * 2000,
        "chunked": b"GET /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nTrailer: t\r\n\r\n",
        "chunked-bad-size": b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "content-length-twice": b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "length-and-chunked": b"GET / HTTP/1.1\r\nContent-Length: 3\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "post": b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        "odd-methods": b"PROPFIND / HTTP/1.1\r\n\r\nBREW /pot HTTP/1.1\r\n\r\n",
        "lowercase-method": b"get / HTTP/1.1\r\n\r\n",
        "connect-authority": b"CONNECT localhost:9100 HTTP/1.1\r\nHost: localhost:9100\r\n\r\n",
        "absolute-target": b"GET http://localhost:9100/healthz HTTP/1.1\r\nHost: y\r\n\r\n",
        "asterisk-options": b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
        "expect-continue": b"GET /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                           b"Content-Length: 2\r\n\r\nok",
        "obs-fold": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n",
        "bare-lf": b"GET /healthz HTTP/1.1\nHost: x\n\n",
        "nul-in-target": b"GET /heal\x00thz HTTP/1.1\r\n\r\n",
        "http-2-preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "version-9": b"GET / HTTP/9.9\r\n\r\n",
        "handler-throws": b"GET /throw HTTP/1.1\r\n\r\nGET /status99 HTTP/1.1\r\n\r\n",
        "big-response-then-close": b"GET /big HTTP/1.1\r\nConnection: close\r\n\r\n",
        "tls-client-hello": bytes.fromhex("16030100a5010000a10303") + bytes(32) + b"\x00\x00\x02\x13\x01",
    }
    for name, data in seeds.items():
        write("http_request", name, data)


def tar_seeds(jpeg_bytes):
    """WebDataset shards as tarfile writes them (ustar, GNU long names, pax), plain and damaged;
    byte 0 of each: buffer size and whether checksums are remade (see the target)."""
    import tarfile

    def shard(fmt, members):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
            for name, data in members:
                info = tarfile.TarInfo(name)
                if data is None:
                    info.type = tarfile.DIRTYPE
                    t.addfile(info)
                else:
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    samples = [("d/s%d.%s" % (i, ext), data) for i in range(3)
               for ext, data in (("jpg", jpeg_bytes), ("cls", b"%d\n" % i), ("json", b"{}"))]
    ustar = shard(tarfile.USTAR_FORMAT, [("d", None)] + samples + [("README", b"r")])
    long_key = "k" * 120 + "/s"
    write("tar_sample_reader", "ustar", bytes([1, 0]) + ustar)
    write("tar_sample_reader", "ustar-tiny-buffer-limit", bytes([0, 2]) + ustar)
    write("tar_sample_reader", "gnu-long-names",
          bytes([2, 0]) + shard(tarfile.GNU_FORMAT, [(long_key + ".jpg", jpeg_bytes),
                                                     (long_key + ".cls", b"1")]))
    write("tar_sample_reader", "pax",
          bytes([2, 3]) + shard(tarfile.PAX_FORMAT, [(long_key + ".jpg", jpeg_bytes),
                                                     ("caf\u00e9.cls", b"x")]))
    write("tar_sample_reader", "cut", bytes([4, 0]) + ustar[:2000])
    damaged = bytearray(ustar)
    damaged[1024 + 7] ^= 1
    write("tar_sample_reader", "bad-checksum", bytes([1, 0]) + bytes(damaged))


if __name__ == "__main__":
    main()

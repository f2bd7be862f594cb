"""The Python reader of shared-memory segments (sluice._shm) against the one description of their
layout, client/wire/shared_segment_layout.h, as printed by a helper built from it
(tests/client/wire/shm_segment_writer.cc), and against a segment the C++ SharedSegment wrote."""
import errno
import gc
import json
import os
import struct
import subprocess

import grpc
import pytest

from sluice import _shm
from sluice._errors import SluiceError


@pytest.fixture(scope="module")
def writer():
    path = os.environ.get("SLUICE_SHM_WRITER")
    if not path or not os.path.exists(path):
        pytest.fail("SLUICE_SHM_WRITER must point at the built shm_segment_writer")
    return path


@pytest.fixture(scope="module")
def layout(writer):
    out = subprocess.run([writer, "layout"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return json.loads(out)


def header_fields():
    """(offset, size) of each field of _shm's header struct, then its attached and state words."""
    fmt = _shm._HEADER.format
    order, codes = fmt[0], fmt[1:]
    fields, at = [], 0
    i = 0
    while i < len(codes):
        j = i
        while codes[j].isdigit():
            j += 1
        code = codes[i:j + 1]
        size = struct.calcsize(order + code)
        fields.append((at, size))
        at += size
        i = j + 1
    return fields


def test_constants_match_the_layout(layout):
    assert _shm._MAGIC == layout["magic"].encode()
    assert _shm._PAGE == layout["header_bytes"]
    assert _shm._MAX_SLOTS == layout["max_slots"]
    assert _shm.SEGMENT_KEY == layout["segment_key"]
    assert (_shm._SLOT_FREE, _shm._SLOT_FULL) == (layout["slot_free"], layout["slot_full"])
    assert _shm._MEMFD_NAME == layout["memfd_name"]
    assert _shm._REQUIRED_SEALS == layout["required_seals"]
    assert _shm._ID_BYTES == layout["id_bytes"]
    assert _shm.ATTACH_KEY_KEY == layout["attach_key_key"]
    assert _shm._ATTACH_KEY_BYTES == layout["attach_key_bytes"]
    assert _shm._MAX_SLOT_BYTES == layout["max_slot_bytes"]
    assert _shm._HEADER.format.startswith("<"), "the layout is little-endian"


def test_header_fields_match_the_layout(layout):
    fields = {name: (offset, size) for name, offset, size in layout["fields"]}
    names = ["magic", "slots", "zero", "slot_bytes", "total_bytes", "id"]
    assert [fields[n] for n in names] == header_fields()
    assert (_shm._ATTACH, _shm._ATTACH_KEY_BYTES) == fields["attach"]
    assert (_shm._STATE, 4 * _shm._MAX_SLOTS) == fields["state"]
    # Nothing in the layout that the reader does not account for.
    assert set(fields) == set(names) | {"attach", "state"}


def memfd(name, flags):
    """os.memfd_create with MFD_NOEXEC_SEAL where the kernel knows it (vm.memfd_noexec=2 refuses
    memfds without it), without where it does not (EINVAL)."""
    try:
        return os.memfd_create(name, flags | getattr(os, "MFD_NOEXEC_SEAL", 0x0008))
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return os.memfd_create(name, flags)


class Token:
    def __init__(self):
        self.attached = False
        self.released = 0

    def release(self):
        self.released += 1


@pytest.mark.skipif(not _shm.supported(), reason="shared memory is only used on x86-64")
def test_reads_a_segment_the_cpp_side_wrote(writer, layout):
    proc = subprocess.Popen([writer, "write", "3", "5000", "0", "2"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        created = json.loads(proc.stdout.readline())
        with pytest.raises(SluiceError) as error:  # more slots than the writer made
            _shm.Segment(created["name"], created["attach_key"], 4, 5000)
        assert error.value.code == grpc.StatusCode.DATA_LOSS
        assert "header field slots is 3" in str(error.value)
        with pytest.raises(SluiceError) as error:  # smaller slots than the writer's
            _shm.Segment(created["name"], created["attach_key"], 3, 4096)
        assert "is %d bytes, not between one page" % created["total_bytes"] in str(error.value)
        segment = _shm.Segment(created["name"], created["attach_key"], 3, 5000)
        assert (segment.slots, segment.slot_bytes) == (created["slots"], created["slot_bytes"])
        assert segment.slot_bytes % layout["header_bytes"] == 0
        length = created["slot_bytes"]
        for slot in (0, 2):
            token = Token()
            images = segment.view(slot, (length,), token)
            assert token.attached
            expected = bytes((slot * 31 + i) % 251 for i in range(length))
            assert images.tobytes() == expected
            if slot == 0:
                del images
                gc.collect()
                assert token.released == 1
            else:
                kept = images  # slot 2 stays held: its state must still read full
        with pytest.raises(SluiceError) as error:
            segment.view(1, (16,), Token())  # never filled
        assert error.value.code == grpc.StatusCode.DATA_LOSS
        # The same segment named with another id: what a late client finds in a descriptor the
        # server reused for a later segment.
        other_id = created["name"][:-1] + ("0" if created["name"][-1] != "0" else "1")
        with pytest.raises(SluiceError) as error:
            _shm.Segment(other_id, created["attach_key"], 3, 5000)
        assert error.value.code == grpc.StatusCode.DATA_LOSS
        assert "another id" in str(error.value)
        # Closed with a batch still held: the key stays until that batch is released too.
        segment.close()
        out, _ = proc.communicate("done\n", timeout=60)
        left = json.loads(out)
        assert left["attached"] is True
        assert left["state"] == [layout["slot_free"], layout["slot_free"], layout["slot_full"]]
        del kept
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not _shm.supported(), reason="shared memory is only used on x86-64")
def test_refuses_a_segment_not_sealed_against_resizing(writer, layout):
    """A memfd with a well-formed header but no seals: whoever holds it could truncate it under
    this process's mapping (SIGBUS), so it is never mapped."""
    fd = memfd(layout["memfd_name"], os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        total = 2 * _shm._PAGE
        os.ftruncate(fd, total)
        segment_id = bytes(range(_shm._ID_BYTES))
        os.pwrite(fd, _shm._HEADER.pack(_shm._MAGIC, 1, 0, _shm._PAGE, total, segment_id), 0)
        name = "/proc/%d/fd/%d#%s" % (os.getpid(), fd, segment_id.hex())
        with pytest.raises(SluiceError) as error:
            _shm.Segment(name, "0" * 32, 1, _shm._PAGE)
        assert error.value.code == grpc.StatusCode.DATA_LOSS
        assert "sealed" in str(error.value)
    finally:
        os.close(fd)


def test_refuses_names_that_are_not_segment_names():
    for name in ("/dev/shm/sluice-1-2-3", "/proc/self/fd/3#" + "0" * 32,
                 "/proc/1/fd/03#" + "0" * 32, "/proc/1/fd/3#" + "0" * 31,
                 "/proc/1/fd/3#" + "A" * 32, "/proc/1/fd/3/../4#" + "0" * 32):
        with pytest.raises(SluiceError) as error:
            _shm.Segment(name, "0" * 32, 2)
        assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT, name
    with pytest.raises(SluiceError) as error:
        _shm.Segment("/proc/1/fd/3#" + "0" * 32, "not a key", 2)
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT

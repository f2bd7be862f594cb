"""Same-host shared-memory batches (opt-in): the client side of client/wire/shared_segment.h.

A server on this host that agrees names a sealed memfd segment ("/proc/<pid>/fd/<fd>#<id>") in
the call's initial metadata and then sends each batch's images as a slot of it
(Batch.shared_memory) instead of in the message. The segment is only mapped once it is known to
be sealed against resizing (so the server can never make this process fault on it) and its
header carries the id it was named with (a descriptor the server has since reused is refused). The images array is a read-only numpy view of that slot, in place; the slot goes
back to the server when the last reference to the array (or to any view or tensor made from it)
is gone. The segment's layout is described in client/wire/shared_segment_layout.h; the constants
below are this package's copy of it (it must install from client/python alone), checked against
that description and a segment the C++ code wrote by tests/python/test_shm_layout.py. State 1 =
full (ours to read), 0 = free (the server may refill it).

The state words are read and written with plain aligned 4-byte loads and stores; on x86-64 (whose
memory order keeps loads after loads and stores after loads) that is what the C++ side's
acquire/release amounts to, so shared memory is only used there.
"""
import ctypes
import fcntl
import mmap
import os
import platform
import re
import stat
import struct
import threading
import weakref

import grpc
import numpy as np

from sluice._errors import SluiceError

_HEADER = struct.Struct("<8sIIQQ16s")  # magic, slots, zero, slot_bytes, total_bytes, id
_MAGIC = b"SLSHM002"
_PAGE = 4096
_MAX_SLOTS = 64
_ID_BYTES = 16
_ATTACHED = 48  # byte offset of the attached word
_STATE = 52     # byte offset of state[0]
_SLOT_FREE = 0  # a state word's values
_SLOT_FULL = 1
SEGMENT_KEY = "sluice-shm-segment"
_MEMFD_NAME = "sluice-segment"
_REQUIRED_SEALS = 0x0002 | 0x0004 | 0x0001  # F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
_NAME = re.compile(r"/proc/([1-9][0-9]*)/fd/(0|[1-9][0-9]*)#([0-9a-f]{%d})\Z" % (2 * _ID_BYTES))


def supported():
    """Whether this machine's memory order makes the plain loads and stores safe (x86-64)."""
    return platform.machine() in ("x86_64", "AMD64")


def is_local(target):
    """A target on this host: a unix: socket or a loopback address (IsSameHostTarget's rule, client/wire/shared_segment.h)."""
    return target.startswith(("unix:", "unix-abstract:", "127.", "localhost:", "ipv4:127.",
                              "[::1]:", "ipv6:[::1]:"))


class Segment:
    """A mapped segment a server named. Raises OSError when it cannot be opened, SluiceError
    (DATA_LOSS / INVALID_ARGUMENT) when it is not a sound, sealed one of this user's."""

    def __init__(self, name):
        match = _NAME.match(name)
        if not match:
            raise SluiceError(grpc.StatusCode.INVALID_ARGUMENT,
                              "%r is not a sluice shared segment name" % name)
        self.name = name
        # The path built from the numbers, never taken as given; what it links to checked before
        # it is opened (a descriptor the server reused for a file or socket is not opened).
        path = "/proc/%d/fd/%d" % (int(match.group(1)), int(match.group(2)))
        expected_id = bytes.fromhex(match.group(3))
        if not os.readlink(path).startswith("/memfd:%s " % _MEMFD_NAME):
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s is not a sluice segment" % name)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if seals & _REQUIRED_SEALS != _REQUIRED_SEALS:
                raise SluiceError(grpc.StatusCode.DATA_LOSS,
                                  "shared segment %s is not a memfd sealed against resizing"
                                  % name)
            st = os.fstat(fd)
            total = st.st_size
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or total < _PAGE:
                raise SluiceError(grpc.StatusCode.DATA_LOSS,
                                  "shared segment %s is %d bytes, or not this user's"
                                  % (name, total))
            self._map = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        magic, slots, _, slot_bytes, header_total, segment_id = _HEADER.unpack_from(self._map, 0)
        valid = (magic == _MAGIC and 1 <= slots <= _MAX_SLOTS and slot_bytes > 0
                 and slot_bytes % _PAGE == 0 and header_total == total
                 and slot_bytes <= (total - _PAGE) // slots)
        if not valid or segment_id != expected_id:
            self._map.close()
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s %s" % (name, "has another id: a later segment in "
                                                        "a reused descriptor" if valid
                                                        else "has a malformed header"))
        self.slots, self.slot_bytes = slots, slot_bytes  # read once: what is checked is used
        self._words = memoryview(self._map)[_ATTACHED:_STATE + 4 * _MAX_SLOTS].cast("I")
        self._words[0] = 1  # attached

    def view(self, slot, shape, token):
        """The images of a full `slot` as a read-only uint8 array of `shape`, in place. The slot is
        freed, and token.release() called, when nothing references the array any more; sets
        token.attached."""
        length = int(np.prod(shape))
        if not 0 <= slot < self.slots or length > self.slot_bytes:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s: slot %d of %d bytes is outside its %d slots "
                              "of %d bytes" % (self.name, slot, length, self.slots,
                                               self.slot_bytes))
        state = (_STATE - _ATTACHED) // 4 + slot  # index of the slot's word in _words
        if self._words[state] != _SLOT_FULL:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s: slot %d was named in a batch but is not full"
                              % (self.name, slot))
        # A ctypes array of its own per batch: numpy views of it keep it (not the whole mapping)
        # as their base, so its finalizer runs only when the last of them is gone.
        owner = (ctypes.c_uint8 * length).from_buffer(self._map, _PAGE + slot * self.slot_bytes)
        weakref.finalize(owner, _free, self._words, state, token)
        token.attached = True
        images = np.frombuffer(owner, dtype=np.uint8).reshape(shape)
        images.flags.writeable = False
        return images


def _free(words, index, token):
    words[index] = _SLOT_FREE
    token.release()


class HeldCount:
    """Shared-memory batches handed to the consumer and not yet released (thread-safe)."""

    def __init__(self):
        self._lock = threading.RLock()
        self.value = 0

    def add(self, delta):
        with self._lock:
            self.value += delta

"""Same-host shared-memory batches (opt-in): the client side of client/wire/shared_segment.h.

A server on this host that agrees names a POSIX shared-memory segment in the call's initial
metadata and then sends each batch's images as a slot of it (Batch.shared_memory) instead of in
the message. The images array is a read-only numpy view of that slot, in place; the slot goes
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
import mmap
import os
import platform
import stat
import struct
import threading
import weakref

import grpc
import numpy as np

from sluice._errors import SluiceError

_HEADER = struct.Struct("<8sIIQQ")
_MAGIC = b"SLSHM001"
_PAGE = 4096
_MAX_SLOTS = 64
_ATTACHED = 32  # byte offset of the attached word
_STATE = 36     # byte offset of state[0]
_SLOT_FREE = 0  # a state word's values
_SLOT_FULL = 1
_PREFIX = "/sluice-"
SEGMENT_KEY = "sluice-shm-segment"


def supported():
    """Whether this machine's memory order makes the plain loads and stores safe (x86-64)."""
    return platform.machine() in ("x86_64", "AMD64")


def is_local(target):
    """A target on this host: a unix: socket or a loopback address (IsSameHostTarget's rule, client/wire/shared_segment.h)."""
    return target.startswith(("unix:", "unix-abstract:", "127.", "localhost:", "ipv4:127.",
                              "[::1]:", "ipv6:[::1]:"))


class Segment:
    """A mapped segment a server named. Raises OSError when it cannot be opened, SluiceError
    (DATA_LOSS / FAILED_PRECONDITION) when it is not a sound one of this user's."""

    def __init__(self, name):
        if not name.startswith(_PREFIX) or "/" in name[1:]:
            raise SluiceError(grpc.StatusCode.INVALID_ARGUMENT,
                              "%r is not a sluice shared segment name" % name)
        self.name = name
        fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
                raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                                  "shared segment %s is not this user's alone" % name)
            total = st.st_size
            if total < _PAGE:
                raise SluiceError(grpc.StatusCode.DATA_LOSS,
                                  "shared segment %s is %d bytes" % (name, total))
            self._map = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        magic, slots, _, slot_bytes, header_total = _HEADER.unpack_from(self._map, 0)
        if (magic != _MAGIC or not 1 <= slots <= _MAX_SLOTS or slot_bytes <= 0
                or slot_bytes % _PAGE or header_total != total
                or slot_bytes > (total - _PAGE) // slots):
            self._map.close()
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s has a malformed header" % name)
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

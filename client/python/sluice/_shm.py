"""Same-host shared-memory batches (Client.stream's default from a server on this host): the
client side of client/wire/shared_segment.h.

A server on this host that agrees names a sealed memfd segment ("/proc/<pid>/fd/<fd>#<id>") and
an attach key in the call's initial metadata; once this client has written that key into the
segment, the server sends each batch's images as a slot of it (Batch.shared_memory) instead of in
the message. The segment is only mapped once it is known to be a memfd on tmpfs sealed against
resizing (so the server can never make this process fault on it), no larger than the slots asked
for need, and its header carries the id it was named with (a descriptor the server has since
reused is refused). The images array is a read-only numpy view of that slot, in place; the slot
goes back to the server when the last reference to the array (or to any view or tensor made from
it) is gone. The segment's layout is described in client/wire/shared_segment_layout.h; the constants
below are this package's copy of it (it must install from client/python alone), checked against
that description and a segment the C++ code wrote by tests/python/test_shm_layout.py. State 1 =
full (ours to read), 0 = free (the server may refill it).

The state words are read and written with plain aligned 4-byte loads and stores; on x86-64 (whose
memory order keeps loads after loads and stores after loads) that is what the C++ side's
acquire/release amounts to, so shared memory is only used there.
"""
import ctypes
import fcntl
import math
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
_MAGIC = b"SLSHM003"
_PAGE = 4096
_MAX_SLOTS = 64
_ID_BYTES = 16
_ATTACH = 48             # byte offset of the attach field
_ATTACH_KEY_BYTES = 16   # its size: the attach key's
_STATE = 64              # byte offset of state[0]
_SLOT_FREE = 0  # a state word's values
_SLOT_FULL = 1
SEGMENT_KEY = "sluice-shm-segment"
ATTACH_KEY_KEY = "sluice-shm-attach"
_MAX_SLOT_BYTES = 1 << 30  # a slot's bound when the request leaves the batch size to the server
_MEMFD_NAME = "sluice-segment"
_REQUIRED_SEALS = 0x0002 | 0x0004 | 0x0001  # F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
_TMPFS_MAGIC = 0x01021994
_NAME = re.compile(r"/proc/([1-9][0-9]*)/fd/(0|[1-9][0-9]*)#([0-9a-f]{%d})\Z" % (2 * _ID_BYTES))
_KEY = re.compile(r"[0-9a-f]{%d}\Z" % (2 * _ATTACH_KEY_BYTES))


def supported():
    """Whether this machine's memory order makes the plain loads and stores safe (x86-64)."""
    return platform.machine() in ("x86_64", "AMD64")


def is_local(target):
    """A target on this host: a unix: socket or a loopback address (IsSameHostTarget's rule,
    client/wire/shared_segment.h)."""
    return target.startswith(("unix:", "unix-abstract:", "127.", "localhost:", "ipv4:127.",
                              "[::1]:", "ipv6:[::1]:"))


def max_slot_bytes(batch_size, image_height, image_width):
    """The most bytes a slot needs for a request (SharedSegment::MaxSlotBytesFor): room for the
    largest dtype, float32, which the request's transform set may choose."""
    image_width = image_width or image_height
    if batch_size <= 0 or image_height <= 0 or image_width <= 0:
        return _MAX_SLOT_BYTES
    return min(3 * 4 * batch_size * image_height * image_width, _MAX_SLOT_BYTES)


def _round_up(n):
    return (n + _PAGE - 1) // _PAGE * _PAGE


def _fs_type(fd):
    """The file system type (statfs f_type) of fd, or None where libc's fstatfs is not at hand.
    struct statfs starts with f_type, a long, on x86-64 Linux (the only place this runs)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes there
        if libc.fstatfs(fd, buf) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return struct.unpack_from("<q", buf)[0]


class Segment:
    """A mapped segment a server named. Raises OSError when it cannot be opened, SluiceError
    (DATA_LOSS / INVALID_ARGUMENT, naming the check) when it is not a sound, sealed one of this
    user's of the `slots` slots of at most max_slot_bytes asked for. Writes attach_key into it;
    close() once the call is over: the key is cleared (the server may then free the pages) when
    the last batch of it is released as well."""

    def __init__(self, name, attach_key, slots, max_slot_bytes=_MAX_SLOT_BYTES):
        match = _NAME.match(name)
        if not match:
            raise SluiceError(grpc.StatusCode.INVALID_ARGUMENT,
                              "%r is not a sluice shared segment name" % name)
        if not _KEY.match(attach_key):
            raise SluiceError(grpc.StatusCode.INVALID_ARGUMENT,
                              "shared segment %s: the attach key is not %d lowercase hex digits"
                              % (name, 2 * _ATTACH_KEY_BYTES))
        self.name = name
        what = "shared segment %s" % name
        # The path built from the numbers, never taken as given; resolved once (O_PATH), what
        # that links to checked, and the same file reopened through this process's descriptor
        # (a descriptor the server reuses meanwhile for a file or socket is never opened).
        path = "/proc/%d/fd/%d" % (int(match.group(1)), int(match.group(2)))
        expected_id = bytes.fromhex(match.group(3))
        link_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            own = "/proc/self/fd/%d" % link_fd
            if not os.readlink(own).startswith("/memfd:%s " % _MEMFD_NAME):
                raise SluiceError(grpc.StatusCode.DATA_LOSS, what + " is not a sluice segment")
            fd = os.open(own, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
        finally:
            os.close(link_fd)
        try:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if seals & _REQUIRED_SEALS != _REQUIRED_SEALS:
                raise SluiceError(grpc.StatusCode.DATA_LOSS,
                                  what + " is not a memfd sealed against resizing")
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SluiceError(grpc.StatusCode.DATA_LOSS, what + " is not a regular file")
            if st.st_uid != os.geteuid():
                raise SluiceError(grpc.StatusCode.DATA_LOSS, "%s belongs to uid %d, not this "
                                  "user's %d" % (what, st.st_uid, os.geteuid()))
            # tmpfs pages only (a hugetlbfs memfd: huge pages, faults when its pool runs dry).
            # Python has no f_type: libc's fstatfs through ctypes, else the block size, a page
            # on tmpfs and a huge page on hugetlbfs.
            fs_type = _fs_type(fd)
            if (fs_type is not None and fs_type != _TMPFS_MAGIC) or st.st_blksize != _PAGE:
                raise SluiceError(grpc.StatusCode.DATA_LOSS, "%s is not on tmpfs (file system "
                                  "type %s, block size %d)" % (what, hex(fs_type or 0),
                                                               st.st_blksize))
            total = st.st_size
            most = _PAGE + slots * _round_up(max_slot_bytes)
            if not _PAGE <= total <= most:
                raise SluiceError(grpc.StatusCode.DATA_LOSS,
                                  "%s is %d bytes, not between one page and the %d that %d slots "
                                  "of at most %d bytes need" % (what, total, most, slots,
                                                                max_slot_bytes))
            self._map = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        # Read once: what is checked is what is used.
        magic, got_slots, zero, slot_bytes, header_total, segment_id = \
            _HEADER.unpack_from(self._map, 0)
        bad = None
        if magic != _MAGIC:
            bad = "magic is not %s" % _MAGIC.decode()
        elif got_slots != slots:
            bad = "slots is %d, not the %d asked for" % (got_slots, slots)
        elif zero != 0:
            bad = "zero is %d" % zero
        elif (slot_bytes == 0 or slot_bytes % _PAGE != 0
              or slot_bytes > _round_up(max_slot_bytes)):
            bad = "slot_bytes is %d, not a multiple of %d between %d and %d" % (
                slot_bytes, _PAGE, _PAGE, _round_up(max_slot_bytes))
        elif header_total != total or header_total != _PAGE + slots * slot_bytes:
            bad = ("total_bytes is %d, but the file is %d bytes and a header and %d slots of %d "
                   "bytes are %d" % (header_total, total, slots, slot_bytes,
                                     _PAGE + slots * slot_bytes))
        if bad is not None or segment_id != expected_id:
            self._map.close()
            raise SluiceError(grpc.StatusCode.DATA_LOSS, what + (
                ": header field " + bad if bad is not None
                else " has another id: a later segment in a reused descriptor"))
        self.slots, self.slot_bytes = slots, slot_bytes
        self._words = memoryview(self._map)[_STATE:_STATE + 4 * _MAX_SLOTS].cast("I")
        self._lock = threading.Lock()
        self._held = 0         # views handed out and not yet released; guarded by _lock
        self._closed = False   # guarded by _lock
        self._map[_ATTACH:_ATTACH + _ATTACH_KEY_BYTES] = bytes.fromhex(attach_key)

    def close(self):
        """The call is over: no more views. The attach key is cleared once none is held."""
        with self._lock:
            self._closed = True
            if self._held:
                return
        self._detach()

    def _detach(self):
        self._map[_ATTACH:_ATTACH + _ATTACH_KEY_BYTES] = bytes(_ATTACH_KEY_BYTES)

    def _release(self, slot, token):
        self._words[slot] = _SLOT_FREE
        with self._lock:
            self._held -= 1
            last = self._closed and not self._held
        if last:
            self._detach()
        token.release()

    def view(self, slot, shape, token, dtype=np.uint8):
        """The images of a full `slot` as a read-only array of `shape` and `dtype`, in place. The
        slot is freed, and token.release() called, when nothing references the array any more;
        sets token.attached."""
        dtype = np.dtype(dtype)
        length = math.prod(shape) * dtype.itemsize  # Python ints: np.prod wraps at 2**63
        if not 0 <= slot < self.slots or length > self.slot_bytes:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s: slot %d of %d bytes is outside its %d slots "
                              "of %d bytes" % (self.name, slot, length, self.slots,
                                               self.slot_bytes))
        if self._words[slot] != _SLOT_FULL:
            raise SluiceError(grpc.StatusCode.DATA_LOSS,
                              "shared segment %s: slot %d was named in a batch but is not full"
                              % (self.name, slot))
        # A ctypes array of its own per batch: numpy views of it keep it (not the whole mapping)
        # as their base, so its finalizer runs only when the last of them is gone.
        owner = (ctypes.c_uint8 * length).from_buffer(self._map, _PAGE + slot * self.slot_bytes)
        with self._lock:
            self._held += 1
        weakref.finalize(owner, self._release, slot, token)
        token.attached = True
        images = np.frombuffer(owner, dtype=dtype).reshape(shape)
        images.flags.writeable = False
        return images


class HeldCount:
    """Shared-memory batches handed to the consumer and not yet released (thread-safe)."""

    def __init__(self):
        # Reentrant: a release may come from a finalizer run by the garbage collector on a thread
        # that is inside wait_below().
        self._changed = threading.Condition(threading.RLock())
        self.value = 0

    def add(self, delta):
        with self._changed:
            self.value += delta
            self._changed.notify_all()

    def wait_below(self, limit):
        """Blocks until fewer than `limit` are held (another thread must release one)."""
        with self._changed:
            self._changed.wait_for(lambda: self.value < limit)

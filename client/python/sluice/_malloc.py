"""tune_malloc(): keep freed memory in the process, so that batches land in pages already mapped."""
import ctypes
import ctypes.util

# glibc's mallopt() parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def tune_malloc(trim_threshold=1 << 30):
    """Makes glibc's malloc reuse the memory of freed batches instead of returning it to the OS.

    gRPC Python assembles each received message in fresh memory: with glibc's defaults, a batch
    over 32 MB gets its own mmap() and the pieces it is copied from are trimmed off the heap when
    freed, so every batch pays a page fault per 4 KB of it (about half the client's CPU time at
    224x224x256; measured in tests/bench/python_client.sh). After this call, allocations are
    served from the heap and up to `trim_threshold` bytes of free memory stay with the process,
    as the C++ client's reused buffers do.

    Process-wide: the process's resident memory no longer shrinks after a peak of large
    allocations (every large allocation is affected, not only Sluice's). Call it once, early, in
    each process that streams (DataLoader workers: SluiceDataset(tune_malloc=True)).
    Returns True when applied, False where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    trim_threshold = min(int(trim_threshold), 2**31 - 1)
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))

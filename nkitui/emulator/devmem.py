"""Device memory that only the emulator's instructions can write, enforced by the OS (issue #14).

In the untrusted kernel process (`enable()`, called by the kernel server before any task code runs)
every storage of the emulated device — HBM tensors, SBUF and PSUM tiles, the inputs' copies, the
cores' address spaces, the fp32 caches of narrow storages — lives in page-aligned anonymous shared
memory that is kept PROT_READ. The one write path (`Tensor.write`, and the few allocation-time fills)
opens the pages of the storage it writes (`unprotect`), writes, and closes them (`protect`). Any
other write into device memory — numpy through `tensor.storage.data`, an array forged over the
address with `__array_interface__`, a write through the mmap object — faults: the kernel process dies
with SIGSEGV, which the evaluator reports as a crash at the kernel's line, never a pass. Hiding names
cannot give that guarantee (every object in a process can be reached by attribute walks); page
protection can.

What it cannot stop (docs/executor.md, "Device memory"): task code that calls the emulator's own
write path or `mprotect` itself — both need nkitui's internals or ctypes, which the static integrity
rule and the introspection guard flag — and a thread racing an instruction's write while the pages
are open (the write path refuses to open pages while a thread started by task code is alive).
MAP_SHARED memory also keeps `madvise` from changing its bytes (MADV_DONTNEED re-reads the shared
pages, MADV_REMOVE needs a writable mapping) and `mremap`/`close` of the mmap object are refused
while arrays export it.

Outside the kernel process (library use, tests) nothing changes: storages are plain numpy arrays.
"""

from __future__ import annotations

import _thread
import mmap
import sys
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from nkitui.emulator import state

PAGE = mmap.PAGESIZE
# an object's identity as a number, like id() but without id()'s audit event: in the kernel's process
# every audit event runs two Python hooks (object.__hash__ is the pointer, rotated: unique while alive)
key_of = object.__hash__
_PROT_READ = mmap.PROT_READ
_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE

_on = False
_mprotect: Any = None
_threads = 0  # Python threads alive when protection was enabled (the write path refuses more)

# A mapping's region: (address, length, then the same two as the ctypes objects mprotect is called with,
# made once per mapping: see enable()). A new mapping at a reused address gets a region of its own.
Region = tuple[int, int, Any, Any]
# owner array (np.frombuffer over one mmap; every array nkitui hands out is a view of one) id ->
# (weak reference, or None for the pool's owners, which live as long as the process; its region)
_owners: dict[int, tuple[weakref.ref[np.ndarray] | None, Region]] = {}
# pages -> the pool's mappings of that size: (owner, address). One is free again when its arrays all
# died, i.e. only the pool refers to its owner; its pages stay PROT_READ throughout (no stale pointer
# can prepare the bytes of the next tile). Fresh tiles come from here without a system call.
_pool: dict[int, deque[tuple[np.ndarray, int]]] = {}
_pool_bytes = 0
_POOL_BYTES = 256 << 20
_POOL_MAX_PAGES = 1024  # mappings larger than 4 MiB are not pooled
_FREE_REFS = 3  # sys.getrefcount of a free owner: the pool's tuple, the loop's variable, the call's argument
_opened: dict[int, int] = {}  # address -> writes in progress (the emulator's core threads may overlap)


class DeviceMemoryError(RuntimeError):
    """The device memory's protection could not be set up or changed."""


class ForeignMemoryError(RuntimeError):
    """An instruction met cells that are not the device's memory (replaced from the host)."""


def enabled() -> bool:
    return _on


def enable() -> None:
    """Turn protection on for this process (irreversible). Call before task code runs."""
    global _on, _mprotect, _threads
    if _on:
        return
    import ctypes

    # PyDLL: the call keeps the GIL, so opening or closing a mapping and its count are one step for
    # the emulator's own threads (the cores of kernel[2] write shared HBM)
    libc = ctypes.PyDLL(None, use_errno=True)
    fn = libc.mprotect
    # no argtypes: each mapping's address and length are passed as ctypes objects made once (its
    # Region), which ctypes hands over as they are; converting three arguments through argtypes on
    # every call cost about as much as the system call (two calls per instruction's write)
    fn.restype = ctypes.c_int
    _mprotect = fn
    _threads = _thread._count()
    _on = True


def own_threads_now() -> None:
    """The Python threads alive now are nkitui's (e.g. the helper that starts the emulator's threads
    once task code may not: nkitui.executor.confine.threads); called before task code runs."""
    global _threads
    _threads = _thread._count()


def foreign_functions() -> frozenset[int]:
    """Addresses of the C functions the write path calls (for the introspection guard's fast path)."""
    if _mprotect is None:
        return frozenset()
    import ctypes

    return frozenset({ctypes.cast(_mprotect, ctypes.c_void_p).value or 0})


def _failed() -> None:
    import ctypes
    import os

    err = ctypes.get_errno()
    raise DeviceMemoryError(f"mprotect of the emulated device memory failed: {os.strerror(err)}")


def _new_mapping(pages: int) -> tuple[np.ndarray, Region]:
    import ctypes

    try:
        mm = mmap.mmap(-1, pages * PAGE)  # MAP_SHARED | MAP_ANONYMOUS, zero-filled
    except OSError as e:  # ENOMEM under the address-space limit
        raise MemoryError(str(e)) from None
    owner = np.frombuffer(mm, dtype=np.uint8)
    addr: int = owner.__array_interface__["data"][0]
    size = pages * PAGE
    region: Region = (addr, size, ctypes.c_void_p(addr), ctypes.c_size_t(size))
    if _mprotect(region[2], region[3], _PROT_READ) != 0:
        _failed()
    return owner, region


def _pooled(pages: int) -> np.ndarray | None:
    """A mapping of `pages` from the pool whose arrays all died (only the pool refers to its owner),
    else a new one kept in the pool; None when the pool is full (the caller maps one of its own)."""
    global _pool_bytes
    q = _pool.get(pages)
    if q is None:
        q = _pool[pages] = deque()
    n = len(q)
    for _ in range(4 if n > 4 else n):  # the oldest first: tiles die in about the order they were made
        owner = q[0][0]
        q.rotate(-1)  # in use again (or still): to the back
        if _refcount(owner) <= _FREE_REFS:
            return owner
    size = pages * PAGE
    if pages > _POOL_MAX_PAGES or _pool_bytes + size > _POOL_BYTES:
        return None
    owner, region = _new_mapping(pages)
    q.append((owner, region[0]))
    _pool_bytes += size
    _owners[key_of(owner)] = (None, region)  # pooled owners live as long as the process
    return owner


_refcount = sys.getrefcount


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An array in protected device memory (contents undefined, like np.empty)."""
    dtype = np.dtype(dtype)
    count = 1
    for s in shape:
        count *= int(s)
    nbytes = count * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype=dtype)
    pages = -(-nbytes // PAGE)
    owner = _pooled(pages)
    if owner is None:  # large, or the pool is full: a mapping of its own, unmapped when its arrays die
        owner, region = _new_mapping(pages)
        key = key_of(owner)
        ref = weakref.ref(owner, _forget(key))
        _owners[key] = (ref, region)
    # one array over the owner's first bytes (its base is the owner, as region() needs): a third of the
    # cost of slice + view + reshape, once per tile
    out: np.ndarray = np.ndarray(shape, dtype, owner)
    return out


def _forget(key: int) -> Callable[[weakref.ref[np.ndarray]], None]:
    """The callback that drops an owner's entry (with its region) when the owner dies."""
    def drop(_r: weakref.ref[np.ndarray]) -> None:
        _owners.pop(key, None)
    return drop


def copy_of(values: np.ndarray, dtype: Any = None) -> np.ndarray:
    """`values` (cast to `dtype`) copied into protected device memory."""
    out = empty(values.shape, values.dtype if dtype is None else dtype)
    if out.size:
        with writing(out):
            np.copyto(out, values, casting="unsafe")
    return out


def region(arr: np.ndarray) -> Region | None:
    """The region (address, length, ...) of the protected mapping holding `arr`, None if it is not
    device memory."""
    base = arr.base
    ent = _owners.get(key_of(arr) if base is None else key_of(base))
    return None if ent is None else ent[1]


def owns(arr: object) -> bool:
    """Is `arr` a view of a protected mapping (an array nkitui allocated, or a view of one)? One
    dictionary look-up: an owner's entry leaves with it (its weak reference's callback), so a live
    entry under an object's id is that object. Empty arrays hold no memory and pass."""
    if type(arr) is not np.ndarray:  # a subclass or a look-alike could answer reads with anything
        return False
    base = arr.base
    return (key_of(arr) if base is None else key_of(base)) in _owners or arr.size == 0


def is_device(arr: object) -> bool:
    """Is `arr` a view of protected device memory (and nothing else)?"""
    if not isinstance(arr, np.ndarray):
        return False
    r = region(arr)
    if r is None:
        return False
    lo: int = arr.__array_interface__["data"][0]
    if arr.size == 0:
        return True
    span: int = sum((n - 1) * abs(s) for n, s in zip(arr.shape, arr.strides)) + arr.itemsize
    neg: int = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides) if s < 0)
    return r[0] <= lo + neg and lo + neg + span <= r[0] + r[1]


def _foreign_threads() -> bool:
    """Is a Python thread alive that neither nkitui's worker nor the emulator started?"""
    n = _thread._count()
    if n <= _threads:
        return False
    if state.thread_starter is not None:
        # the process refuses threads to task code (nkitui.executor.confine.threads: seccomp on the
        # task's thread, and Python's start functions), and starts the emulator's through its helper
        return False
    emulated = state.threads
    # alive until after _thread's count dropped; one appended but not started yet (no ident) stays
    emulated[:] = [t for t in emulated if t.ident is None or t.is_alive()]
    return n > _threads + len(emulated)


# unprotect and protect run twice per instruction write: the thread check's common case and the
# system call are inlined (no further Python call on the way to mprotect)
_count_threads = _thread._count


def unprotect(r: Region | None) -> None:
    """Open a mapping for an instruction's write (refused while a thread of task code is alive)."""
    if r is None:
        return
    if _count_threads() > _threads and _foreign_threads():
        raise DeviceMemoryError("a thread started by the kernel's code is running: the emulated device memory is "
                                "not opened for writes while one is (it could write behind the instruction); a "
                                "kernel needs no threads")
    addr = r[0]
    n = _opened.get(addr, 0)
    if n == 0 and _mprotect(r[2], r[3], _PROT_RW) != 0:
        _failed()
    _opened[addr] = n + 1


def protect(r: Region | None) -> None:
    if r is None:
        return
    addr = r[0]
    n = _opened.pop(addr, 1) - 1
    if n > 0:  # another write to this mapping is still in progress (the emulator's core threads)
        _opened[addr] = n
    elif _mprotect(r[2], r[3], _PROT_READ) != 0:
        _failed()


class writing:
    """`with devmem.writing(arr): arr[...] = values` for the emulator's allocation-time fills."""

    __slots__ = ("r",)

    def __init__(self, arr: np.ndarray | None) -> None:
        self.r = region(arr) if _on and arr is not None else None

    def __enter__(self) -> None:
        unprotect(self.r)

    def __exit__(self, *exc: object) -> None:
        protect(self.r)

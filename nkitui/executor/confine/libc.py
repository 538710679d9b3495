"""The few libc entry points confinement needs, through ctypes (no extra system library)."""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_SET_MM = 35
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_PTRACER = 0x59616D61

_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        lib.prctl.restype = ctypes.c_int
        lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _libc = lib
    return _libc


class LibcError(OSError):
    pass


def check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LibcError(err, f"{what}: {os.strerror(err)}")
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return check(libc().prctl(option, arg2, arg3, arg4, arg5), f"prctl({option})")


def syscall(number: int, *args: object) -> int:
    """A raw system call; integer arguments must be wrapped by the caller when they are not C longs."""
    return check(libc().syscall(ctypes.c_long(number), *args), f"syscall {number}")

"""Landlock (Linux 5.13+): which files the process may read and write, which TCP ports it may use,
and (ABI 6) whom it may signal — enforced by the kernel for this process and every thread or
process it starts afterwards.

The ruleset handles every access right the running kernel knows (probed with the ABI version);
rules then grant back: read (and list) on the read-only roots, everything but device creation on
the writable roots. Anything not granted is refused with EACCES, also through relative names,
dir_fd, /proc/<pid>/cwd or links, because Landlock checks the object reached, not the path written.

    ABI 1  file-system rights            ABI 4  TCP bind/connect (no rule: every port refused)
    ABI 2  REFER (links/renames across)  ABI 5  ioctl on device files
    ABI 3  TRUNCATE                      ABI 6  scopes: signals and abstract unix sockets stay inside
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from dataclasses import dataclass

from nkitui.executor.confine import libc, syscalls

CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a rule on a file may hold


def fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class LandlockUnavailable(Exception):
    """Landlock cannot be used here; the message says why in words (for the report)."""


def abi_version() -> int:
    """The Landlock ABI of the running kernel; LandlockUnavailable with the reason otherwise."""
    try:
        lib = libc.libc()
    except OSError as exc:
        raise LandlockUnavailable(f"landlock unavailable: no C library ({exc})") from None
    rc = lib.syscall(ctypes.c_long(syscalls.LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                     ctypes.c_uint32(CREATE_RULESET_VERSION))
    if rc >= 1:
        return int(rc)
    err = ctypes.get_errno()
    release = os.uname().release
    if err == errno.ENOSYS:
        raise LandlockUnavailable(f"landlock unavailable on kernel {release}")
    if err == errno.EOPNOTSUPP:
        raise LandlockUnavailable(f"landlock disabled on kernel {release} (not in the boot's lsm= list)")
    raise LandlockUnavailable(f"landlock unavailable on kernel {release} ({os.strerror(err)})")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class Applied:
    abi: int
    network: bool  # TCP bind/connect refused by Landlock (ABI 4+)
    scoped: bool  # signals and abstract unix sockets stay inside (ABI 6+)
    skipped: tuple[str, ...]  # roots that do not exist here


# Descriptors of /proc paths that rules name, kept open for the process's life: a rule binds an inode,
# and procfs makes a new inode when a /proc/<pid> entry's dentry is evicted and looked up again (memory
# pressure); an open descriptor pins the dentry, so the rule keeps matching.
_pinned: list[int] = []


def apply(*, readable: list[str], writable: list[str], read_files: list[str], rw_files: list[str],
          executable: bool, restrict_network: bool, list_dirs: list[str] | None = None) -> Applied:
    """Restrict this thread (and what it starts later) to the given roots. Call it while the
    process has one thread: Landlock applies to the calling thread and its future children only.
    `list_dirs`: folders that may be listed, nothing beneath them opened through the rule.
    Needs no_new_privs (set by the caller) unless the process holds CAP_SYS_ADMIN."""
    abi = abi_version()
    handled = fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4 and restrict_network:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # no port rule follows: all refused
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    if abi >= 4 and size < 16:
        size = 16
    lib = libc.libc()
    ruleset = lib.syscall(ctypes.c_long(syscalls.LANDLOCK_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                          ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise LandlockUnavailable(f"landlock ruleset refused by kernel {os.uname().release} ({os.strerror(err)})")
    skipped: list[str] = []
    exe = EXECUTE if executable else 0
    read_dir = READ_FILE | READ_DIR | exe
    write_dir = handled & ~(MAKE_CHAR | MAKE_BLOCK | (0 if executable else EXECUTE))
    try:
        grants = ([(p, read_dir) for p in readable] + [(p, write_dir) for p in writable]
                  + [(p, READ_FILE | exe) for p in read_files]
                  + [(p, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) for p in rw_files]
                  + [(p, READ_DIR) for p in list_dirs or ()])
        for path, rights in grants:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                skipped.append(path)
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= FILE_RIGHTS
                rule = _PathBeneathAttr(allowed_access=rights & handled, parent_fd=fd)
                rc = lib.syscall(ctypes.c_long(syscalls.LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                                 ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0))
                if rc < 0:
                    err = ctypes.get_errno()
                    raise LandlockUnavailable(f"landlock rule for {path} refused ({os.strerror(err)})")
            finally:
                if path.startswith("/proc/"):
                    _pinned.append(fd)
                else:
                    os.close(fd)
        rc = lib.syscall(ctypes.c_long(syscalls.LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0))
        if rc < 0:
            err = ctypes.get_errno()
            raise LandlockUnavailable(f"landlock could not restrict the process ({os.strerror(err)})")
    finally:
        os.close(ruleset)
    return Applied(abi=abi, network=abi >= 4 and restrict_network, scoped=abi >= 6, skipped=tuple(skipped))

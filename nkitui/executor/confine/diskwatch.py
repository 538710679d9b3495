"""The disk budget of one run, enforced by the parent while the child runs.

RLIMIT_FSIZE caps one file; a kernel could still fill the disk with many files, many folders, or files
it unlinks while it keeps them open (memfd_create's too). The parent (the RunHandle's waiter thread)
measures the run's scratch folder a few times a second and stops the child's process group when it
holds more than its budget:

    allocated bytes   st_blocks of every file and folder under the scratch folder, each inode once
                      (hard links are not counted twice; a sparse file counts what it really uses),
                      plus every file the child holds open that is no longer in any folder
                      ("(deleted)" in /proc/<pid>/fd: unlinked-while-open files, memfd files)
    entries           files, folders, links (the inodes a kernel could exhaust)
    depth             folders nested deeper than MAX_DEPTH (beyond it a walk by name would fail)

Where Landlock is missing the child can write anywhere the user can, so the scratch folder is not the
whole story: the parent then also watches the free space of every filesystem the child could reach
(the scratch's, HOME's, /tmp, /var/tmp, /dev/shm) and stops the child when that fell by more than
the budget since the child said it was confined (other programs writing at the same time count too:
on such a host the watch errs on the side of stopping).

What is measured is bounded: the walk stops once it has seen more entries than allowed, so a
folder of a million files costs one bounded walk, then the kill.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_DEPTH = 64
POLL_S = 0.2
FREE_SPACE_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass(frozen=True)
class Usage:
    bytes: int  # allocated (st_blocks * 512), each inode once
    entries: int  # directory entries seen (stops counting past the limit)
    deleted_open: int  # bytes held by open files that are in no folder any more
    too_deep: bool = False
    unreadable: bool = False  # a folder the parent cannot list (the child took the rights away)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


NESTED_RUN_PREFIX = "nkitui-run-"  # workspace.make_scratch's prefix: an evaluator's children live in its tmp/


def measure(root: Path, *, max_entries: int, pid: int | None = None, nested_runs: bool = False) -> Usage:
    """What the scratch folder (and the open, unlinked files of `pid`) hold now. `nested_runs`: skip the
    scratch folders of the children an evaluator started (`tmp/nkitui-run-*`: its TMPDIR), which the
    evaluator's own watches measure; never for a process that runs task code, which could hide files
    under such a name."""
    seen: set[tuple[int, int]] = set()
    total = 0
    entries = 0
    too_deep = False
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return Usage(0, 0, _deleted_open(pid, seen))
    stack: list[tuple[int, int, bool]] = [(top, 0, False)]
    try:
        while stack:
            fd, depth, in_tmp = stack.pop()
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        if in_tmp and entry.name.startswith(NESTED_RUN_PREFIX) and entry.is_dir(follow_symlinks=False):
                            continue
                        entries += 1
                        if entries > max_entries:
                            return Usage(total, entries, 0, too_deep)
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        key = (st.st_dev, st.st_ino)
                        if key not in seen:
                            seen.add(key)
                            total += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode):
                            if depth + 1 > MAX_DEPTH:
                                too_deep = True
                                continue
                            try:
                                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                              dir_fd=fd)
                            except PermissionError:  # chmod 0/0o300 by the child: nothing legitimate does that
                                return Usage(total, entries, 0, too_deep, unreadable=True)
                            except OSError:
                                continue
                            stack.append((sub, depth + 1, nested_runs and depth == 0 and entry.name == "tmp"))
            except OSError:
                pass
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return Usage(total, entries, _deleted_open(pid, seen), too_deep)


def _deleted_open(pid: int | None, seen: set[tuple[int, int]]) -> int:
    """Bytes held by regular files `pid` has open that no folder holds any more (unlinked while open,
    memfd files): disk or memory the scratch folder's walk cannot see."""
    if pid is None:
        return 0
    folder = f"/proc/{pid}/fd"
    total = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        try:
            if not os.readlink(f"{folder}/{name}").endswith(" (deleted)"):
                continue
            st = os.stat(f"{folder}/{name}")
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if stat.S_ISREG(st.st_mode) and key not in seen:
            seen.add(key)
            total += st.st_blocks * 512
    return total


def _free_bytes(paths: list[str]) -> dict[int, int]:
    """Free bytes (for an unprivileged user) of each distinct filesystem holding one of `paths`."""
    out: dict[int, int] = {}
    for path in paths:
        try:
            dev = os.stat(path).st_dev
            if dev in out:
                continue
            vfs = os.statvfs(path)
        except OSError:
            continue
        out[dev] = vfs.f_bavail * vfs.f_frsize
    return out


class DiskWatch:
    """The parent's watch over one child's disk use (see the module's docstring)."""

    def __init__(self, root: Path, *, max_bytes: int, max_entries: int, nested_runs: bool = False) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.nested_runs = nested_runs  # an evaluator's watch: its children's folders are watched by it
        start = measure(root, max_entries=1 << 30, nested_runs=nested_runs)
        self.base_bytes = start.bytes  # the task copy and the job file: what nkitui put there
        self.base_entries = start.entries
        self._free_base: dict[int, int] | None = None
        self._free_paths: list[str] = []

    def watch_free_space(self, home: str | None = None) -> None:
        """The child has no Landlock: from now on also watch the free space of the filesystems it
        could write to."""
        paths = [str(self.root), *FREE_SPACE_ROOTS, *([home] if home else [])]
        self._free_paths = paths
        self._free_base = _free_bytes(paths)

    def check(self, pid: int | None) -> str | None:
        """None while within budget; else why the child must be stopped, in words."""
        limit_entries = self.base_entries + self.max_entries
        use = measure(self.root, max_entries=limit_entries, pid=pid, nested_runs=self.nested_runs)
        budget = _mib(self.max_bytes)
        if use.entries > limit_entries:
            return (f"it created more than {self.max_entries:,} files and folders in its scratch folder "
                    f"(the limit of entries a run may make)")
        if use.unreadable:
            return "it made a folder of its scratch folder unreadable (where a walk cannot see what it holds)"
        if use.too_deep:
            return f"it nested folders more than {MAX_DEPTH} deep in its scratch folder"
        written = use.bytes - self.base_bytes + use.deleted_open
        if written > self.max_bytes:
            held = f", {_mib(use.deleted_open)} of it in files deleted while open" if use.deleted_open else ""
            return (f"it wrote more than {budget} to its scratch folder ({_mib(written)} in "
                    f"{use.entries - self.base_entries:,} new entries{held}; the run's disk budget is {budget})")
        if self._free_base is not None:
            now = _free_bytes(self._free_paths)
            for dev, before in self._free_base.items():
                fell = before - now.get(dev, before)
                if fell > self.max_bytes:
                    return (f"the free space of a filesystem it could write to fell by {_mib(fell)}, more than the "
                            f"run's disk budget of {budget} (Landlock is unavailable here, so its writes are not "
                            "confined to its scratch folder)")
        return None

"""Resource limits of one run, applied in the worker before any task code is imported.

    wall-clock timeout   enforced by the parent (SIGTERM to the process group, then SIGKILL)
    memory               RLIMIT_AS: address space of the worker; allocations beyond it fail
                         (numpy raises MemoryError, which the worker reports as "memory-limit")
    CPU time             RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL 5 s later (the hard limit)
    output files         RLIMIT_FSIZE: no single file the kernel writes may exceed this size
    open files           RLIMIT_NOFILE: at most this many descriptors (files held open, memfds, pipes)
    disk                 enforced by the parent (confine.diskwatch): what the scratch folder holds beyond
                         the task copy (files, folders, files unlinked while open) within `disk_mb`
                         and `max_entries`; over it the process group is killed ("disk-limit")

Not limited: the number of processes (RLIMIT_NPROC counts every process of the user, not just
this run's, so a low value would break unrelated programs), and anything done through ctypes.
Stdlib only: the worker imports this before numpy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_MB = 8192
DEFAULT_FILE_MB = 1024
DEFAULT_DISK_MB = 4096  # a run's outputs, traces and inputs are a few arrays; 4 GiB leaves room for large ones
DEFAULT_MAX_ENTRIES = 10_000  # files and folders a run may add to its scratch folder
DEFAULT_OPEN_FILES = 1024  # numpy, the emulator and nkitui's server hold a few dozen
CPU_HARD_MARGIN_S = 5


@dataclass(frozen=True)
class Limits:
    timeout_s: float = DEFAULT_TIMEOUT_S  # wall clock, parent-enforced
    memory_mb: int | None = DEFAULT_MEMORY_MB  # RLIMIT_AS; None = no limit
    cpu_s: int | None = None  # RLIMIT_CPU; None = 2 x timeout (a busy loop hits the timeout first)
    file_mb: int | None = DEFAULT_FILE_MB  # RLIMIT_FSIZE
    disk_mb: int | None = DEFAULT_DISK_MB  # the scratch folder's growth, parent-enforced; None = no limit
    max_entries: int | None = DEFAULT_MAX_ENTRIES  # files and folders added to the scratch folder
    open_files: int | None = DEFAULT_OPEN_FILES  # RLIMIT_NOFILE
    grace_s: float = 2.0  # SIGTERM -> SIGKILL grace period on cancel/timeout

    @property
    def effective_cpu_s(self) -> int | None:
        if self.cpu_s is not None:
            return self.cpu_s
        return int(self.timeout_s * 2) + 1 if self.timeout_s else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_s"] = self.effective_cpu_s
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Limits":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def describe(self) -> str:
        parts = [f"timeout {self.timeout_s:g} s"]
        parts.append(f"memory {self.memory_mb} MB" if self.memory_mb else "memory unlimited")
        cpu = self.effective_cpu_s
        parts.append(f"CPU {cpu} s" if cpu else "CPU unlimited")
        return ", ".join(parts)


def apply_limits(limits: Limits) -> list[str]:
    """Set the rlimits in the current process (the worker). Returns notes on limits that could not
    be applied (e.g. a hard limit already lower), so the run can report them instead of failing."""
    import resource

    notes: list[str] = []

    def lower(which: int, name: str, soft: int, hard: int | None = None) -> None:
        cur_soft, cur_hard = resource.getrlimit(which)
        new_hard = hard if hard is not None else soft
        if cur_hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, cur_hard)
            soft = min(soft, cur_hard)
        try:
            resource.setrlimit(which, (soft, new_hard))
        except (ValueError, OSError) as exc:
            notes.append(f"could not set {name}: {exc}")

    if limits.memory_mb:
        lower(resource.RLIMIT_AS, "RLIMIT_AS", limits.memory_mb * 1024 * 1024)
    cpu = limits.effective_cpu_s
    if cpu:
        lower(resource.RLIMIT_CPU, "RLIMIT_CPU", cpu, cpu + CPU_HARD_MARGIN_S)
    if limits.file_mb:
        lower(resource.RLIMIT_FSIZE, "RLIMIT_FSIZE", limits.file_mb * 1024 * 1024)
    if limits.open_files:
        lower(resource.RLIMIT_NOFILE, "RLIMIT_NOFILE", limits.open_files)
    # No core files: a crashing kernel must not drop a multi-GB core into the scratch folder.
    lower(resource.RLIMIT_CORE, "RLIMIT_CORE", 0)
    return notes

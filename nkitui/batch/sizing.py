"""How many evaluations one machine runs at once: its CPUs and its free memory decide.

Each evaluation is one worker process that runs the kernel single-threaded (the worker's BLAS is
pinned to one thread), so one CPU per evaluation keeps every core busy without oversubscription.
Memory caps the count too: a worker with numpy, the emulator and a task's tensors holds a few
hundred MB resident; TASK_MEMORY_MB is a generous budget per evaluation so that a pool never
pushes the machine into swap or the OOM killer.

CPUs are the ones this process may run on (affinity) and, in a container, the cgroup's CPU quota;
memory is the kernel's MemAvailable and, in a container, what the cgroup still allows.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

TASK_MEMORY_MB = 1024  # resident budget of one evaluation; the bundled tasks peak at 90-390 MB (worker + tensors)
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class PoolSize:
    workers: int
    cpus: int
    available_mb: int | None
    task_memory_mb: int
    reason: str  # in words, for the progress header and `--workers` help


def usable_cpus() -> int:
    """CPUs this process may use: affinity, further limited by a cgroup v2 CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota)))
    return max(1, cpus)


def _cgroup_cpu_quota() -> float | None:
    try:
        text = (CGROUP_ROOT / "cpu.max").read_text().split()
    except OSError:
        return None
    if len(text) != 2 or text[0] == "max":
        return None
    try:
        return int(text[0]) / int(text[1])
    except (ValueError, ZeroDivisionError):
        return None


def available_memory_mb() -> int | None:
    """Memory that can still be used without swapping: MemAvailable, capped by the cgroup limit."""
    available: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) // 1024
                break
    except (OSError, ValueError, IndexError):
        available = None
    try:
        limit = (CGROUP_ROOT / "memory.max").read_text().strip()
        used = int((CGROUP_ROOT / "memory.current").read_text().strip())
        if limit != "max":
            left = max(0, (int(limit) - used) // (1 << 20))
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def pool_size(requested: int | None = None, *, task_memory_mb: int = TASK_MEMORY_MB) -> PoolSize:
    """The number of evaluations to run at once: `requested` when given, else min(CPUs, memory/budget)."""
    cpus = usable_cpus()
    available = available_memory_mb()
    if requested is not None:
        return PoolSize(max(1, requested), cpus, available, task_memory_mb, "set by --workers")
    by_memory = max(1, available // task_memory_mb) if available is not None else cpus
    workers = max(1, min(cpus, by_memory))
    if available is None:
        why = f"{cpus} CPU{'s' if cpus != 1 else ''}"
    elif by_memory < cpus:
        why = f"{available / 1024:.1f} GiB free / {task_memory_mb} MB per task (of {cpus} CPUs)"
    else:
        why = f"{cpus} CPU{'s' if cpus != 1 else ''} ({available / 1024:.1f} GiB free)"
    return PoolSize(workers, cpus, available, task_memory_mb, why)

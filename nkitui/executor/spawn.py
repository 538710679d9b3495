"""Start an untrusted child: the one way nkitui starts a process that imports task code.

    handle = spawn_untrusted("nkitui.executor.untrusted.kernel:serve", payload, workspace=task_copy,
                             limits=limits, allow_subprocess=False)
    handle.send({"op": "load", "id": "1"})          # requests on its stdin; replies come as events

The child is a worker (nkitui.executor.worker) with role "untrusted": its own scratch folder with a
copy of the task (its only writable tree, also its HOME and TMPDIR), a scrubbed environment, the
resource limits, its own session, SIGKILL when its parent dies (confine.spawn), the write/process
guard, and the OS confinement of nkitui.executor.confine (seccomp, Landlock, no network), entered in
the worker before the entry point runs; the entry (nkitui.executor.untrusted) then adds the
introspection guard and sends the confinement report as its first data event, before any task
code. `allow_subprocess` is for the SDK backends only (their compiler and profiler are programs).

spawn_untrusted_many starts several at once; in the evaluator, while it has one thread, it forks
them from itself (nkitui.executor.forked: no new interpreter, numpy and ml_dtypes already imported)
before any of their reader threads start, and spawns them the ordinary way otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import RunHandle, start_worker


@dataclass(frozen=True)
class UntrustedSpec:
    """One untrusted child to start (spawn_untrusted's arguments)."""

    entry: str
    payload: dict[str, Any]
    workspace: Path
    limits: Limits
    allow_subprocess: bool = False
    extra_env: dict[str, str] | None = None
    python_path: list[str] | None = None

    def job(self) -> WorkerJob:
        return WorkerJob(entry=self.entry, payload=dict(self.payload), limits=self.limits, workspace=self.workspace,
                         extra_env=dict(self.extra_env or {}), python_path=list(self.python_path or []),
                         allow_subprocess=self.allow_subprocess, role="untrusted")


def spawn_untrusted(
    entry: str,
    payload: dict[str, Any],
    *,
    workspace: Path,
    limits: Limits,
    allow_subprocess: bool = False,
    extra_env: dict[str, str] | None = None,
    python_path: list[str] | None = None,
) -> RunHandle:
    spec = UntrustedSpec(entry, payload, workspace, limits, allow_subprocess, extra_env, python_path)
    return spawn_untrusted_many([spec])[0]


def spawn_untrusted_many(specs: list[UntrustedSpec]) -> list[RunHandle]:
    """Start every child of `specs`, forked from this process where nkitui.executor.forked allows
    it (the evaluator, one thread), else each as a new interpreter."""
    from nkitui.executor import forked

    if forked.why_not() is not None:
        return [start_worker(spec.job(), requests=True) for spec in specs]
    import gc

    gc.collect()  # no garbage of the evaluator's whose finalizer could close a descriptor in a child
    handles = [RunHandle(spec.job(), requests=True, fork=True) for spec in specs]
    launched = [handle.launch() for handle in handles]  # every fork before the first thread
    for handle, ok in zip(handles, launched):
        if ok:
            handle.watch()
    return handles

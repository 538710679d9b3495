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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import RunHandle, start_worker


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
    job = WorkerJob(entry=entry, payload=dict(payload), limits=limits, workspace=workspace,
                    extra_env=dict(extra_env or {}), python_path=list(python_path or []),
                    allow_subprocess=allow_subprocess, role="untrusted")
    return start_worker(job, requests=True)

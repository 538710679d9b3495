"""Start an untrusted child: the one way nkitui starts a process that imports task code.

    handle = spawn_untrusted("nkitui.executor.untrusted.kernel:serve", payload, workspace=task_copy,
                             limits=limits, allow_subprocess=False)
    handle.send({"op": "load", "id": "1"})          # requests on its stdin; replies come as events

The child is a worker (nkitui.executor.worker) with role "untrusted": its own scratch folder with a
copy of the task (its only writable tree, also its HOME and TMPDIR), a scrubbed environment, the
resource limits, its own session, SIGKILL when its parent dies, the write/process guard, and the
OS confinement of nkitui.executor.confine (seccomp, Landlock) where this build and the host have it:
the child enters it after its own imports and before any task code, and reports what is active as
its first data event.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import RunHandle, start_worker
from nkitui.executor.workspace import Scratch

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)


def readable_roots(python_path: list[str] | None = None) -> list[str]:
    """Read-only roots a confined child needs beyond the interpreter and site-packages: nkitui itself
    (an editable install lives outside site-packages) and the extra Python path (a test SDK)."""
    roots = [_PACKAGE_PARENT, *(python_path or [])]
    return list(dict.fromkeys(str(Path(r).resolve()) for r in roots if r))


def _popen_options(readable: list[str]) -> Any:
    def options(scratch: Scratch) -> dict[str, Any]:
        try:
            from nkitui.executor import confine  # present once the confinement work lands
        except ImportError:
            return {}
        policy = confine.ConfinementPolicy(scratch=scratch.root, readable=tuple(Path(r) for r in readable))
        return dict(confine.popen_options(policy))

    return options


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
    readable = readable_roots(python_path)
    job = WorkerJob(entry=entry, payload={**payload, "readable": readable}, limits=limits, workspace=workspace,
                    extra_env=dict(extra_env or {}), python_path=list(python_path or []),
                    allow_subprocess=allow_subprocess, role="untrusted")
    return start_worker(job, requests=True, popen_options=_popen_options([*readable, sys.prefix]))

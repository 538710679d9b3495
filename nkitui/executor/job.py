"""What a worker is asked to do: the job file the parent writes into the scratch folder.

The executor is generic: a job names an entry point ("package.module:function") that the worker
imports and calls with the job's payload and a WorkerContext. nkitui.evaluate.pipeline.session is the
entry point of an evaluation; benchmarks and tests use their own. Stdlib only (read by the worker
before numpy is imported).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nkitui.executor.limits import Limits

JOB_VERSION = 1


def new_run_id(now: float | None = None) -> str:
    """A sortable, unique run id: UTC time to the second plus 6 random hex digits,
    e.g. 20261130T132500Z-3fa9c1."""
    import secrets

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass
class WorkerJob:
    entry: str  # "package.module:function", called as function(payload, ctx) -> exit code
    payload: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    workspace: Path | None = None  # folder copied into the scratch folder (the kernel's cwd)
    run_id: str = field(default_factory=new_run_id)
    extra_env: dict[str, str] = field(default_factory=dict)
    python_path: list[str] = field(default_factory=list)  # prepended to the worker's PYTHONPATH
    allow_subprocess: bool = False  # may code in the worker start processes (neuron tools need it)
    # "generic": the entry may import task code (a guard, the task copy on sys.path);
    # "evaluator": trusted nkitui code that never imports task code (no guard: it starts children);
    # "untrusted": a child that imports task code for the evaluator (guard, task copy on sys.path,
    # killed when its parent dies)
    role: str = "generic"

    def to_file_dict(self, scratch_root: Path, workspace: Path) -> dict[str, Any]:
        """The job as the worker reads it. The task repository's own path is not in it."""
        return {
            "version": JOB_VERSION,
            "run_id": self.run_id,
            "entry": self.entry,
            "payload": self.payload,
            "limits": self.limits.to_dict(),
            "scratch": str(scratch_root),
            "workspace": str(workspace),
            "allow_subprocess": self.allow_subprocess,
            "role": self.role,
            "parent_pid": os.getpid(),
        }


class JobFileError(Exception):
    pass


def read_job_file(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobFileError(f"cannot read the job file {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != JOB_VERSION:
        raise JobFileError(f"job file {path} has version {data.get('version') if isinstance(data, dict) else None!r}; this worker reads version {JOB_VERSION}")
    for key in ("entry", "scratch", "workspace"):
        if not isinstance(data.get(key), str):
            raise JobFileError(f"job file {path} lacks {key!r}")
    return data

"""What both untrusted children share: confinement before any task code, requests, replies.

    server = Server(ctx, "kernel")
    ...                                  # imports that are not task code (numpy, the emulator)
    server.confine(readable)             # irreversible; its report is the first data event
    for request in server.requests():    # JSON lines on stdin, from the evaluator
        server.reply(request, outputs=...)   # a data event: {"id": ..., ...}

Requests are small JSON objects naming files in the child's scratch folder; arrays travel as .npy
files (nkitui.executor.arrays). Every reply carries the sandbox guard's record so far, so the
evaluator keeps the last one even if the child dies later.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nkitui.executor.context import WorkerContext
from nkitui.executor.events import DataEvent

MAX_REQUEST_BYTES = 1 << 20


class Server:
    def __init__(self, ctx: WorkerContext, role: str) -> None:
        self.ctx = ctx
        self.role = role  # "kernel" | "reference"

    # -- confinement -----------------------------------------------------------------------------
    def confine(self, readable: list[str]) -> dict[str, Any]:
        """Enter the OS confinement (nkitui.executor.confine where this build has it), then say what
        is active. Called after the imports that are not task code and before any that is."""
        report = enter_confinement(self.ctx.scratch, [Path(p) for p in readable])
        from nkitui.executor.untrusted import introspection

        introspection.install(str(self.ctx.workspace))
        report["active"] = [*report.get("active", []), "introspection guard (audit hook)"]
        self.ctx.emit(DataEvent("confinement", report))
        return report

    # -- requests and replies ------------------------------------------------------------------
    def requests(self) -> Iterator[dict[str, Any]]:
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline(MAX_REQUEST_BYTES)
            if not line:
                return
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if isinstance(request, dict) and isinstance(request.get("op"), str):
                yield request

    def reply(self, request: dict[str, Any], **data: Any) -> None:
        self.ctx.emit(DataEvent("reply", {"id": request.get("id"), **data}))
        self.ctx.emit(DataEvent("sandbox", {"violations": sandbox_record()}))


def sandbox_record() -> list[dict[str, Any]]:
    from nkitui.executor.sandbox import current_guard
    from nkitui.executor.untrusted.introspection import refusals

    guard = current_guard()
    return [*(v.to_dict() for v in guard.violations), *refusals()] if guard is not None else refusals()


def enter_confinement(scratch: Path, readable: list[Path]) -> dict[str, Any]:
    """{"active": [...], "degraded": [...], "summary": "..."} after confining this process as far as
    the host allows."""
    try:
        from nkitui.executor import confine  # present once the confinement work lands
    except ImportError:
        confine = None
    if confine is not None:
        policy = confine.ConfinementPolicy(scratch=scratch, readable=tuple(readable))
        report = confine.enter(policy)
        return {"active": list(report.active), "degraded": list(report.degraded), "summary": report.summary()}
    from nkitui.executor.prctl import not_dumpable

    active = ["own session", "killed with its parent", "resource limits", "write and process guard (audit hook)"]
    degraded = ["seccomp and Landlock are not applied (this build has no nkitui.executor.confine)"]
    if not_dumpable():
        active.append("not dumpable")
    else:
        degraded.append("could not make the process non-dumpable")
    return {"active": active, "degraded": degraded, "summary": "degraded: " + "; ".join(degraded)}

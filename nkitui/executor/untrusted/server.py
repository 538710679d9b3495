"""What both untrusted children share: the confinement report before any task code, requests, replies.

    server = Server(ctx, "kernel")
    ...                                  # imports that are not task code (numpy, the emulator)
    server.confine()                     # the worker's confinement + the introspection guard: the first data event
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
from typing import Any

from nkitui.executor.context import WorkerContext
from nkitui.executor.events import DataEvent

MAX_REQUEST_BYTES = 1 << 20


class Server:
    def __init__(self, ctx: WorkerContext, role: str) -> None:
        self.ctx = ctx
        self.role = role  # "kernel" | "reference"

    # -- confinement -----------------------------------------------------------------------------
    def confine(self) -> dict[str, Any]:
        """Report the confinement the worker entered (nkitui.executor.confine, before this entry
        ran), add the introspection guard, and send the report as the first data event: after this,
        task code runs."""
        from nkitui.executor.untrusted import introspection

        entered = self.ctx.confinement
        report = entered.to_dict() if entered is not None else {
            "active": [], "degraded": ["not confined: the worker did not enter nkitui.executor.confine"]}
        guard = introspection.install(str(self.ctx.workspace))
        if "nkitui.emulator.tensor" in sys.modules:  # the kernel process: the emulator's value methods refuse task code
            from nkitui.emulator import devmem  # already imported: no cost
            from nkitui.emulator import tensor as emulator_tensor

            emulator_tensor.TASK_ROOTS = guard.task_roots
            devmem.enable()  # device memory write-protected outside instructions' writes
            guard.foreign_allowed = devmem.foreign_functions()
            report["active"] = [*report.get("active", []), "device memory write-protected"]
        report["active"] = [*report.get("active", []), "introspection guard"]
        from nkitui.executor import confine  # last: nkitui's setup is done, task code comes next

        no_threads, threads_allowed = confine.refuse_threads()
        if "nkitui.emulator.devmem" in sys.modules:  # its helper thread is nkitui's, not the task's
            from nkitui.emulator import devmem

            devmem.own_threads_now()
        if no_threads:
            report["active"].append(no_threads)
        if threads_allowed:
            report["degraded"] = [*report.get("degraded", []), threads_allowed]
        report.pop("summary", None)
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

"""The evaluator's handle on the reference process: a ReferenceFn whose every call is a request.

    reference = ReferenceProcess(child, task)
    reference.load()                      # ReferenceFailed: the reference does not import
    outputs = reference(inputs)           # natural layout both ways; checked against the manifest

Wrapped in a RecordedReference by the pipeline, so every answer is asked for (and recorded) before
the kernel's code is imported, and the process ends then.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkitui.evaluate.pipeline.children import ChildReplyError, UntrustedChild
from nkitui.evaluate.pipeline.kernel import error_from
from nkitui.executor.arrays import save_array


class ReferenceFailed(Exception):
    """The reference raised, did not import, or returned something unusable (`error`: in words)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["message"])
        self.error = error
        self.described = error["message"]


class ReferenceProcess:
    def __init__(self, child: UntrustedChild, task: Any) -> None:
        self.child = child
        self.task = task
        self.names = [spec.name for spec in task.outputs]
        self.max_elements = {spec.name: spec.size + 1024 for spec in task.outputs}
        self.calls = 0
        self.asking = "an input set"  # what is being asked, for the error's words (the auditor announces it)

    def announce(self, what: str) -> None:
        self.asking = what

    def load(self) -> None:
        reply = self.child.request("load")
        if reply.get("error") is not None:
            raise ReferenceFailed(error_from(reply["error"], "importing the reference failed"))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import time

        self.calls += 1
        started = time.perf_counter()
        rid, folder = self.child.folder()
        metas = {}
        for i, (name, value) in enumerate(inputs.items()):
            meta = save_array(folder / "in" / f"{i}-{name}.npy", np.asarray(value))
            metas[name] = meta
        what = f"the reference failed on {self.asking}"
        sent = time.perf_counter()
        reply = self.child.request("call", rid=rid, folder=folder, inputs=metas, what=what)
        answered = time.perf_counter()
        try:
            if reply.get("error") is not None:
                error = error_from(reply["error"], what)
                error["kind"] = "reference-error"
                raise ReferenceFailed(error)
            try:
                outputs = self.child.arrays(reply, folder, self.names, self.max_elements)
            except ChildReplyError as exc:
                raise ReferenceFailed({"kind": "reference-error", "message": str(exc), "file": self._file(), "line": None,
                                       "traceback": ""}) from None
        finally:
            self.child.forget(folder)
        self.child.ctx.log(f"reference call {self.calls} ({self.asking}): writing inputs {(sent - started) * 1e3:.0f} ms, "
                           f"answer {(answered - sent) * 1e3:.0f} ms, reading outputs {(time.perf_counter() - answered) * 1e3:.0f} ms",
                           level="debug")
        for spec in self.task.outputs:
            if outputs[spec.name].shape != tuple(spec.shape):
                raise ReferenceFailed({"kind": "reference-error", "file": self._file(), "line": None, "traceback": "",
                                       "message": f"{self.task.sources.reference.spec} returned shape "
                                                  f"{outputs[spec.name].shape} for output {spec.name!r}; the manifest "
                                                  f"declares {tuple(spec.shape)}"})
        return outputs

    def _file(self) -> str | None:
        ref = self.task.sources.reference
        return self.task.rel(ref.path) if ref is not None else None

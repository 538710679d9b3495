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
        # what a round trip costs beside the reference's own work on each set (seconds, averaged over
        # every round trip so far: one slow round trip on a loaded machine must not decide alone):
        # they decide whether asking about several sets at once pays
        self.work_per_set_s: float | None = None
        self.overhead_s: float | None = None
        self._work_s = self._overhead_s = 0.0
        self._sets = self._trips = 0

    def announce(self, what: str) -> None:
        self.asking = what

    def load(self) -> None:
        reply = self.child.request("load")
        if reply.get("error") is not None:
            raise ReferenceFailed(error_from(reply["error"], "importing the reference failed"))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        answer = self.many([inputs])[0]
        if isinstance(answer, ReferenceFailed):
            raise answer
        return answer

    def batch_size(self, wanted: int) -> int:
        """`wanted`, or 1 when the reference's own work on a set costs more than the rest of a round
        trip: then a speculative answer (a candidate the search may never look at) costs more than the
        round trip it saves. The child's timings only steer how many sets are asked at once; the
        answers and the order they are judged in are the same either way."""
        if self.work_per_set_s is None or self.overhead_s is None:
            return wanted
        return 1 if self.work_per_set_s > self.overhead_s else wanted

    def _timed(self, results: list[Any], round_trip_s: float) -> None:
        said = [r.get("seconds") for r in results if isinstance(r, dict)]
        work = [float(w) for w in said if isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < 1e6]
        if len(work) != len(results) or not work:
            return
        self._work_s += sum(work)
        self._sets += len(work)
        self._overhead_s += max(0.0, round_trip_s - sum(work))
        self._trips += 1
        self.work_per_set_s = self._work_s / self._sets
        self.overhead_s = self._overhead_s / self._trips

    def many(self, sets: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray] | ReferenceFailed]:
        """The reference on several input sets in one round trip: each answer, or its failure."""
        import time

        self.calls += len(sets)
        started = time.perf_counter()
        rid, folder = self.child.folder()
        what = f"the reference failed on {self.asking}"
        items = []
        for k, inputs in enumerate(sets):
            # no digest (as for the kernel's inputs): what the reference sends back is hashed and checked; new
            # folders and files in the request's new folder, never through a link or FIFO (UntrustedChild.folder)
            try:
                (folder / str(k)).mkdir()
                (folder / str(k) / "in").mkdir()
                metas = {name: save_array(folder / str(k) / "in" / f"{i}-{name}.npy", np.asarray(value), digest=False,
                                          exclusive=True)
                         for i, (name, value) in enumerate(inputs.items())}
            except OSError as exc:
                raise self.child._tampered(f"the input files of its request could not be made new ({exc.strerror or exc}): "
                                           "task code planted something there") from None
            items.append({"inputs": metas, "what": what})
        sent = time.perf_counter()
        try:
            reply = self.child.request("calls", rid=rid, folder=folder, sets=items)
            answered = time.perf_counter()
            results = reply.get("results") if isinstance(reply.get("results"), list) else None
            if reply.get("error") is not None or results is None or len(results) != len(sets):
                error = error_from(reply.get("error"), f"{what}: the reference process answered {len(results or [])} of "
                                                       f"{len(sets)} input sets")
                error["kind"] = "reference-error"
                return [ReferenceFailed(error) for _ in sets]
            self._timed(results, answered - sent)
            answers = [self._answer(result, folder / str(k), what) for k, result in enumerate(results)]
        finally:
            self.child.forget(folder)
        self.child.ctx.log(f"reference: {len(sets)} input set(s) ({self.asking}): writing inputs "
                           f"{(sent - started) * 1e3:.0f} ms, answers {(answered - sent) * 1e3:.0f} ms, reading outputs "
                           f"{(time.perf_counter() - answered) * 1e3:.0f} ms", level="debug")
        return answers

    def _answer(self, result: Any, folder: Any, what: str) -> dict[str, np.ndarray] | ReferenceFailed:
        if not isinstance(result, dict):
            return ReferenceFailed({"kind": "reference-error", "message": f"{what}: no answer", "file": self._file(),
                                    "line": None, "traceback": ""})
        if result.get("error") is not None:
            error = error_from(result["error"], what)
            error["kind"] = "reference-error"
            return ReferenceFailed(error)
        try:
            outputs = self.child.arrays(result, folder, self.names, self.max_elements)
        except ChildReplyError as exc:
            return ReferenceFailed({"kind": "reference-error", "message": str(exc), "file": self._file(), "line": None,
                                    "traceback": ""})
        for spec in self.task.outputs:
            if outputs[spec.name].shape != tuple(spec.shape):
                return ReferenceFailed({"kind": "reference-error", "file": self._file(), "line": None, "traceback": "",
                                        "message": f"{self.task.sources.reference.spec} returned shape "
                                                   f"{outputs[spec.name].shape} for output {spec.name!r}; the manifest "
                                                   f"declares {tuple(spec.shape)}"})
        return outputs

    def _file(self) -> str | None:
        ref = self.task.sources.reference
        return self.task.rel(ref.path) if ref is not None else None

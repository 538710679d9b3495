"""The evaluator's handle on the reference process: a ReferenceFn whose every call is a request.

    reference = ReferenceProcess(child, task)
    reference.load()                      # ReferenceFailed: the reference does not import
    outputs = reference(inputs)           # natural layout both ways; checked against the manifest

Wrapped in a RecordedReference by the pipeline, so every answer is asked for (and recorded) before
the kernel's code is imported, and the process ends then.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nkitui.evaluate.pipeline.children import ChildReplyError, UntrustedChild
from nkitui.evaluate.pipeline.kernel import error_from
from nkitui.executor.arrays import save_array


@dataclass(frozen=True)
class _Asked:
    """A request for `count` input sets sent to a reference process, its reply not read yet."""

    rid: str
    folder: Path
    count: int
    what: str
    started: float
    sent: float


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
        return self.receive(self.send(sets))

    def send(self, sets: list[dict[str, np.ndarray]]) -> "_Asked":
        """Write `sets`' inputs and ask for them without waiting (`receive` waits): the pool asks each of its
        processes this way, so they compute at once."""
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
        self.child.ask("calls", rid=rid, folder=folder, sets=items)
        return _Asked(rid, folder, len(sets), what, started, sent)

    def receive(self, asked: "_Asked") -> list[dict[str, np.ndarray] | ReferenceFailed]:
        import time

        rid, folder, what = asked.rid, asked.folder, asked.what
        try:
            reply = self.child.answer(rid)
            answered = time.perf_counter()
            results = reply.get("results") if isinstance(reply.get("results"), list) else None
            if reply.get("error") is not None or results is None or len(results) != asked.count:
                error = error_from(reply.get("error"), f"{what}: the reference process answered {len(results or [])} of "
                                                       f"{asked.count} input sets")
                error["kind"] = "reference-error"
                return [ReferenceFailed(error) for _ in range(asked.count)]
            self._timed(results, answered - asked.sent)
            answers = [self._answer(result, folder / str(k), what) for k, result in enumerate(results)]
        finally:
            self.child.forget(folder)
        self.child.ctx.log(f"reference: {asked.count} input set(s) ({self.asking}): writing inputs "
                           f"{(asked.sent - asked.started) * 1e3:.0f} ms, answers {(answered - asked.sent) * 1e3:.0f} ms, "
                           f"reading outputs {(time.perf_counter() - answered) * 1e3:.0f} ms", level="debug")
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


class ReferencePool:
    """Several reference processes behind one ReferenceFn (each forked and confined like the first, each with
    its own scratch): a request for several input sets is split across them in order, so they compute at once
    on the host's cores (the seeds, the adversarial cases' |inputs|: up to 0.45 s of one process's work a
    check). A single set goes to the first process, so every search step is answered by the same process; the
    answers are checked and recorded exactly as one process's would be."""

    def __init__(self, processes: list[ReferenceProcess]) -> None:
        assert processes
        self.processes = processes

    @property
    def calls(self) -> int:
        return sum(p.calls for p in self.processes)

    def announce(self, what: str) -> None:
        for p in self.processes:
            p.announce(what)

    def load(self) -> None:
        """Import the reference in every process at once; the first failure is raised (ReferenceFailed)."""
        rids = [p.child.ask("load") for p in self.processes]
        for p, rid in zip(self.processes, rids):
            reply = p.child.answer(rid)
            if reply.get("error") is not None:
                raise ReferenceFailed(error_from(reply["error"], "importing the reference failed"))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.processes[0](inputs)

    def batch_size(self, wanted: int) -> int:
        """The first process's advice, but at least one set per process: sets asked together are computed at
        once, so a search may ask one candidate per process in the time of one."""
        return max(self.processes[0].batch_size(wanted), min(wanted, len(self.processes)))

    def many(self, sets: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray] | ReferenceFailed]:
        n = min(len(self.processes), len(sets))
        if n <= 1:
            return self.processes[0].many(sets)
        size = -(-len(sets) // n)  # contiguous shares, the first ones the fullest
        shares = [(p, sets[i * size:(i + 1) * size]) for i, p in enumerate(self.processes[:n])]
        asked = [(p, p.send(share)) for p, share in shares if share]
        answers: list[dict[str, np.ndarray] | ReferenceFailed] = []
        for p, pending in asked:
            answers += p.receive(pending)
        return answers

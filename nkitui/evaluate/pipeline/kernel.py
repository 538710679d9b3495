"""The evaluator's handle on the kernel process: input sets out, raw outputs back, checked.

    kernel = KernelProcess(child, task, device_provenance=True)
    run = kernel.run(inputs, precise=True, trace=True, what="seed 0")   # natural layout both ways
    run.outputs / run.error / run.host_compute / run.trace_json

Every array is checked on the way in (plain .npy, the header read first, at most a few times the
declared size) and turned back into the natural layout here, not in the kernel's process. On the
emulator an output counts only with device provenance: the emulated launch produced it as an HBM
tensor its instructions wrote, bytes unchanged since (nkitui.emulator.provenance); anything else is
host computation and the run's outputs are not used.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nkitui.common import pyast
from nkitui.evaluate.numerics.callables import KernelRunner, RunOptions
from nkitui.evaluate.numerics.inputs import from_kernel_layout, to_kernel_layout
from nkitui.evaluate.pipeline.children import ChildReplyError, UntrustedChild
from nkitui.executor.arrays import save_array

ERROR_KINDS = frozenset({
    "kernel-error", "emulator-error", "output-error", "load-error", "syntax-error", "memory-limit", "sandbox",
    "reference-error", "backend-unavailable", "internal", "shape-mismatch",
})
MAX_TRACE_BYTES = 256 << 20


def error_from(data: Any, default_message: str) -> dict[str, Any]:
    """An error a child reported, as the result's error dict: fields checked, text bounded."""
    d = data if isinstance(data, dict) else {}
    kind = d.get("kind") if d.get("kind") in ERROR_KINDS else "kernel-error"
    message = d.get("message")
    message = message if isinstance(message, str) and message else default_message
    file = d.get("file") if isinstance(d.get("file"), str) else None
    line = d.get("line") if isinstance(d.get("line"), int) and not isinstance(d.get("line"), bool) else None
    tb = d.get("traceback")
    tb = tb if isinstance(tb, str) else ""
    return {"kind": kind, "message": message[:4000], "file": file, "line": line, "traceback": tb[:40000]}


class KernelRunFailed(Exception):
    """A run the numerics asked for failed in the kernel's process (`described`: the reported words)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["message"])
        self.error = error
        self.described = error["message"]


@dataclass
class KernelRun:
    outputs: dict[str, np.ndarray] | None = None  # natural layout
    kernel_outputs: dict[str, Any] | None = None  # the reply's array descriptions (for a later recheck)
    folder: Path | None = None
    elapsed_s: float | None = None
    cpu_s: float | None = None  # the CPU time the kernel's process spent on the launch (the process's own word:
    # it only schedules, never judges)
    error: dict[str, Any] | None = None
    host_compute: str | None = None  # why an output does not count as the device's
    trace_json: Any = None  # a Trace (binary form), a dict (JSON form), or None
    replay: "ReplayOutcome | None" = None  # the out-of-process replay of the launch's instruction log
    replay_job: Any = None  # () -> ReplayOutcome: the replay to run (the caller may run it on a thread)
    state: list[str] | None = None  # what the launch left for a later launch in its process (the launch-state audit)


@dataclass
class ReplayOutcome:
    """What the replay of a launch's instruction log found (nkitui.emulator.replay).

    status: `exact` (the replay's outputs equal the reported ones bit for bit), `mismatch` (they differ:
    the kernel process's report is not what its instructions computed), `invalid` (the log is malformed,
    missing, or does not replay), `unavailable` (the kernel's process declared its log unreplayable: the run
    fails, HACK-REPLAY-OPTOUT), `retry` (an unrecorded launch that another seed's log does not reproduce:
    the pipeline launches that seed again, recorded, and keeps only that launch's outcome)."""

    status: str
    detail: str
    file: str | None = None
    line: int | None = None
    data_dependent: str | None = None
    log: Any = None  # the parsed log (exact replays only: stage 2 replays it on fresh inputs)
    data: bytes | None = None  # its bytes (exact replays only: the replay helper unpacks them again)

    @property
    def failed(self) -> bool:
        return self.status in ("mismatch", "invalid")


class KernelProcess:
    def __init__(self, child: UntrustedChild, task: Any, *, device_provenance: bool, replay: bool = True,
                 target: str = "trn2", state_later: bool = False) -> None:
        self.child = child
        self.task = task
        self.device_provenance = device_provenance
        self.replay = device_provenance and replay  # the emulator's launches: replayed out of the kernel's process
        self.target = target
        names = [spec.name for spec in task.outputs]
        self.names = names
        self.max_elements = {spec.name: spec.size * 4 + 1024 for spec in task.outputs}
        self._by_digest: dict[tuple[bytes, bool], dict[str, np.ndarray]] = {}
        # a second kernel process running the judging phases' launches ahead (nkitui.evaluate.pipeline.spare)
        self.spare: Any = None
        # launches this process ran ahead (the first later launch, while the last seeds' logs replay):
        # (inputs digest, precise) -> KernelRun, taken once by the runner (see run_ahead)
        self._ahead: dict[tuple[bytes, bool], KernelRun] = {}
        # judging launches' answers replayed early (answer_early): key -> (the log replayed, its VerifiedReplay)
        self._answers: dict[tuple[bytes, bool], tuple[Any, VerifiedReplay]] = {}
        # the first seed's instruction log once the replay verified it (exact on its seed, stage 2 on fresh
        # inputs): the judging phases' launches are answered by its replay on their inputs, or, where it cannot
        # answer, must be what it computes on them (see _verified_replay)
        self.verified_log: Any = None
        self.verified_dtypes: dict[str, Any] = {}
        self.verified_shapes: dict[str, tuple[int, ...]] = {}
        self.seeds_precise: bool | None = None
        self.answered = 0  # judging launches answered by the verified log's replay instead of a launch
        # judging launches whose stream diverged from the verified log: (label, why); their outputs are unverified
        self.unverified: list[tuple[str, str]] = []
        # launches that left state a later launch in their process could read: (what, the changes in words)
        self.stateful: list[tuple[str, list[str]]] = []
        # `state_later`: each launch's launch-state audit is asked for after its reply (the kernel's process audits
        # while the evaluator goes on) and read before anything else is asked of that process (settle)
        self.state_later = state_later and device_provenance
        self._unsettled: list[tuple[UntrustedChild, str, str]] = []  # (process, the `state` request's id, what)

    def use(self, child: UntrustedChild) -> None:
        """Launch in `child` from now on (a kernel process forked fresh for the next seed: see the session's
        _launch_seed); it was started and confined like the first, and is loaded by the caller."""
        self.child = child

    def load(self) -> dict[str, Any]:
        return self.child.request("load")

    def _write_inputs(self, folder: Path, inputs: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        metas = []
        for i, spec in enumerate(self.task.inputs):
            arr = to_kernel_layout(spec, np.asarray(inputs[spec.name]))
            # no digest: the kernel's process checking the evaluator's bytes would guard nothing (its task
            # code can change its own inputs anyway); what it sends back is hashed and checked
            try:  # a new file, never through a link or FIFO task code planted (see UntrustedChild.folder)
                metas.append(save_array(folder / "in" / f"{i}-{spec.name}.npy", arr, digest=False, exclusive=True))
            except OSError as exc:
                raise self.child._tampered(f"the input file in/{i}-{spec.name}.npy of its request could not be made "
                                           f"new ({exc.strerror or exc}): task code planted something there") from None
        return metas

    def run(self, inputs: dict[str, np.ndarray], *, precise: bool, trace: bool = False, what: str = "the kernel",
            source: str | None = None, keep: bool = False, replay: bool = False,
            replay_with: Any = None) -> KernelRun:
        """One launch on `inputs` (natural layout). ChildGone propagates (the process died). `replay`: record
        the launch's instruction log and replay it here (the emulator's seeds; see nkitui.emulator.replay).
        `replay_with` (with `replay`): () -> the ReplayOutcome of another seed's recorded log; this launch is
        not recorded, and its replay job replays that log on these inputs (replay_borrowed: a `retry`
        outcome unless that reproduces the reported outputs bit for bit)."""
        replay = replay and self.replay
        borrowed = replay and replay_with is not None and source is None
        self.settle(self.child)
        rid, folder = self.child.folder()
        metas = self._write_inputs(folder, inputs)
        fields: dict[str, Any] = {"inputs": metas, "precise": precise, "trace": trace, "what": what}
        audited = source is None and self.device_provenance  # the emulator's kernel process audits its launches
        if audited and self.state_later:
            fields["state_later"] = True
        if replay and source is None and not borrowed:
            fields["replay"] = True
        if source is not None:
            fields["source"] = source
        reply = self.child.request("run", rid=rid, folder=folder, **fields)
        if reply.get("error") is not None:
            if not keep:
                self.child.forget(folder)
            return KernelRun(error=error_from(reply["error"], f"{what}: the kernel failed"))
        try:
            raw = self.child.arrays(reply, folder, self.names, self.max_elements)
        except ChildReplyError as exc:
            return KernelRun(error={"kind": "output-error", "message": f"{what}: {exc}", "file": None, "line": None,
                                    "traceback": ""})
        run = KernelRun(outputs={spec.name: from_kernel_layout(spec, raw[spec.name]) for spec in self.task.outputs},
                        kernel_outputs=dict(reply["outputs"]), folder=folder)
        elapsed = reply.get("elapsed_s")
        run.elapsed_s = float(elapsed) if isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool) else None
        cpu = reply.get("cpu_s")
        run.cpu_s = float(cpu) if isinstance(cpu, (int, float)) and not isinstance(cpu, bool) else None
        if self.device_provenance and source is None:
            run.host_compute = _host_compute(reply.get("provenance"), self.names)
        if audited and self.state_later:
            state_rid, state_folder = self.child.folder()
            self.child.forget(state_folder)
            self._unsettled.append((self.child, self.child.ask("state", rid=state_rid), what))
        elif audited:
            run.state = _launch_state(reply.get("state"))
            if run.state:
                self.stateful.append((what, run.state))
        if trace and isinstance(reply.get("trace"), str):
            run.trace_json = _read_trace(folder / "out", reply["trace"], self.child.scratch_root, soon=True)
        if borrowed:
            kernel_inputs = [to_kernel_layout(spec, np.asarray(inputs[spec.name])) for spec in self.task.inputs]
            target = self.target
            run.replay_job = lambda: replay_borrowed(replay_with(), kernel_inputs, raw, target=target, precise=precise)
        elif replay and source is None:  # the log's bytes now (the folder goes); the replay may run on a thread
            kernel_inputs = [to_kernel_layout(spec, np.asarray(inputs[spec.name])) for spec in self.task.inputs]
            data = read_replay_log(folder / "out", reply.get("replay"), self.child.scratch_root)
            target = self.target
            run.replay_job = lambda: replay_launch(data, kernel_inputs, raw, target=target, precise=precise)
        if not keep:
            self.child.forget(folder)
        return run

    def settle(self, child: UntrustedChild | None = None, grace_s: float | None = None) -> None:
        """Read the launch-state audits asked for after their launches (`state_later`), of `child` or of every
        process: before the next request to that process, before it is closed, and before the verdict. A process
        that ends instead of answering sent no account of its launch, which counts as state left behind; with
        `grace_s` (a run that stopped early: closing, no verdict waits on it), one that does not answer in that
        time is killed."""
        import threading

        from nkitui.evaluate.pipeline.children import ChildGone

        keep = []
        for process, rid, what in self._unsettled:
            if child is not None and process is not child:
                keep.append((process, rid, what))
                continue
            overdue = threading.Timer(grace_s, process.handle.kill) if grace_s is not None else None
            if overdue is not None:
                overdue.daemon = True
                overdue.start()
            try:
                reply: dict[str, Any] = process.answer(rid)
            except ChildGone:
                reply = {}
            finally:
                if overdue is not None:
                    overdue.cancel()
            state = _launch_state(reply.get("state"))
            if state:
                self.stateful.append((what, state))
        self._unsettled = keep

    def run_ahead(self, key: tuple[bytes, bool], inputs: dict[str, np.ndarray], precise: bool) -> None:
        """Run a launch a later phase will ask for (`key`: its inputs' digest and mode) now, while this process
        would wait: the runner takes it only if it succeeded, so a failure is run again in its own phase
        and every error is the one the sequential order gives. ChildGone is not raised here: the process is
        gone for the phase that asks next, which meets the same ChildGone (it is kept by the child)."""
        from nkitui.evaluate.pipeline.children import ChildGone

        try:
            run = self.run(inputs, precise=precise, what="a launch run ahead")
        except ChildGone:
            return
        if run.error is None and run.outputs is not None and run.host_compute is None:
            self._ahead[key] = run

    def remember(self, inputs: dict[str, np.ndarray], precise: bool, outputs: dict[str, np.ndarray]) -> None:
        """A seed's verified outputs: a later numerics run on the same inputs and mode reuses them."""
        from nkitui.evaluate.numerics.recorded import inputs_digest

        self._by_digest[(inputs_digest(inputs), precise)] = outputs
        if not self.verified_dtypes:  # the first seed's: the dtypes its log's launches report (see _verified_replay)
            self.seeds_precise = precise
            self.verified_dtypes = {name: np.asarray(a).dtype for name, a in outputs.items()}
            self.verified_shapes = {name: np.asarray(a).shape for name, a in outputs.items()}

    def runner(self, supports_precise_switch: bool) -> KernelRunner:
        """The KernelRunner the numerics steps (trials, precision, goldens) run the port through."""
        from nkitui.evaluate.numerics.recorded import inputs_digest

        def run(inputs: dict[str, np.ndarray], options: RunOptions) -> dict[str, np.ndarray]:
            precise = options.precise if supports_precise_switch else True
            key = (inputs_digest(inputs), precise)
            known = self._by_digest.get(key)
            if known is not None:
                return dict(known)
            early = self._answers.pop(key, None)
            if early is not None and self.verified_log is not None and early[0] is self.verified_log:
                verified = early[1]  # replayed during the seeds' launches, on the log both stages then verified
            else:
                verified = self._verified_replay(inputs, precise)
            if verified.outputs is not None:  # what the verified instructions compute here: the launch's by definition
                self.answered += 1
                return verified.outputs
            ahead = self._ahead.pop(key, None)
            if ahead is None and self.spare is not None:
                ahead = self.spare.take(key)
            result: KernelRun
            if isinstance(ahead, KernelRun) and ahead.error is None and ahead.outputs is not None:
                result = ahead  # the same launch, run by the spare process (only a success is taken)
            else:
                result = self.run(inputs, precise=precise, what=options.label or "the kernel")
            if result.error is not None:
                raise KernelRunFailed(result.error)
            if result.host_compute is not None:
                raise KernelRunFailed({"kind": "host-compute", "message": f"{options.label}: {result.host_compute}",
                                       "file": None, "line": None, "traceback": ""})
            if result.replay is not None and result.replay.failed:
                raise KernelRunFailed({"kind": "host-compute", "message": f"{options.label}: {result.replay.detail}",
                                       "file": result.replay.file, "line": result.replay.line, "traceback": ""})
            assert result.outputs is not None
            try:
                mismatch = verified.against(result.outputs)
            except Unverifiable as exc:
                mismatch, verified.diverged = None, str(exc)
            if verified.diverged is not None:  # the kernel process's word: the session makes the check not proven
                self.unverified.append((options.label or "a judging launch", verified.diverged))
            if mismatch is not None:
                raise KernelRunFailed({"kind": "host-compute", "message": f"{options.label}: {mismatch}",
                                       "file": None, "line": None, "traceback": ""})
            return result.outputs

        return run

    def answer_early(self, log: Any, key: tuple[bytes, bool], inputs: dict[str, np.ndarray],
                     precise: bool, replayer: Any = None) -> Any:
        """A job for the replay thread: a judging launch's answer (see _verified_replay) computed on `log` before
        both stages verified it, while the replay thread would wait for a seed's launch; the runner uses it
        only if `log` is the one then verified (else it replays again, or launches)."""
        def job() -> None:
            try:
                self._answers[key] = (log, self._verified_replay(inputs, precise, log, replayer))
            except Exception:  # noqa: BLE001 - the runner computes it itself then
                pass

        return job

    def _verified_replay(self, inputs: dict[str, np.ndarray], precise: bool, log: Any = None,
                         replayer: Any = None) -> "VerifiedReplay":
        """A judging phase's launch (trials, precision, goldens) answered by the first seed's instruction log once
        both replay stages verified it (exact on the seeds, within tolerance on fresh inputs): replayed here on
        these inputs, its outputs are what the kernel's instructions compute on them, so the launch is not made
        (a kernel recognising a trial's inputs and answering them from the host, `nl.shared_constant`, never
        gets the chance: tests/security/test_redteam_trials.py). Not answered, and the kernel launched as
        before, when there is no verified log, when the log carries values from the seed (front-end writes of
        other programs' or cores' data: replayed on other inputs they are the seed's, not the launch's), or when
        the stream branches on device values that differ here (`Diverged`): such a launch is made, and its
        outputs are unverified (`KernelProcess.unverified`: the session makes the phase's check not proven). A log that replays on the seeds and the fresh set but fails here: the launch is made, and its
        outputs, whatever they are, are unverified (HACK-REPLAY-MISMATCH), as the launch is not what the log
        computes."""
        log = self.verified_log if log is None else log
        if log is None or not self.replay:
            return VerifiedReplay()
        from nkitui.emulator import replay

        if replay.carried_sources(log):
            return VerifiedReplay(against_log=lambda outputs: self._against(log, inputs, outputs, precise))
        kernel_inputs = self._kernel_inputs(inputs)
        try:  # `replayer`: the same replay made elsewhere (the replay helper, replayhelper.py)
            raw = (replayer or replay.replay)(log, kernel_inputs, target=self.target, precise=precise)
        except replay.Diverged as exc:  # launched; its outputs are then unverified (runner: self.unverified)
            return VerifiedReplay(diverged=str(exc)[:200] or "the stream diverged")
        except Exception as exc:  # noqa: BLE001 - the log replayed on the seed and on fresh inputs: say what it met
            why = (f"the seed's verified instruction log does not replay on these inputs ({type(exc).__name__}: "
                   f"{str(exc)[:200]}); the kernel's outputs here are unverified (HACK-REPLAY-MISMATCH)")
            return VerifiedReplay(against_log=lambda outputs: why)
        outputs = {}
        held = VerifiedReplay(against_log=lambda outputs: self._against(log, inputs, outputs, precise))
        for spec in self.task.outputs:
            if spec.name not in raw:  # (a log verified on the seeds names every output)
                return held
            out = from_kernel_layout(spec, raw[spec.name])
            argument = _argument_dtype(log, spec.name, kernel_inputs)
            if argument is not None and out.dtype != argument:
                out = out.astype(argument)  # an argument the kernel wrote: the launch copies it back into the input
            if precise == self.seeds_precise and (out.dtype, out.shape) != (self.verified_dtypes.get(spec.name),
                                                                            self.verified_shapes.get(spec.name)):
                return held  # not what the seeds' launches reported in this mode: the launch decides, held to the log
            outputs[spec.name] = out
        return VerifiedReplay(outputs=outputs)

    def _kernel_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [to_kernel_layout(spec, np.asarray(inputs[spec.name])) for spec in self.task.inputs]

    def _against(self, log: Any, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                 precise: bool) -> str | None:
        """Why a launch's outputs are not what `log` computes on its inputs, bit for bit (None: they are); Unverifiable
        when the stream branches on device values that differ here."""
        from nkitui.emulator import replay

        try:
            raw = replay.replay(log, self._kernel_inputs(inputs), target=self.target, precise=precise)
        except replay.Diverged as exc:
            raise Unverifiable(str(exc)[:200] or "the stream diverged") from None
        except Exception as exc:  # noqa: BLE001 - the log replayed on the seed and on fresh inputs: say what it met
            return (f"the seed's verified instruction log does not replay on these inputs ({type(exc).__name__}: "
                    f"{str(exc)[:200]}); the kernel's outputs here are unverified (HACK-REPLAY-MISMATCH)")
        expected = {spec.name: from_kernel_layout(spec, raw[spec.name]) for spec in self.task.outputs
                    if spec.name in raw}
        diff = replay.first_difference(outputs, expected)
        if diff is None:
            return None
        return (f"the kernel's outputs on these inputs are not what its instructions, verified on the seeds, compute "
                f"({diff.describe()}): it answered these inputs some other way (HACK-REPLAY-MISMATCH)")


class Unverifiable(Exception):
    """A launch's stream diverged from the verified log on its inputs: its outputs cannot be held to it."""


@dataclass
class VerifiedReplay:
    """A judging launch's answer from the verified log (KernelProcess._verified_replay): `outputs` (natural
    layout; no launch needed), or none, and then what a launch's outputs are checked against."""

    outputs: dict[str, np.ndarray] | None = None
    against_log: Any = None  # outputs -> why they are not what the log computes (None: they are), or None
    diverged: str | None = None  # the verified log diverges on these inputs: a launch's outputs are unverified

    def against(self, outputs: dict[str, np.ndarray]) -> str | None:
        return None if self.against_log is None else self.against_log(outputs)


def _argument_dtype(log: Any, name: str, kernel_inputs: list[np.ndarray]) -> Any:
    """The dtype of the input array output `name` is, when the log's output is one of the kernel's arguments (the
    launch writes such an output back into its input array, converting the storage's cells), else None."""
    try:
        ref = log.parsed.outputs[name]
        source = log.parsed.storages[ref.ref].source
        if source[0] == "input":
            return np.asarray(kernel_inputs[source[1]]).dtype
    except (AttributeError, KeyError, IndexError, TypeError):
        return None
    return None


def replay_answers(outcome: ReplayOutcome | None) -> bool:
    """Whether the judging launches will (most likely) be answered by replaying this seed's log rather than
    launched (KernelProcess._verified_replay): it replayed exactly, its process read no device values on the
    host (no data-dependence mark: such a stream may branch differently on the trials' inputs) and it carries
    nothing from the seed. A prediction for the launch-ahead and the spare process only: what answers is
    decided per launch, once stage 2 verified the log."""
    if outcome is None or outcome.status != "exact" or outcome.log is None or outcome.data_dependent:
        return False
    from nkitui.emulator import replay

    return not replay.carried_sources(outcome.log)


MAX_REPLAY_BYTES = 2 << 30


def read_replay_log(folder: Path, name: Any, root: Path | None = None) -> bytes | str:
    """The log's bytes, or why there are none (a link, too large, not sent). `root`: the child's scratch
    folder (`folder` beneath it): no link below it is followed (nkitui.executor.workspace.read_beneath),
    so a kernel that swaps its request folder for a link cannot make the evaluator read elsewhere."""
    if not isinstance(name, str) or name != "replay.bin":
        return "the kernel's process sent no instruction log for this launch"
    from nkitui.executor.workspace import read_beneath

    path = folder / name
    anchor = root if root is not None and path.is_relative_to(root) else folder
    try:
        return read_beneath(anchor, path.relative_to(anchor), max_bytes=MAX_REPLAY_BYTES)
    except OSError as exc:
        return f"the instruction log could not be read: {exc.strerror or exc}"


def replay_launch(data: bytes | str, inputs: list[np.ndarray], reported: dict[str, np.ndarray], *,
                  target: str, precise: bool) -> ReplayOutcome:
    """Replay the launch's instruction log here (a process that never imported task code) and compare
    its outputs with the ones the kernel's process reported, bit for bit."""
    from nkitui.emulator import replay

    if isinstance(data, str):
        return ReplayOutcome("invalid", data)
    try:
        log = replay.unpack(data)
    except replay.ReplayFormatError as exc:
        return ReplayOutcome("invalid", str(exc))
    if log.unavailable is not None:
        file, line = _split_location(log.unavailable)
        return ReplayOutcome("unavailable", f"replay unavailable: {log.unavailable[:300]}", file, line)
    try:
        outputs = replay.replay(log, inputs, target=target, precise=precise)
    except replay.ReplayError as exc:
        file, line = _split_location(exc.location)
        return ReplayOutcome("invalid", f"the instruction log does not replay: {exc}"
                             + (f" (kernel line {exc.location})" if exc.location else ""), file, line)
    except Exception as exc:  # noqa: BLE001 - whatever a hostile log makes the replay meet is the log's fault
        return ReplayOutcome("invalid", f"the instruction log does not replay: {type(exc).__name__}: {str(exc)[:200]}")
    diff = replay.first_difference(reported, outputs)
    if diff is not None:
        file, line = _split_location(log.last_location())
        return ReplayOutcome("mismatch", f"the outputs the kernel's process reported are not what its instructions "
                                         f"compute: {diff.describe()}", file, line)
    return ReplayOutcome("exact", f"{log.count} instructions replayed; every output equal bit for bit",
                         data_dependent=log.data_dependent, log=log, data=data)


def replay_borrowed(first: ReplayOutcome | None, inputs: list[np.ndarray], reported: dict[str, np.ndarray], *,
                    target: str, precise: bool) -> ReplayOutcome:
    """An unrecorded launch's check: the log another seed recorded (and that replayed exactly on its own
    inputs), replayed here on this launch's inputs, must give its reported outputs bit for bit. Then those
    outputs are what one recorded instruction stream computes on these inputs, as stage 1 requires
    (`exact`, carrying that log). Anything else is `retry`: the seed is launched again, recorded, and judged
    on its own log as every seed was (an instruction stream that depends on the input values, a log that
    does not replay exactly, a launch that reported other outputs): never a pass, never a verdict."""
    from nkitui.emulator import replay

    if first is None or first.status != "exact" or first.log is None:
        return ReplayOutcome("retry", "no other seed's log replayed exactly")
    log = first.log
    try:
        outputs = replay.replay(log, inputs, target=target, precise=precise)
    except Exception as exc:  # noqa: BLE001 - Diverged, ReplayError, whatever: this seed is recorded after all
        return ReplayOutcome("retry", f"another seed's log does not replay on these inputs ({type(exc).__name__})")
    if replay.first_difference(reported, outputs) is not None:
        return ReplayOutcome("retry", "another seed's log does not give these outputs")
    return ReplayOutcome("exact", f"{log.count} instructions replayed (the log recorded on another seed); every "
                                  "output equal bit for bit", data_dependent=log.data_dependent, log=log)


def _split_location(text: str) -> tuple[str | None, int | None]:
    """(file, line) of a trailing 'file:line' in `text`, else (None, None)."""
    head, _, tail = text.rpartition(":")
    if not tail.isdigit():
        return None, None
    file = head.rsplit(" at ", 1)[-1].strip() or None
    return file, int(tail)


def _launch_state(state: Any) -> list[str]:
    """The launch-state audit's words (nkitui.executor.untrusted.launchstate), checked: a reply without it is
    a process that did not audit its launch, which counts as state left behind."""
    if not isinstance(state, list) or not all(isinstance(s, str) for s in state):
        return ["the kernel's process sent no account of the state its launch left (its launch-state audit)"]
    return [s[:200] for s in state[:8]]


def _host_compute(provenance: Any, names: list[str]) -> str | None:
    """None when every output has device provenance, else why not (missing provenance counts as none)."""
    if not isinstance(provenance, dict):
        return "the kernel's process reported no device provenance for its outputs"
    for name in names:
        p = provenance.get(name)
        if not isinstance(p, dict) or p.get("device") is not True:
            why = p.get("why") if isinstance(p, dict) else None
            why = why if isinstance(why, str) else "no device provenance"
            return f"output `{name}` did not come out of the emulated device: {why[:300]}"
    return None


def _read_trace(folder: Path, name: str, root: Path | None = None, *, soon: bool = False) -> Any:
    """The kernel process's trace: a Trace (binary form), a dict (JSON form, or {"error": why}), or None.
    `root`: the child's scratch folder (`folder` beneath it): no link below it is followed, no FIFO waited
    on, at most MAX_TRACE_BYTES read (nkitui.executor.workspace.read_beneath).
    With `soon`, the binary form's bytes are read now and unpacked on a thread (a PendingTrace): the
    unpack of a large trace (~0.5-1 s, one Python object per instruction) then overlaps the kernel
    process's next launches instead of holding them up."""
    if "/" in name or name in ("", ".", ".."):
        return None
    path = folder / name
    try:
        from nkitui.executor.workspace import read_beneath

        anchor = root if root is not None and path.is_relative_to(root) else path.parent
        raw = read_beneath(anchor, path.relative_to(anchor), max_bytes=MAX_TRACE_BYTES)
        if name.endswith(".bin"):  # the compact form (nkitui.emulator.tracepack), checked as it is read
            return PendingTrace(raw) if soon else _unpack(raw)
        text = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        return None
    return text if isinstance(text, dict) else None


def _unpack(data: bytes) -> Any:
    from nkitui.emulator import tracepack

    try:
        return tracepack.unpack(data)
    except tracepack.TraceFormatError as exc:
        return {"error": str(exc)}


class PendingTrace:
    """A binary trace being unpacked on a thread of the evaluator; `result()` waits for it and gives
    what _read_trace gives (a Trace, or {"error": why}). The bytes were read before the request's
    folder could be forgotten; nothing of the kernel's process takes part in the unpack."""

    def __init__(self, data: bytes) -> None:
        import threading

        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(data,), name="nkitui-trace-unpack", daemon=True)
        self._thread.start()

    def _run(self, data: bytes) -> None:
        try:
            self._value = _unpack(data)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def entry_location(task: Any) -> tuple[str | None, int | None]:
    """Where the kernel file makes its entry point what it is, read with `ast` (no code runs): the
    last top-level statement binding the entry's name; for a function, its last `return`."""
    entry = task.kernel
    if entry is None:
        return None, None
    rel = task.rel(entry.path) or os.path.basename(str(entry.path))
    try:
        tree = pyast.parse(Path(entry.path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return rel, None
    line: int | None = None
    node_for_line: ast.AST | None = None
    for node in tree.body:
        bound = _binds(node, entry.name)
        if bound:
            node_for_line = node
            line = node.lineno
    if isinstance(node_for_line, (ast.FunctionDef, ast.AsyncFunctionDef)):
        returns = [n.lineno for n in ast.walk(node_for_line) if isinstance(n, ast.Return) and n.value is not None]
        if returns:
            line = max(returns)
    return rel, line


def _binds(node: ast.stmt, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return isinstance(node.target, ast.Name) and node.target.id == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    return False


def output_dtype_findings(task: Any, outputs: dict[str, np.ndarray]) -> list[Any]:
    """A finding per output the kernel returned in another dtype than the manifest declares: the
    values are compared as returned, so a result rounded to a narrower dtype can still pass a loose
    tolerance while the caller gets the wrong type."""
    from nkitui.evaluate.numerics import findings as rules
    from nkitui.task.dtypes import numpy_dtype

    found = []
    nki_file = task.rel(task.kernel.path) if task.kernel is not None else None
    for spec in task.outputs:
        got, declared = np.asarray(outputs[spec.name]).dtype, numpy_dtype(spec.dtype)
        if got == declared:
            continue
        message = (f"The kernel returned output `{spec.name}` as {got.name}; the manifest declares {spec.dtype}. "
                   f"nkitui compares the values as returned, so the tolerance judged {got.name} values, and a "
                   f"caller expecting {spec.dtype} gets another dtype. Allocate the output with dtype "
                   f"{spec.dtype} (e.g. nl.ndarray(shape, dtype=nl.{spec.dtype}, buffer=nl.shared_hbm)), or "
                   "correct the manifest if the port is right.")
        found.append(rules.numerics_finding(
            rules.OUTPUT_DTYPE, "high" if got.itemsize < declared.itemsize else "medium",
            f"`{spec.name}` is returned as {got.name}, declared {spec.dtype}", message,
            data={"output": spec.name, "returned": got.name, "declared": spec.dtype}, file=nki_file))
    return found

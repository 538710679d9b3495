"""One evaluation of a task, in the trusted evaluator: the worker entry `nkitui.evaluate.pipeline.session:run_job`.

This process never imports task code. It reads the manifest, makes every input set, and hands them
to two untrusted children (nkitui.executor.untrusted), each with its own copy of the task:

  reference child   the task's reference, on every input set the audit needs; it has answered and
                    ended before the kernel's code is imported, so nothing the kernel does can reach it
  kernel child      the port, on the seeds' inputs, then on the trials', precision's and goldens'
                    (a second one runs the mutants, when asked)

and it computes every metric, check and the status itself, from the raw outputs they return.

Phases (each reported with its duration; one that cannot happen is "skipped" with the reason):

  load       read task.toml, pick seeds and target, choose the backend, start both children
  static     static findings on the port (nkitui.analysis), when enabled
  reference  the reference on the seeds, the partial-sum magnitudes, the adversarial inputs (built
             from its answers) and the goldens' inputs; then the reference process ends
  compile    the kernel process imports (or compiles) the port
  run        the port on every seed; outputs checked (shape, dtype, device provenance)
  compare    per seed and output: metrics in float64 under the task's tolerance, tolerance advice,
             failure diagnosis and tolerance sanity findings
  trials     adversarial inputs, when enabled
  precision  precise off vs on, when the backend can switch
  goldens    the recorded GPU outputs (when the task has goldens.npz)
  mutants    mutation testing of the tolerance (opt-in)
  profile    the cost model on the instruction trace, or hardware timing plus the profiler's summary

The run result (built here, from the evidence) goes out as the last event; the worker's exit code
is the CONTRACT's (0 passed, 1 a check failed, 2 invalid).

Imports: what this module imports at the top is paid before the first phase event, so only the
result and event types are; numpy, the task model and each phase's machinery come in inside the
phase that needs them.
"""

from __future__ import annotations

import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from nkitui.common import units
from nkitui.evaluate.run.result import Check, PhaseRecord, RunError, RunResult, SeedResult
from nkitui.executor.context import PhaseFailed, WorkerContext
from nkitui.executor.events import BackendEvent, ErrorEvent

if TYPE_CHECKING:
    import numpy as np

    from nkitui.common.findings import Finding
    from nkitui.evaluate.numerics.audit import NumericsAuditor
    from nkitui.evaluate.options import EvaluationOptions
    from nkitui.evaluate.pipeline.children import UntrustedChild
    from nkitui.evaluate.pipeline.freshstage import FreshStage
    from nkitui.evaluate.pipeline.kernel import KernelProcess

# The human-readable log line naming the chosen backend (the typed BackendEvent carries the same).
BACKEND_LINE = "backend: {name} — {reason}"
# kernel processes forked at the start on the emulator, one per seed (more seeds start new interpreters)
MAX_FORKED_KERNELS = 8
# a first launch at least this long starts a spare kernel process for the later phases' launches
SPARE_MIN_LAUNCH_S = 0.75
SPARE_MIN_CPU_SHARE = 0.6  # of the first launch's wall time its process had a core: below it, the machine is busy
# reference processes: a request for several input sets is split across them (ReferencePool), one per core up to this,
# for a task whose inputs and outputs hold at least REFERENCE_POOL_MIN_ELEMENTS elements: below that one set's work is
# too small to pay for another process's fork, confinement and import of the reference (measured: +7-10% CPU and a
# few percent of wall time on the small bundled tasks, 0.2-0.4 s saved on the large ones)
MAX_REFERENCE_PROCESSES = 2
REFERENCE_POOL_MIN_ELEMENTS = 500_000


def spare_pays(elapsed_s: float, cpu_s: float | None) -> bool:
    """Whether a spare kernel process can win time: the first launch was slow because it computed (it had a
    core most of its wall time), not because the machine's cores were busy (then the spare's interpreter and
    launches only take CPU from the rest of the check)."""
    if cpu_s is None or elapsed_s <= 0:
        return True
    return cpu_s >= SPARE_MIN_LAUNCH_S * SPARE_MIN_CPU_SHARE and cpu_s / elapsed_s >= SPARE_MIN_CPU_SHARE
CONTRACT_PHASES = ("load", "compile", "run", "reference", "compare", "profile")
MUTANT_DIR = ".nkitui-mutants"
MUTANT_RESPAWNS = 3
MAX_COPY_BYTES = 4 << 30  # an output copied for the timed re-check (the kernel wrote it; its reader checks it again)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Stop(PhaseFailed):
    """End the evaluation early with a status and the error that explains it."""

    def __init__(self, status: str, error: ErrorEvent, *, reported: bool = False):
        super().__init__(error)
        self.status = status
        self.reported = reported  # the error event went out already (e.g. a seed's failure): not sent twice


def run_job(payload: dict[str, Any], ctx: WorkerContext) -> int:
    """Worker entry point (see nkitui.executor.worker)."""
    return EvaluationSession(payload, ctx).run()


def _error_event(d: dict[str, Any]) -> ErrorEvent:
    return ErrorEvent(kind=d["kind"], message=d["message"], file=d.get("file"), line=d.get("line"),
                      traceback=d.get("traceback", ""))


def _run_error(err: ErrorEvent | dict[str, Any]) -> RunError:
    if isinstance(err, ErrorEvent):
        return RunError(err.kind, err.message, err.file, err.line, err.traceback)
    return RunError(err["kind"], err["message"], err.get("file"), err.get("line"), err.get("traceback", ""))


@dataclass
class _SeedLaunches:
    """The run phase's state across its seeds' launches."""

    errors: list[dict[str, Any]]
    host: list[str]
    pending: list[tuple[int, Any]]  # (seed, Future of its ReplayOutcome)
    replayer: Any  # the replay thread (a one-worker ThreadPoolExecutor)
    logged: Any = None  # the Future of the first recorded log's outcome (the later seeds replay that log)
    again: bool = False  # launching seeds again (recorded), after the first pass


class EvaluationSession:
    def __init__(self, payload: dict[str, Any], ctx: WorkerContext) -> None:
        from nkitui.common.codec import CodecError, decode
        from nkitui.evaluate.options import EvaluationOptions

        self.ctx = ctx
        self.request_error: str | None = None
        try:
            self.options: EvaluationOptions = decode(EvaluationOptions, (payload or {}).get("options", {}), strict=True)
        except CodecError as exc:
            self.options, self.request_error = EvaluationOptions(), f"the evaluation options are invalid: {exc}"
        self.python_path = [str(p) for p in (payload or {}).get("python_path", []) if isinstance(p, str)]
        self.started = time.perf_counter()
        from nkitui.executor.limits import Limits

        self.result = RunResult(
            run_id=ctx.run_id, task_id="", status="internal-error", created_at=utc_now(),
            backend_requested=self.options.backend, limits=Limits.from_dict(ctx.limits), precise=self.options.precise,
            notes=list(ctx.notes),
        )
        self.confinement: dict[str, dict[str, Any]] = {}
        self.findings: list[Finding] = []
        self.checks: list[Check] = []
        self.task: Any = None
        self.seeds: list[int] = []
        self.choice: Any = None
        self.choice_error: ErrorEvent | None = None
        self.probe: Any = None
        self.reference_child: UntrustedChild | None = None  # the first of reference_children
        self.reference_children: list[UntrustedChild] = []
        self.kernel_child: UntrustedChild | None = None
        # kernel processes forked beside the first, one per later seed, with their load request's id (see _seed_child)
        self.fresh_kernels: list[tuple[UntrustedChild, str | None]] = []
        self._closing: list[UntrustedChild] = []  # later seeds' processes that launched, to be ended (_seed_done)
        self.replay_helper: Any = None  # ReplayHelper: a trusted process replaying every other judging launch
        self._remote_replays: Any = None  # the thread that waits on it (a ThreadPoolExecutor of one)
        self._seed_children: dict[int, UntrustedChild] = {}
        self.kernel: KernelProcess | None = None
        self.children: list[UntrustedChild] = []
        self.auditor: NumericsAuditor | None = None
        self.outputs: dict[int, dict[str, np.ndarray]] = {}  # natural layout, device outputs only
        self.seed_results: dict[int, SeedResult] = {}
        self.trace_json: Any = None  # the first seed's trace: a Trace, or its JSON form
        self.first_seed_run: Any = None  # the KernelRun of the first seed that ran (kept for a recheck)
        self._spare_pending: Any = None  # (first KernelRun, Future of its replay): the spare, decided by the replay
        self._stage2: FreshStage | None = None  # replay stage 2 (freshstage.py), made on first use
        self.backend_versions: dict[str, Any] = {}
        self._golden_error = ""
        self._reference_asked: tuple[Any, dict[str, Any]] | None = None  # (thread, its answer or error)
        self._switch_interval = sys.getswitchinterval()
        self._warm: Any = None  # the thread importing what the later phases need (_warm_imports)
        self._done_phases: set[str] = set()

    # -- orchestration ---------------------------------------------------------------------------
    def run(self) -> int:
        steps = [
            ("load", self._load), ("static", self._static), ("reference", self._reference), ("compile", self._compile),
            ("run", self._run), ("compare", self._compare), ("trials", self._trials), ("precision", self._precision),
            ("goldens", self._goldens), ("mutants", self._mutants), ("profile", self._profile),
        ]
        try:
            try:
                for _name, step in steps:
                    step()
                self._unverified_judging()
                self._stateful_launches()
                self.result.status = "passed" if all(c.passed is not False for c in self.checks) else "failed"
            except Stop as stop:
                self.result.status = stop.status
                self.result.error = _run_error(stop.error)
                if not stop.reported:
                    self.ctx.error(stop.error)
                for name, _ in steps:
                    if name not in self._done_phases and name in CONTRACT_PHASES:
                        with self.phase(name) as ph:
                            ph.skip(f"not reached: {stop.error.message}")
            self._close_children()
            self._finish()
        finally:
            for child in self.children:  # a cancel or a timeout: nothing of the task may outlive the run
                child.kill()
            if self.replay_helper is not None:
                self.replay_helper.close()
        self.ctx.result(self.result.to_dict())
        return self.result.exit_code

    def _unverified_judging(self) -> None:
        """Judging launches (trials, precision, goldens) whose stream branched on device values that differ on their
        inputs were launched, and their outputs are the kernel process's word, not what the verified log computes.
        A kernel can choose where to diverge (a device flag that holds on the seeds' and the fresh inputs, not on a
        trial's huge or non-finite ones) and answer there from the host: red team, round 9, PASSED. A check that
        passed on such launches is therefore not proven (the evidence rule makes the run an internal-error naming
        why); one that failed stays failed."""
        unverified = self.kernel.unverified if self.kernel is not None else []
        if not unverified:
            return
        by_check: dict[str, list[str]] = {}
        for label, why in unverified:
            cid = "precision" if label.startswith("precision") else "goldens" if "goldens" in label else "trials"
            by_check.setdefault(cid, []).append(f"{label}: {why}")
        for cid, launches in by_check.items():
            check = next((c for c in self.checks if c.id == cid), None)
            if check is None or check.passed is not True:
                continue
            text = (f"{len(launches)} launch(es) diverged from the instruction log both replay stages verified (the "
                    f"kernel's process branched on device values that differ on these inputs), so their outputs are "
                    f"its process's word, not what its instructions compute: not proven ({'; '.join(launches)[:300]})")
            self.result.notes.append(f"{cid}: {text}"[:700])
            self.ctx.log(f"{cid}: {text}"[:700], level="warning")
            self._amend_check(cid, None, f"{check.detail}; {text}")

    def _stateful_launches(self) -> None:
        """Launches that left state a later launch in the same process could read (the launch-state audit in the
        kernel's process: the task's globals, attributes set on functions or modules, files in scratch, descriptors,
        the environment, ...). Every seed is launched in a process of its own, so each launch nkitui judged was a
        first launch; a kernel that keeps state is not proven beyond it: its fourth call in one process may compute
        something else (red team, round 9c: a kernel counting its launches in a module-level list PASSED). The
        `kernel-runs` check is not proven then (the evidence rule makes a run that passed everything else an
        internal-error naming what changed); one that failed stays failed."""
        if self.kernel is not None:
            self.kernel.settle()
        stateful = self.kernel.stateful if self.kernel is not None else []
        if not stateful:
            return
        what, changes = stateful[0]
        what = what.removeprefix("the kernel failed on ")  # the launch's label: "seed 3", "trial large"
        where = self._kernel_file()
        text = (f"{len(stateful)} launch(es) left state a later launch in the same process could read ({what}: "
                f"{'; '.join(changes[:4])}): the kernel keeps state across launches, so only its first launch in a "
                "process was judged: not proven")
        self.findings.append(_launch_state_finding(what, changes, where))
        self.result.notes.append(f"kernel-runs: {text}"[:700])
        self.ctx.log(text[:700], level="warning")
        check = next((c for c in self.checks if c.id == "kernel-runs"), None)
        if check is not None and check.passed is True:
            self._amend_check("kernel-runs", None, f"{check.detail}; {text}")

    def _kernel_file(self) -> str | None:
        task = self.task
        return task.rel(task.kernel.path) if task is not None and task.kernel is not None else None

    @contextmanager
    def phase(self, name: str) -> Iterator[Any]:
        self._done_phases.add(name)
        with self.ctx.phase(name) as handle:
            yield handle

    def _warm_imports_done(self) -> None:
        """Wait for the warm-import thread before this thread imports anything it might be importing:
        two threads importing one package whose __init__ imports its own submodules (nkitui.perf) can
        hand one of them the half-made module ("cannot import name 'estimate' from partially
        initialized module"), which ended runs as internal errors now and then."""
        warm, self._warm = self._warm, None
        if warm is not None:
            warm.join(timeout=120)  # imports only; a stuck import is the phase's to report

    def _close_children(self) -> None:
        self._warm_imports_done()  # a run stopped early goes on to _finish, which imports the cost model
        asked = self._reference_asked
        if asked is not None and asked[0].is_alive() and self.reference_child is not None:
            # the run stopped before the reference phase: end the processes its thread is waiting on
            for ref_child in self.reference_children:
                ref_child.kill()
            asked[0].join(timeout=30)
        if self.kernel is not None and self.kernel.spare is not None:
            self.kernel.spare.stop()
            self.ctx.log(f"spare kernel process: {self.kernel.spare.ran} launch(es) run ahead", level="debug")
        if self.kernel is not None and self.kernel.answered:
            self.ctx.log(f"{self.kernel.answered} judging launch(es) answered by the verified instruction log's replay "
                         "(no launch)", level="debug")
        if self.kernel is not None:  # a run stopped early: the audits still owed are read (not taken for forgeries);
            from nkitui.evaluate.pipeline.children import CLOSE_GRACE_S  # a process that does not answer in time is killed

            self.kernel.settle(grace_s=CLOSE_GRACE_S)
        if self._remote_replays is not None:
            self._remote_replays.shutdown(wait=True)
        if self.replay_helper is not None:
            if self.replay_helper.replays:
                self.ctx.log(f"replay helper: {self.replay_helper.replays} judging launch(es) replayed there",
                             level="debug")
            self.replay_helper.close()
        for child in self.children:
            child.close()

    # -- children -------------------------------------------------------------------------------
    def _child_limits(self) -> Any:
        from nkitui.executor.limits import Limits

        limits = Limits.from_dict(self.ctx.limits)
        # no wall clock of their own: the run's timeout stops the evaluator, which kills them
        from dataclasses import replace

        return replace(limits, timeout_s=0, cpu_s=limits.effective_cpu_s)  # disk, files: the run's own

    def _spawn(self, role: str, payload: dict[str, Any] | None = None) -> UntrustedChild:
        return self._spawn_many([(role, payload)])[0]

    def _spawn_many(self, wanted: list[tuple[str, dict[str, Any] | None]]) -> list[UntrustedChild]:
        """Start untrusted children (forked from this process while it has one thread, see
        nkitui.executor.forked; else new interpreters)."""
        from nkitui.evaluate.pipeline.children import KERNEL_ENTRY, REFERENCE_ENTRY, UntrustedChild
        from nkitui.executor.spawn import UntrustedSpec, spawn_untrusted_many

        from nkitui.executor import forked

        why_not = forked.why_not()
        specs = []
        for role, payload in wanted:
            entry = REFERENCE_ENTRY if role == "reference" else KERNEL_ENTRY
            allow = bool(role != "reference" and self.choice is not None and self.choice.name != "emulator")
            specs.append(UntrustedSpec(entry, payload or {}, self.ctx.workspace, self._child_limits(),
                                       allow_subprocess=allow, python_path=self.python_path))
        children = []
        for (role, _), handle in zip(wanted, spawn_untrusted_many(specs)):
            child = UntrustedChild(role if role == "reference" else "kernel", handle, self.ctx)
            self.children.append(child)
            children.append(child)
        roles = " and ".join(f"{c.role} process" for c in children)
        self.ctx.log(f"{roles}: forked from the evaluator" if why_not is None
                     else f"{roles}: started as new interpreters ({why_not})", level="debug")
        return children

    def _kernel_payload(self) -> dict[str, Any]:
        from nkitui.common.codec import encode

        return {"backend": self.choice.name, "reason": self.choice.reason, "target": self.result.target,
                "probe": self.probe.to_dict(), "timing": encode(self.options.timing) if self.options.timing else None}

    def _gone(self, gone: Any, phase_note: Any = None) -> Stop:
        """A child died: the run stops with the status its death means (crashed, memory-limit, ...)."""
        if phase_note is not None:
            phase_note.detail = gone.error.message
        return Stop(gone.status, gone.error)

    # -- phases ----------------------------------------------------------------------------------
    def _load(self) -> None:
        with self.phase("load") as ph:
            from nkitui.task import TaskError, load_task

            if self.request_error:
                raise Stop("invalid", ErrorEvent(kind="request-invalid", message=self.request_error))
            try:
                task = load_task(self.ctx.workspace)
            except TaskError as exc:
                raise Stop("invalid", ErrorEvent(kind="task-invalid", message=self.ctx.scrub(str(exc)), file="task.toml")) from None
            self.task = task
            r = self.result
            r.task_id, r.task_title = task.id, task.title
            if not task.runnable:
                missing = [what for what, ok in (("kernel.entry", task.kernel), ("sources.reference", task.sources.reference),
                                                 ("[[inputs]]", task.inputs), ("[[outputs]]", task.outputs)) if not ok]
                raise Stop("invalid", ErrorEvent(
                    kind="task-invalid",
                    message=f"the task cannot run: it declares no {', '.join(missing)} (run `nkitui task init` to draft a task.toml)",
                    file="task.toml"))
            self.seeds = self.options.resolve_seeds(task.seeds)
            if not self.seeds:
                raise Stop("invalid", ErrorEvent(kind="request-invalid", message="no seeds to run (give --seeds N with N >= 1)"))
            r.seeds = list(self.seeds)
            r.target = self.options.target or task.target
            r.tolerances = {o.name: o.tolerance for o in task.outputs if o.tolerance is not None}
            for w in task.warnings:
                self.ctx.log(self.ctx.scrub(f"task warning: {w}"), level="warning")
            self._choose_backend()
            if self.choice_error is not None:  # the request cannot be served: no child is started for nothing
                raise Stop("invalid", self.choice_error)
            # both children start now, forked from this process where it can (nkitui.executor.forked):
            # what they both need is imported first, once; their task imports overlap with the
            # static analysis
            narrow = any(spec.dtype in ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")
                         for spec in (*task.inputs, *task.outputs)) or _names_narrow_types(task.root)
            _shared_imports(narrow, emulated=self.choice is not None and self.choice.name == "emulator")
            elements = sum(spec.size for spec in (*task.inputs, *task.outputs))
            references = max(1, min(MAX_REFERENCE_PROCESSES, os.cpu_count() or 1)) \
                if elements >= REFERENCE_POOL_MIN_ELEMENTS else 1
            wanted: list[tuple[str, dict[str, Any] | None]] = [("reference", None)] * references
            if self.choice is not None:
                # one kernel process per seed on the emulator: each seed is the first launch of a process of its
                # own (a kernel counting its launches in module state cannot tell the seeds apart; see _seed_child)
                kernels = min(len(self.seeds), MAX_FORKED_KERNELS) if self.choice.name == "emulator" else 1
                wanted += [("kernel", self._kernel_payload())] * kernels
            if self.choice is not None and self.choice.name == "emulator":
                # the second trusted process for the judging launches' replays (replayhelper.py): forked first, so
                # it holds no descriptor of an untrusted child
                from nkitui.evaluate.pipeline.replayhelper import ReplayHelper

                self.replay_helper = ReplayHelper.fork()
            started = self._spawn_many(wanted)
            self.reference_children = started[:references]
            self.reference_child = started[0]
            self.kernel_child = started[references] if len(started) > references else None
            self.fresh_kernels = [(child, None) for child in started[references + 1:]]
            self._warm = _warm_imports()
            self._start_reference()
            ph.detail = f"{task.id}: {len(task.inputs)} input(s), {len(task.outputs)} output(s), seeds {self.seeds}, target {r.target}"

    def _choose_backend(self) -> None:
        from nkitui.executor.backends import BackendUnavailable, choose_backend
        from nkitui.executor.backends.detect import probe_environment

        self.probe = probe_environment()
        try:
            self.choice = choose_backend(self.options.backend, self.probe, self.task.kernel.namespace)
        except (BackendUnavailable, ValueError) as exc:
            self.choice_error = ErrorEvent(kind="backend-unavailable", message=str(exc))

    def _static(self) -> None:
        if not self.options.static:
            return
        with self.phase("static") as ph:
            try:
                from nkitui.analysis import analyze_task
            except ImportError:
                ph.skip("static analysis is not available in this build of nkitui")
                return
            report = analyze_task(self.task)
            found = list(getattr(report, "findings", []))
            self.findings.extend(found)
            ph.detail = f"{len(found)} finding(s)"

    def _start_reference(self) -> None:
        """Start asking the reference (its process was just forked) on a thread of the evaluator: the
        reference process computes while the evaluator runs the static analysis; the `reference`
        phase waits for the answers. Nothing of the kernel's code runs before that phase has ended."""
        import threading

        box: dict[str, Any] = {}

        def ask() -> None:
            try:
                box["answer"] = self._ask_reference()
            except BaseException as exc:  # noqa: BLE001 - raised again by the reference phase
                box["error"] = exc

        thread = threading.Thread(target=ask, name="nkitui-reference", daemon=True)
        # the static analysis holds the GIL in pure Python: a short switch interval lets this thread's
        # many small steps (each event, each array read) through without waiting 5 ms for each
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, 0.0005))
        thread.start()
        self._reference_asked = (thread, box)

    def _ask_reference(self) -> tuple[Any, Any, Any]:
        """The reference's answers for the seeds and the adversarial search (recorded), and the
        golden data's problem if any; run by _start_reference's thread."""
        from nkitui.evaluate.numerics.audit import AuditOptions, NumericsAuditor
        from nkitui.evaluate.numerics.inputs import make_inputs
        from nkitui.evaluate.numerics.recorded import RecordedReference
        from nkitui.evaluate.pipeline.reference import ReferencePool, ReferenceProcess

        task = self.task
        child = self.reference_child
        assert child is not None
        goldens, golden_finding = self._load_goldens()
        options = AuditOptions(trials=self.options.trials, adversarial=True, precision=self.options.precision,
                               goldens=self.options.goldens, mutants=self.options.mutants,
                               max_mutants_per_operator=self.options.max_mutants_per_operator,
                               precise=self.options.precise)
        self.confinement["reference"] = child.ready()
        for other in self.reference_children[1:]:
            other.ready()
        process = ReferencePool([ReferenceProcess(c, task) for c in self.reference_children])
        process.load()
        reference = RecordedReference(process)
        self.auditor = NumericsAuditor(task.outputs, reference, lambda s: make_inputs(task, s), self.seeds,
                                       task.op, options, goldens=goldens)
        self.auditor.ask_reference(announce=process.announce)
        return reference, golden_finding, process

    def _reference(self) -> None:
        with self.phase("reference") as ph:
            from nkitui.evaluate.pipeline.children import ChildGone
            from nkitui.evaluate.pipeline.reference import ReferenceFailed

            child = self.reference_child
            assert child is not None
            if self._reference_asked is None:
                self._start_reference()
            assert self._reference_asked is not None
            thread, box = self._reference_asked
            thread.join()
            sys.setswitchinterval(self._switch_interval)
            self._warm_imports_done()
            if "error" in box:
                error_raised = box["error"]
                if isinstance(error_raised, ReferenceFailed):
                    raise Stop("invalid", _error_event(error_raised.error)) from None
                if isinstance(error_raised, ChildGone):
                    error = error_raised.error
                    raise Stop("invalid", ErrorEvent("reference-error", f"the reference's process ended: {error.message}",
                                                     error.file, error.line)) from None
                raise error_raised
            reference, golden_finding, _process = box["answer"]
            if golden_finding is not None:
                self.findings.append(golden_finding)
            if self.choice is not None and self.choice.name == "emulator" and self.auditor is not None:
                self.stage2.ask_reference(reference, self.auditor.inputs, self.auditor.references)
            reference.seal()  # the judging steps replay these answers; the processes end here
            for ref_child in self.reference_children:
                ref_child.close()
            self.ctx.log(f"reference: {reference.live_calls} call(s) answered, then its process"
                         f"{'es' if len(self.reference_children) > 1 else ''} ended")
            assert self.auditor is not None
            cases = len(self.auditor.cases)
            ph.detail = f"{len(self.seeds)} seed(s)" + (f", {cases} adversarial input set(s)" if cases else "")

    def _load_goldens(self) -> tuple[Any, Any]:
        """The golden data (None when not asked for or unusable) and the finding about unusable data."""
        if not self.options.goldens or self.task.goldens is None:
            return None, None
        from nkitui.evaluate.numerics.goldens import GoldenFormatError, golden_error_finding, load_goldens

        rel = self.task.rel(self.task.goldens)
        try:
            return load_goldens(self.task.goldens, self.task.inputs, self.task.outputs, shown_as=rel), None
        except GoldenFormatError as exc:
            self._golden_error = str(exc)
            return None, golden_error_finding(str(exc), rel)

    def _compile(self) -> None:
        with self.phase("compile") as ph:
            from nkitui.evaluate.pipeline.children import ChildGone
            from nkitui.evaluate.pipeline.kernel import KernelProcess, error_from

            if self.choice_error is not None:
                raise Stop("invalid", self.choice_error)
            self.result.backend, self.result.backend_reason = self.choice.name, self.choice.reason
            self.ctx.emit(BackendEvent(self.choice.name, self.choice.reason, self.options.backend))
            self.ctx.log(BACKEND_LINE.format(name=self.choice.name, reason=self.choice.reason))
            self._integrity()  # read-only: the task's code as text, while the kernel process starts
            child = self.kernel_child
            assert child is not None
            try:
                self.confinement["kernel"] = child.ready()
                self.kernel = KernelProcess(child, self.task, device_provenance=self.choice.name == "emulator",
                                            state_later=True,
                                            target=self.result.target or "trn2")
                # the later seeds' processes import the kernel now, beside this one (their replies are read when
                # their seed is launched)
                self.fresh_kernels = [(fresh, fresh.ask("load")) for fresh, _rid in self.fresh_kernels]
                reply = self.kernel.load()
            except ChildGone as gone:
                self.checks.append(Check("kernel-runs", "the kernel imports and runs on every seed", False, gone.error.message))
                raise self._gone(gone, ph) from None
            if reply.get("error") is not None:
                error = error_from(reply["error"], "importing the kernel failed")
                if error["kind"] == "backend-unavailable":
                    raise Stop("invalid", _error_event(error))
                self.checks.append(Check("kernel-runs", "the kernel imports and runs on every seed", False, error["message"]))
                raise Stop("failed", _error_event(error))
            versions = reply.get("versions")
            if isinstance(versions, dict):
                self.backend_versions = versions
            label = reply.get("label") if isinstance(reply.get("label"), str) else self.task.kernel.spec
            ph.detail = f"{self.choice.name}: {label}"

    def _start_spare(self, first: Any, replayed: Any = None) -> None:
        """On the emulator, when the first seed's launch took long (SPARE_MIN_LAUNCH_S), start a second
        kernel process that runs the trials' and precision isolation's launches ahead, beside this one
        (nkitui.evaluate.pipeline.spare: only its successes are taken; the verdict is the same).
        `replayed`: the Future of that launch's replay. The spare is then decided once it is known
        (_spare_when_replayed): a log that will answer the judging launches by its replay needs none."""
        kernel = self.kernel
        if replayed is not None and kernel is not None and kernel.replay:
            self._spare_pending = (first, replayed)
            return
        self._spawn_spare(first)

    def _spare_when_replayed(self, wait: bool) -> None:
        """The spare decided by the first seed's replay (waiting for it with `wait`, else only when it is done):
        none when its log will answer the judging launches (KernelProcess's verified replay: exact, no
        data-dependence mark, nothing carried from the seed), else started as before (a stream that branches on
        device values still launches its judging inputs)."""
        from nkitui.evaluate.pipeline.kernel import replay_answers

        pending = self._spare_pending
        if pending is None or (not wait and not pending[1].done()):
            return
        self._spare_pending = None
        first, replayed = pending
        if replay_answers(replayed.result()):
            self.ctx.log("the first seed's log replayed exactly and reads no device values: the judging phases' "
                         "launches will be answered by its replay, no spare kernel process", level="debug")
            return
        self._spawn_spare(first)

    def _spawn_spare(self, first: Any) -> None:
        from nkitui.evaluate.pipeline.kernel import KernelProcess
        from nkitui.evaluate.pipeline.spare import SpareLaunches

        kernel, auditor, task = self.kernel, self.auditor, self.task
        if kernel is None or auditor is None or self.choice is None or self.choice.name != "emulator":
            return
        if first.elapsed_s is None or first.elapsed_s < SPARE_MIN_LAUNCH_S or kernel.spare is not None:
            return
        if not spare_pays(first.elapsed_s, first.cpu_s):
            self.ctx.log(f"the first launch took {first.elapsed_s:.1f} s but had a core for only {first.cpu_s:.1f} s "
                         "of it: no spare kernel process (the machine has no idle core for it)", level="debug")
            return
        jobs = self._later_launches()
        if not jobs:
            return

        def spawn() -> Any:
            return self._spawn("kernel", self._kernel_payload())

        def prepare(child: Any) -> Any:
            child.ready()
            process = KernelProcess(child, task, device_provenance=True)
            reply = process.load()
            return None if reply.get("error") is not None else process

        kernel.spare = SpareLaunches(spawn, prepare, jobs)
        self.ctx.log(f"the first launch took {first.elapsed_s:.1f} s: a spare kernel process runs {len(jobs)} later "
                     "launch(es) ahead", level="debug")

    def _later_launches(self) -> list[tuple[Any, dict[str, Any], bool]]:
        """The launches the judging phases will ask for, in their order: (key, inputs, precise), the key
        being the one KernelProcess.runner looks them up by (the trials' adversarial cases, then precision
        isolation's fp32 launch on the first seed)."""
        from nkitui.evaluate.numerics.recorded import inputs_digest

        auditor = self.auditor
        if auditor is None:
            return []
        wanted: list[tuple[dict[str, Any], bool]] = []
        if self.options.trials:
            wanted += [(dict(case.inputs), self.options.precise) for case in auditor.cases]
        if self.options.precision and self.seeds[0] in auditor.inputs:
            wanted.append((dict(auditor.inputs[self.seeds[0]]), False))
        jobs: list[tuple[Any, dict[str, Any], bool]] = []
        for inputs, precise in wanted:
            key = (inputs_digest(inputs), precise)
            if all(key != k for k, _i, _p in jobs):
                jobs.append((key, inputs, precise))
        return jobs

    def _answer_judging_early(self, seeds: "_SeedLaunches") -> None:
        """Before the last seed's launch: when the first seed's log already replayed exactly and will answer the
        judging launches (replay_answers), queue their replays on the replay thread, which would otherwise wait
        for that launch (KernelProcess.answer_early: used only if that log is the one both stages verify)."""
        from nkitui.evaluate.pipeline.kernel import replay_answers

        kernel, logged = self.kernel, seeds.logged
        if kernel is None or not kernel.replay or logged is None or not logged.done():
            return
        outcome = logged.result()
        if not replay_answers(outcome):
            return
        helper, data = self.replay_helper, outcome.data
        for i, (key, inputs, precise) in enumerate(self._later_launches()):
            if helper is not None and data is not None and i % 2 == 1:  # every other one on the other core
                if self._remote_replays is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._remote_replays = ThreadPoolExecutor(1, thread_name_prefix="nkitui-replay-helper")
                self._remote_replays.submit(kernel.answer_early(outcome.log, key, inputs, precise,
                                                                helper.replayer(data)))
            else:
                seeds.replayer.submit(kernel.answer_early(outcome.log, key, inputs, precise))

    def _launch_ahead(self, pending: list[tuple[int, Any]]) -> None:
        """While the seeds' last replays run on the replay thread, the kernel process (otherwise idle until
        the trials ask) runs the first launch the judging phases will ask for (KernelProcess.run_ahead: only a
        success is taken, so the verdict and every error are the sequential order's). On the emulator only,
        and only when a replay is still running and the seeds all ran: a kernel that failed a seed is not
        judged further, and its trials need not be run before they are asked for."""
        kernel = self.kernel
        if kernel is None or not kernel.replay or self.choice is None or self.choice.name != "emulator":
            return
        if not self.outputs or len(self.outputs) != len(self.seeds) or all(f.done() for _s, f in pending):
            return
        from nkitui.evaluate.pipeline.kernel import replay_answers

        # the first seed's replay (queued first: done, or nearly): a log that will answer the judging launches
        # by its replay leaves nothing to launch ahead
        if pending and replay_answers(pending[0][1].result()):
            return
        jobs = self._later_launches()
        if not jobs:
            return
        key, inputs, precise = jobs[0]
        if kernel.spare is not None and not kernel.spare.claim(key):
            return  # the spare runs it (or already did)
        kernel.run_ahead(key, inputs, precise)

    def _integrity(self) -> None:
        """HACK-TAMPER, HACK-ENV-PROBE and the entry-point checks on the task's code (ast, nothing runs): the
        `integrity` check fails when the code reaches into the interpreter or nkitui, asks where it runs, or
        when the entry point is not the NKI kernel it names."""
        from nkitui.analysis import integrity_findings

        found = integrity_findings(self.task)
        known = {(f.rule, f.file, f.line, f.severity) for f in self.findings}
        self.findings.extend(f for f in found if (f.rule, f.file, f.line, f.severity) not in known)
        failing = [f for f in found if f.severity == "high"]
        shown = "; ".join(f"{f.rule} at {f.location}" for f in failing[:4])
        self.checks.append(Check("integrity", "the task's code does not reach into the interpreter or nkitui, does not "
                                              "ask where it runs, and its entry point is the NKI kernel", not failing,
                                 shown or "no introspection, no dynamic code, no environment probes, the entry point "
                                          "is an NKI kernel"))
        for f in found:
            self.ctx.log(f"{f.rule} at {f.location}: {f.title}", level="error" if f.severity == "high" else "warning")

    def _run(self) -> None:
        task = self.task
        with self.phase("run") as ph:
            from nkitui.evaluate.pipeline.children import ChildGone
            from nkitui.evaluate.pipeline.kernel import entry_location

            assert self.kernel is not None and self.auditor is not None
            errors: list[dict[str, Any]] = []
            host: list[str] = []
            replays: list[tuple[int, Any]] = []
            pending: list[tuple[int, Any]] = []
            from concurrent.futures import ThreadPoolExecutor

            replayer = ThreadPoolExecutor(1, thread_name_prefix="nkitui-replay")
            seeds = _SeedLaunches(errors, host, pending, replayer)
            for i, seed in enumerate(self.seeds):
                if i and i == len(self.seeds) - 1:
                    self._answer_judging_early(seeds)
                try:
                    stop = self._launch_seed(seed, seeds)
                except ChildGone as gone:
                    self.checks.append(Check("kernel-runs", "the kernel runs on every seed", False,
                                             f"{len(self.outputs)}/{len(self.seeds)} seeds ran; {gone.error.message}"))
                    raise self._gone(gone, ph) from None
                self.ctx.progress(i + 1, len(self.seeds), f"seed {seed}")
                if stop:
                    break
            self._first_kernel()
            self._spare_when_replayed(wait=True)
            self._launch_ahead(pending)
            self._close_seed_processes()
            replayer.shutdown(wait=True)
            if self._remote_replays is not None:
                self._remote_replays.shutdown(wait=True)
            # a seed another seed's log did not reproduce: launched again, recorded, and judged on its own log
            retry = [seed for seed, future in pending if future.result().status == "retry"]
            if retry:
                again: list[tuple[int, Any]] = []
                seeds.pending = again
                seeds.replayer = replayer = ThreadPoolExecutor(1, thread_name_prefix="nkitui-replay")
                seeds.logged, seeds.again = None, True
                for seed in retry:
                    self.outputs.pop(seed, None)
                    self.ctx.log(f"seed {seed}: the first seed's instruction log does not reproduce its outputs: "
                                 "launched again, its own instructions recorded", level="debug")
                    try:
                        self._launch_seed(seed, seeds, record=True)
                    except ChildGone as gone:
                        self.checks.append(Check("kernel-runs", "the kernel runs on every seed", False,
                                                 f"{len(self.outputs)}/{len(self.seeds)} seeds ran; {gone.error.message}"))
                        raise self._gone(gone, ph) from None
                replayer.shutdown(wait=True)
                self._first_kernel()
                redone = dict(again)
                pending[:] = [(seed, redone.get(seed, future)) for seed, future in pending if seed not in retry or seed in redone]
            for seed, future in pending:
                outcome = future.result()
                replays.append((seed, outcome))
                if outcome.failed:  # the reported outputs are not what the instructions compute: not used
                    message = f"seed {seed}: {outcome.detail}"
                    self.ctx.log(message, level="error")
                    self.seed_results[seed] = SeedResult(seed, False, error=RunError(
                        "host-compute", message, outcome.file, outcome.line))
                    host.append(message)
                    self.outputs.pop(seed, None)
            ran = len(self.outputs) + len(host)
            self.checks.append(Check("kernel-runs", "the kernel runs on every seed", not errors,
                                     f"{ran}/{len(self.seeds)} seeds ran" + (f"; {errors[0]['message']}" if errors else "")))
            if self.kernel.device_provenance:
                self.checks.append(Check(
                    "device-outputs", "every output came out of the emulated device (HBM tensors its instructions wrote)",
                    (not host) if (host or self.outputs) else None,
                    "; ".join(host[:2]) if host else (f"{len(self.outputs)} seed(s): every output has device provenance"
                                                      if self.outputs else "no seed produced outputs")))
            if self.kernel.replay:
                self.stage2.replay_check(replays)
            ph.detail = f"{ran}/{len(self.seeds)} seeds ran" + (f", {len(host)} with host-computed outputs" if host else "")
            if errors or host:
                ph.fail(ph.detail)
            if not self.outputs:
                if host and not errors:
                    file, line = entry_location(task)
                    raise Stop("failed", ErrorEvent(kind="host-compute", message=host[0], file=file, line=line))
                first = errors[0] if errors else {}
                kind = first.get("kind", "kernel-error")
                status = "memory-limit" if kind == "memory-limit" else "failed"
                raise Stop(status, ErrorEvent(kind=kind, message=first.get("message", "the kernel produced no outputs"),
                                              file=first.get("file"), line=first.get("line"),
                                              traceback=first.get("traceback", "")), reported=bool(errors))

    def _launch_seed(self, seed: int, seeds: "_SeedLaunches", record: bool = False) -> bool:
        """One seed's launch (ChildGone propagates). The first seed that runs records its instruction log
        (replayed on the replay thread); a later seed's launch is not recorded: the first log is replayed on
        its inputs instead (KernelProcess.run's replay_with), and a seed it does not reproduce is launched
        again with `record` (see _run). True when no later seed should be launched (memory exhausted)."""
        from nkitui.evaluate.pipeline.kernel import entry_location, output_dtype_findings

        from nkitui.evaluate.pipeline.kernel import KernelRun

        assert self.kernel is not None and self.auditor is not None
        task = self.task
        inputs = self.auditor.inputs[seed]
        logged = seeds.logged
        borrow = None if record or logged is None else logged.result
        load_error = self._seed_child(seed)
        if load_error is not None:
            run = KernelRun(error=load_error)
        else:
            run = self.kernel.run(inputs, precise=self.options.precise, trace=self.trace_json is None,
                                  what=f"the kernel failed on seed {seed}", keep=self.first_seed_run is None,
                                  replay=True, replay_with=borrow)
        self._seed_done(seed)
        if run.error is not None:
            err = _error_event(run.error)
            self.ctx.error(err)
            self.seed_results[seed] = SeedResult(seed, False, error=_run_error(run.error))
            seeds.errors.append(run.error)
            return bool(run.error["kind"] == "memory-limit")  # the address space is exhausted; later seeds would fail the same way
        if run.host_compute is not None:
            file, line = entry_location(task)
            message = f"seed {seed}: {run.host_compute}" + (f" (the entry point is made at {file}:{line})" if line else "")
            self.ctx.log(message, level="error")
            self.seed_results[seed] = SeedResult(seed, False, error=RunError("host-compute", message, file, line))
            seeds.host.append(message)
            if len(seeds.host) == 1:
                self.findings.append(_host_compute_finding(run.host_compute, file, line))
            return False
        assert run.outputs is not None
        if run.replay_job is not None:  # replayed on a thread while the kernel runs the next seed
            future = seeds.replayer.submit(run.replay_job)
            seeds.pending.append((seed, future))
            if borrow is None and seeds.logged is None:
                seeds.logged = future
            if len(seeds.pending) == 1 and not seeds.again:  # stage 2 right behind the first seed's replay: it
                self.stage2.submit(seeds.replayer, seeds.pending, self.kernel.target)  # too overlaps the later
                # seeds' launches
        if self.trace_json is None and run.trace_json is not None:
            self.trace_json = run.trace_json
        if self.first_seed_run is None:
            self.first_seed_run = run
            self._start_spare(run, seeds.logged if borrow is None else None)
        else:
            self._spare_when_replayed(wait=False)
        self.outputs[seed] = run.outputs
        self.kernel.remember(inputs, self.options.precise, run.outputs)
        if len(self.outputs) == 1:  # the first seed that ran: is each output of its declared dtype?
            for finding in output_dtype_findings(task, run.outputs):
                self.auditor.add_findings([finding])
                self.ctx.log(finding.message, level="warning")
        elapsed = round(run.elapsed_s, 6) if run.elapsed_s is not None else None
        self.seed_results[seed] = SeedResult(seed, None, kernel_s=elapsed)
        self.ctx.log(f"seed {seed}: kernel ran" + (f" in {run.elapsed_s * 1e3:.1f} ms" if run.elapsed_s else ""))
        return False

    def _seed_child(self, seed: int) -> dict[str, Any] | None:
        """Point the kernel handle at `seed`'s own kernel process (red team round 9c, finding 1: a kernel that counts
        its launches in module state, a file or a descriptor was right on exactly the launches nkitui made). The first
        seed runs in the first kernel process; each later one in a process forked beside it from the evaluator (its
        own scratch copy, confined the same way, the kernel imported while the earlier seeds ran), so every seed's
        launch is the first launch of task code in its process, which ends after it (_seed_done). Past
        MAX_FORKED_KERNELS seeds a new interpreter is started. A seed launched again (recorded, see _run) runs in the
        first seed's process, and the launch-state audit vouches that the launch before left nothing there. The error
        dict when the process could not import the kernel; ChildGone when it died."""
        from nkitui.evaluate.pipeline.kernel import error_from

        kernel = self.kernel
        assert kernel is not None
        child = self._seed_children.get(seed)
        if child is None:
            if not self._seed_children:
                child, rid = self.kernel_child, None
            elif self.fresh_kernels:
                child, rid = self.fresh_kernels.pop(0)
            else:  # more seeds than forked processes: a new interpreter (the evaluator has threads now)
                child, rid = self._spawn("kernel", self._kernel_payload()), None
            assert child is not None
            self._seed_children[seed] = child
            if child is not self.kernel_child:
                child.ready()
                reply = child.answer(rid) if rid is not None else child.request("load")
                if reply.get("error") is not None:
                    return error_from(reply["error"], f"seed {seed}: importing the kernel in its own process failed")
        kernel.use(child)
        return None

    def _seed_done(self, seed: int) -> None:
        """A later seed's process has launched its one seed: it is ended once the next seed has launched, or at the
        end of the seeds (its pipes, disk watch and memory go with it; what it said stays with its UntrustedChild for
        the result), after it answers its launch-state audit. A seed launched again to be recorded
        runs in the first seed's process, after that process's own launch (the launch-state audit vouches for it)."""
        child = self._seed_children.get(seed)
        if child is None or child is self.kernel_child:
            return
        self._seed_children[seed] = self.kernel_child  # type: ignore[assignment]  # set: the first seed ran there
        self._close_seed_processes()  # the earlier seeds': they audited their launches while this one ran
        self._closing.append(child)

    def _close_seed_processes(self) -> None:
        """End the later seeds' processes that have launched: each first answers its launch-state audit (asked after
        its launch's reply, so it audits while the evaluator launches the next seed elsewhere)."""
        closing, self._closing = self._closing, []
        for child in closing:
            if self.kernel is not None:
                self.kernel.settle(child)
            child.close()

    def _first_kernel(self) -> None:
        """Back to the first seed's process: the judging phases' launches (those the verified log cannot answer)
        run there, after its one seed launch (the launch-state audit vouches that the launch left nothing)."""
        if self.kernel is not None and self.kernel_child is not None:
            self.kernel.use(self.kernel_child)

    @property
    def stage2(self) -> FreshStage:
        """Stage 2 of the replay (freshstage.py), made once the task and its seeds are known."""
        if self._stage2 is None:
            from nkitui.evaluate.pipeline.freshstage import FreshStage, Verdicts

            verdicts = Verdicts(self.checks, self.findings, self.result.notes, self.ctx.log)
            self._stage2 = FreshStage(self.task, self.seeds, self.outputs, verdicts, self.options.precise)
        return self._stage2

    @property
    def replay_outcomes(self) -> list[tuple[int, Any]]:
        """Stage 1's outcomes, (seed, ReplayOutcome) per replayed seed."""
        return self._stage2.replay_outcomes if self._stage2 is not None else []

    def _amend_check(self, cid: str, passed: Any, detail: str) -> None:
        for i, c in enumerate(self.checks):
            if c.id == cid:
                self.checks[i] = replace(c, passed=passed, detail=detail[:700])

    def _compare(self) -> None:
        task = self.task
        with self.phase("compare") as ph:
            assert self.auditor is not None
            per_output: dict[str, list[str]] = {o.name: [] for o in task.outputs}
            compared = 0
            self._bound_reduction_lengths()
            for seed in self.seeds:
                if seed not in self.outputs:
                    continue
                sr = self.seed_results[seed]
                comparison = self.auditor.compare(seed, self.outputs[seed])
                if comparison.error is not None:
                    self.seed_results[seed] = replace(sr, passed=False, error=RunError("shape-mismatch", comparison.error))
                    for spec in task.outputs:
                        per_output[spec.name].append(f"seed {seed}: {comparison.error}")
                    self.ctx.log(f"seed {seed}: {comparison.error}", level="error")
                    continue
                compared += 1
                metrics = comparison.metrics
                self.seed_results[seed] = replace(sr, outputs=tuple(metrics), passed=all(m.passed for m in metrics))
                for m in metrics:
                    if not m.passed:
                        per_output[m.name].append(f"seed {seed}: {m.mismatches}/{m.count} elements outside {m.policy.describe()}")
                    self.ctx.log(f"seed {seed}: {m.name} {'passes' if m.passed else 'FAILS'} "
                                 f"(max abs {units.error(m.max_abs)}, max ULP {units.ulp(m.max_ulp, m.dtype)}, "
                                 f"{units.count(m.mismatches)} mismatches)",
                                 level="info" if m.passed else "warning")  # a level filter finds the failures
            for spec in task.outputs:
                fails = per_output[spec.name]
                self.checks.append(Check(
                    f"output:{spec.name}", f"`{spec.name}` matches the reference ({spec.tolerance.describe()})",
                    not fails and compared > 0,
                    "; ".join(fails[:3]) if fails else f"{compared}/{len(self.seeds)} seeds within tolerance",
                ))
            self._tolerance_checks(compared)
            verified = self.stage2.judge(self.auditor.advice)
            if verified is not None and self.kernel is not None:  # the log both stages verified: the judging
                self.kernel.verified_log = verified  # phases' launches are held to it
            ph.detail = ", ".join(f"{c.id}: {'pass' if c.passed else 'FAIL'}" for c in self.checks
                                  if c.id.startswith(("output:", "tolerance:")))
            if any(c.passed is False for c in self.checks if c.id.startswith(("output:", "tolerance:"))):
                ph.fail(ph.detail)

    def _bound_reduction_lengths(self) -> None:
        """Hold the task's declared reduction lengths to the first seed's instruction trace too (the shapes
        bound them already): the comparison's advice and every judging step then use the bounded K."""
        if self.trace_json is None or self.auditor is None or not self.task.outputs:
            return
        from nkitui.evaluate.numerics.kbound import trace_bound

        self.trace_json = trace = self._trace(self.trace_json)  # read once: the profile reuses it
        if trace is not None and any(o.reduction_length for o in self.task.outputs):
            self.auditor.bound_reduction_lengths(trace_bound(trace))

    def _tolerance_checks(self, compared: int) -> None:
        """One check per output that its tolerance can fail a wrong kernel and pass a right one.

        A task whose test passes all zeros, or fails the correctly rounded reference, is a broken task
        even when its kernel is right; the auditor's exit code should say so.
        """
        from nkitui.evaluate.numerics import findings as rules

        if compared == 0:
            return
        assert self.auditor is not None
        broken = (rules.ZEROS_PASS, rules.ECHO_PASS, rules.TOL_TIGHT)
        weak: dict[str, list[str]] = {}
        for f in self.auditor.findings:
            name = f.data.get("output")
            if f.rule in broken and f.severity == "high" and name and f.title not in weak.get(name, []):
                weak.setdefault(name, []).append(f.title)
        for spec in self.task.outputs:
            why = weak.get(spec.name, [])
            self.checks.append(Check(
                f"tolerance:{spec.name}", f"the tolerance for `{spec.name}` tells a wrong output from a right one",
                not why, "; ".join(why) if why else "no trivial output passes it and the correctly rounded reference does",
            ))

    def _compared_seeds(self) -> list[int]:
        return self.auditor.compared_seeds() if self.auditor is not None else []

    def _runner(self) -> Any:
        assert self.kernel is not None and self.choice is not None
        return self.kernel.runner(supports_precise_switch=self.choice.name == "emulator" or self._precise_switch())

    def _precise_switch(self) -> bool:
        from nkitui.executor.backends.sdk import sdk_namespace

        if self.choice.name == "simulator":
            return sdk_namespace(self.task.kernel.namespace, self.probe) == "new"
        emulated: bool = self.choice.name == "emulator"
        return emulated

    def _trials(self) -> None:
        if not self.options.trials or not self._compared_seeds():
            return
        with self.phase("trials") as ph:
            assert self.auditor is not None
            report = self._judging(lambda: self.auditor.trials(self._runner()))
            adversarial = report.adversarial
            bad = [t for t in adversarial if t.status in ("fail", "error")]
            self.checks.append(Check("trials", "the kernel survives adversarial inputs", not bad,
                                     f"{len(adversarial) - len(bad)}/{len(adversarial)} adversarial trials pass"
                                     + (": failing " + ", ".join(f"{t.name} ({t.status})" for t in bad[:4]) if bad else "")))
            ph.detail = f"{len(adversarial)} adversarial trial(s), {len(bad)} failing"
            if bad:
                ph.fail(ph.detail + ": " + ", ".join(f"{t.name} ({t.status})" for t in bad[:4]))

    def _precision(self) -> None:
        if not self.options.precision or not self._compared_seeds():
            return
        with self.phase("precision") as ph:
            assert self.auditor is not None
            if not self._precise_switch():
                ph.skip(f"the {self.choice.name} backend cannot keep every float in fp32")
                return
            report = self._judging(lambda: self.auditor.precision(self._runner()))
            if report.error:  # the port failed a run in one of the two modes: that is a failed check
                ph.fail(f"could not isolate precision: {report.error}")
                self.checks.append(Check("precision", "dtype and algorithm error are what a correct port makes", False,
                                         f"could not isolate precision: {report.error}"))
                return
            bad = [o for o in report.outputs if o.verdict != "consistent"]
            self.checks.append(Check("precision", "dtype and algorithm error are what a correct port makes", not bad,
                                     "; ".join(f"`{o.name}`: {o.verdict}" for o in report.outputs)))
            ph.detail = "; ".join(f"{o.name}: {o.verdict}" for o in report.outputs)
            if bad:
                ph.fail(ph.detail)

    def _goldens(self) -> None:
        if not self.options.goldens or self.task.goldens is None or not self._compared_seeds():
            return
        with self.phase("goldens") as ph:
            assert self.auditor is not None
            if self.auditor.golden_data is None:
                ph.detail = f"unusable goldens: {self._golden_error or 'not loaded'}"
                return
            report = self._judging(lambda: self.auditor.goldens(self._runner()))
            if report is None or report.error:
                why = report.error if report else "no goldens"
                ph.fail(f"could not compare goldens: {why}")
                self.checks.append(Check("goldens", "the port agrees with the recorded GPU outputs", False,
                                         f"could not compare goldens: {why}"))
                return
            bad = [o for o in report.outputs if o.verdict in ("port-diverges", "all-differ")]
            self.checks.append(Check("goldens", "the port agrees with the recorded GPU outputs", not bad,
                                     "; ".join(f"`{o.name}`: {o.verdict}" for o in report.outputs)))
            ph.detail = "; ".join(f"{o.name}: {o.verdict}" for o in report.outputs)
            if bad:
                ph.fail(ph.detail)

    def _judging(self, step: Any) -> Any:
        """A numerics step that runs the kernel: the kernel process dying stops the run."""
        from nkitui.evaluate.pipeline.children import ChildGone

        try:
            return step()
        except ChildGone as gone:
            raise self._gone(gone) from None

    def _mutants(self) -> None:
        if not self.options.mutants or not self._compared_seeds():
            return
        with self.phase("mutants") as ph:
            assert self.auditor is not None
            entry = self.task.kernel
            source = entry.path.read_text(encoding="utf-8")
            runner = MutantRunner(self)
            try:
                report = self.auditor.mutants(runner, source, self.task.rel(entry.path) or entry.path.name)
            finally:
                runner.close()
            if report.error:
                ph.detail = f"cannot mutate the port: {report.error}"
                return
            counts: dict[str, int] = {}
            for r in report.results:
                counts[r.status] = counts.get(r.status, 0) + 1
            ph.detail = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no mutation sites"

    def _profile(self) -> None:
        with self.phase("profile") as ph:
            from nkitui.executor.backends.costmodel import estimate_from_trace

            if not self._compared_seeds():
                ph.skip("no seed produced outputs that matched the reference's shapes")
                return
            name = self.choice.name
            if name == "emulator":
                outcome = estimate_from_trace(self._trace(self.trace_json), self.result.target, self.task)
            elif name == "simulator":
                outcome = self._simulator_profile()
            else:
                outcome = self._hardware_profile()
            if outcome.skipped:
                ph.skip(outcome.skipped)
            self.result.timing = self._timing(outcome.timing)
            self.result.utilisation = self._utilisation(outcome.utilisation)
            self.result.notes.extend(outcome.notes)
            timing = outcome.timing or {}
            if timing.get("kind") == "measured":
                # the kernel process's own report: any field may be missing or of another type
                failures = timing.get("recheck_failure_count", 0)
                said = timing.get("recheck_failures")
                first = str(said[0])[:300] if isinstance(said, list) and said else "(the report names none)"
                self.checks.append(Check("timed-recheck", "every timed launch produced the verified outputs",
                                         type(failures) is int and failures == 0,
                                         f"{str(timing.get('rechecked', 0))[:20]} timed launches re-checked, "
                                         f"{str(failures)[:20]} differed" + (f": {first}" if failures != 0 else "")))
            if not outcome.skipped:
                med = timing.get("median_us")
                ph.detail = f"{timing.get('kind', '')} {units.time_us(med)}" if isinstance(med, (int, float)) else "no timing"

    def _timing(self, data: dict[str, Any] | None) -> Any:
        """The profile's timing as a record (on hardware it comes from the kernel's process: checked)."""
        if data is None:
            return None
        from nkitui.common.codec import CodecError, decode
        from nkitui.evaluate.run.result import Timing

        try:
            return decode(Timing, data)
        except CodecError as exc:
            self.result.notes.append(f"the timing could not be read: {exc}")
            return None

    def _utilisation(self, data: dict[str, Any] | None) -> Any:
        if data is None:
            return None
        from nkitui.perf.summary import PerfRecord

        try:
            return PerfRecord.from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            self.result.notes.append(f"the engine utilisation could not be read: {exc}")
            return None

    def _trace(self, data: dict[str, Any] | None) -> Any:
        """The kernel process's trace, read back as data (an unreadable one is no trace)."""
        from nkitui.evaluate.pipeline.kernel import PendingTrace

        if isinstance(data, PendingTrace):  # unpacked on a thread since the first seed's run
            data = data.result()
        if data is None:
            return None
        from nkitui.emulator.trace import Trace

        if isinstance(data, Trace):  # the compact form, already checked and built (tracepack)
            return data
        if isinstance(data, dict) and "error" in data:
            self.result.notes.append(f"the kernel process sent an instruction trace that could not be read: {data['error']}")
            return None
        try:
            return Trace.from_json(data)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            self.result.notes.append(f"the kernel process sent an instruction trace that could not be read: {exc}")
            return None

    def _simulator_profile(self) -> Any:
        from nkitui.evaluate.pipeline.children import ChildGone
        from nkitui.evaluate.pipeline.kernel import _read_trace, error_from
        from nkitui.executor.backends.base import ProfileOutcome
        from nkitui.executor.backends.costmodel import estimate_from_trace

        assert self.kernel is not None and self.auditor is not None
        seed = self._compared_seeds()[0]
        try:
            self.kernel.settle(self.kernel.child)
            rid, folder = self.kernel.child.folder()
            metas = self.kernel._write_inputs(folder, self.auditor.inputs[seed])
            reply = self.kernel.child.request("trace", rid=rid, folder=folder, inputs=metas)
        except ChildGone as gone:
            return ProfileOutcome(skipped=f"the kernel process ended before it recorded a trace: {gone.error.message}")
        if reply.get("error") is not None:
            err = error_from(reply["error"], "recording a trace failed")
            return ProfileOutcome(skipped=f"the emulator could not run the kernel to record a trace for the cost model: {err['message']}")
        data = _read_trace(folder / "out", str(reply.get("trace", "")), self.kernel.child.scratch_root)
        outcome = estimate_from_trace(self._trace(data), self.result.target, self.task)
        outcome.notes.append("the SDK simulator models no timing: utilisation is the cost model on nkitui's emulator trace")
        return outcome

    def _hardware_profile(self) -> Any:
        from nkitui.evaluate.pipeline.children import ChildGone
        from nkitui.evaluate.pipeline.kernel import error_from
        from nkitui.executor.backends.base import ProfileOutcome

        assert self.kernel is not None and self.auditor is not None
        seed = self._compared_seeds()[0]
        first = self.first_seed_run
        try:
            self.kernel.settle(self.kernel.child)
            rid, folder = self.kernel.child.folder()
            metas = self.kernel._write_inputs(folder, self.auditor.inputs[seed])
            expected = {}
            if first is not None and first.folder is not None and first.kernel_outputs:
                (folder / "expected").mkdir(exist_ok=True)
                from nkitui.executor.workspace import read_beneath

                root = self.kernel.child.scratch_root
                for name, meta in first.kernel_outputs.items():
                    src = first.folder / "out" / str(meta.get("file", ""))
                    if root is None or "/" in src.name or not src.is_relative_to(root):
                        continue
                    try:  # what the kernel wrote: no link it planted since is followed, no FIFO waited on
                        data = read_beneath(root, src.relative_to(root), max_bytes=MAX_COPY_BYTES)
                    except OSError:
                        continue
                    (folder / "expected" / src.name).write_bytes(data)
                    expected[name] = meta
            reply = self.kernel.child.request("profile", rid=rid, folder=folder, inputs=metas, expected=expected)
        except ChildGone as gone:
            return ProfileOutcome(skipped=f"the kernel process ended while it was being timed: {gone.error.message}")
        if reply.get("error") is not None:
            return ProfileOutcome(skipped=error_from(reply["error"], "profiling failed")["message"])
        timing = reply.get("timing") if isinstance(reply.get("timing"), dict) else None
        utilisation = reply.get("utilisation") if isinstance(reply.get("utilisation"), dict) else None
        notes = [n for n in reply.get("notes", []) if isinstance(n, str)][:20] if isinstance(reply.get("notes"), list) else []
        notes.append("timing and the profile were measured by the kernel's own process: they are its report, "
                     "not a verdict (see docs/executor.md)")
        skipped = reply.get("skipped")
        skipped = skipped if isinstance(skipped, str) else ""
        return ProfileOutcome(timing=timing, utilisation=utilisation, notes=notes, skipped=skipped)

    # -- the result ------------------------------------------------------------------------------
    def _finish(self) -> None:
        r = self.result
        r.finished_at = utc_now()
        r.duration_s = round(time.perf_counter() - self.started, 6)
        r.checks = self.checks
        r.seed_results = [self.seed_results[s] for s in self.seeds if s in self.seed_results]
        r.phases = [PhaseRecord(p.name, p.status, p.duration_s, p.detail) for p in self.ctx.phases]
        r.versions = self._versions()
        r.numerics = self._numerics_audit()
        violations: list[dict[str, Any]] = []
        refusals: list[dict[str, Any]] = []
        observed: dict[str, dict[str, Any]] = {}
        for child in self.children:
            for v in [*child.violations, *child.forgeries]:
                violations.append({**{k: v.get(k) for k in ("action", "target", "detail", "file", "line")},
                                   "process": child.role})
            # sent by the child's guard the moment they happened: clearing its list later hides nothing
            refusals += [{"message": e.message, "file": e.file, "line": e.line, "process": child.role}
                         for e in child.errors if e.kind == "sandbox"][:50]
            if child.handle.observed is not None and child.role not in observed:
                observed[child.role] = dict(child.handle.observed)
            r.notes.extend(n for n in child.notes if n not in r.notes)
        violations = [v for v in violations if isinstance(v.get("action"), str)]
        role = "kernel" if "kernel" in self.confinement else "reference"
        summary = _confinement_summary(self.confinement.get(role), observed.get(role))
        if summary and self.confinement:
            r.notes.append(f"the task's processes ran with {summary}")
        r.sandbox = _sandbox(violations, refusals, self.confinement, observed, summary)
        if self.children:
            described = _describe_violations(violations)
            if refusals and not violations:
                described = f"{len(refusals)} refusal(s) reported during the run: {refusals[0]['message']}"
            r.checks.append(Check("sandbox", "the task's code stayed inside its sandbox (no writes outside its scratch "
                                             "folder, no processes, no credential lookups)",
                                  not violations and not refusals, described))
            for v, times in _distinct_violations(violations):
                self.findings.append(_violation_finding(v, times))
            if (violations or refusals) and r.status == "passed":
                r.status = "failed"
        r.findings = list(self.findings)

    def _versions(self) -> dict[str, Any]:
        from nkitui import __version__

        versions: dict[str, Any] = {"nkitui": __version__, "python": sys.version.split()[0]}
        try:
            import numpy as np

            versions["numpy"] = np.__version__
        except ImportError:  # pragma: no cover - a core dependency
            pass
        try:  # read from the package metadata: importing ml_dtypes costs ~0.5 s of CPU
            from importlib.metadata import PackageNotFoundError, version

            versions["ml_dtypes"] = version("ml_dtypes")
        except PackageNotFoundError:
            pass
        for key, value in self.backend_versions.items():
            if key in ("emulator", "sdk", "devices", "tools", "neuron_ls") and key not in versions:
                versions[key] = value
        if "emulator" not in versions and self.choice is not None and self.choice.name == "emulator":
            versions["emulator"] = f"nkitui {__version__}"
        return versions

    def _numerics_audit(self) -> Any:
        """The numerics results as the auditor assembled them (NumericsAudit), so the report and the
        UI panels read them as they are."""
        if self.auditor is None:
            return None
        audit = self.auditor.audit()
        if not audit.outputs and not audit.findings:
            return None
        self.findings.extend(audit.findings)
        return audit


# the names of NKI's bf16/fp8/MX types and their spellings (not CUDA's float4 vector type)
_NARROW_WORDS = re.compile(rb"\b(?:bfloat16|bf16|bfp16|float8_\w+|fp8\w*|float4_e2m1fn\w*)\b")


def _names_narrow_types(root: Path) -> bool:
    """Whether a Python file at the top of the task's folder names a bf16/fp8/MX type (a float32 task
    whose kernel computes in bf16): then ml_dtypes is imported here, once, before the children fork,
    not in the kernel's process and again for the replay. A guess for speed only: a kernel that reaches
    a narrow type another way makes it when it asks (nkitui.emulator.dtypes.load_narrow). Regular files
    only (a FIFO would block the read), at most 64 of them and 1 MiB of each."""
    try:
        entries = [e for e in os.scandir(root) if e.name.endswith(".py") and e.is_file(follow_symlinks=False)]
        for entry in entries[:64]:
            with open(entry.path, "rb") as f:
                if _NARROW_WORDS.search(f.read(1 << 20)):
                    return True
    except OSError:
        return True  # unreadable here: import it, as before
    return False


def _shared_imports(narrow: bool, *, emulated: bool = False) -> None:
    """What the evaluator and its children both import, imported once before the children are forked
    from it: numpy, ml_dtypes for a task with bf16/fp8 data or a kernel naming such a type (about
    0.65 s of CPU each time; the emulator makes those types on first use, so a float32 task never
    imports it), and the children's own nkitui modules. On the emulator the engine and both front ends
    too: the kernel process needs them, and the evaluator's replay of its instruction log needs the
    engine, so one import serves both. These are nkitui's own modules, imported before any task code
    exists; installing the emulator under the NKI names stays the kernel process's own step. A failure
    here is left to the phase that needs the module."""
    import importlib

    # numpy.random too: the inputs are drawn with it here, and the kernel process's launch-state audit (launchstate.py)
    # compares library modules only across launches that import nothing new (the emulator's first launch drew it in)
    names = ["numpy", "numpy.random", *(["ml_dtypes"] if narrow else []), "nkitui.executor.worker",
             "nkitui.executor.sandbox", "nkitui.executor.confine.entering", "nkitui.executor.untrusted.kernel",
             "nkitui.executor.untrusted.reference", "nkitui.executor.arrays",
             *(["nkitui.emulator.replay", "nkitui.emulator.launch", "nkitui.emulator.legacy", "nkitui.emulator.newns",
                "nkitui.executor.backends.emulator"] if emulated else [])]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the phase that needs it imports it again and reports
            pass
    if narrow and emulated:
        try:  # the emulator's bf16/fp8/MX types, made once here for the kernel process and the replay
            from nkitui.emulator.dtypes import load_narrow

            load_narrow()
        except Exception:  # noqa: BLE001 - the kernel process makes them itself and reports
            pass


def _warm_imports() -> Any:
    """Import what the later phases need (the cost model) in a background thread, started once the
    children are forked: the evaluator spends the reference and compile phases waiting on its
    children, and these imports would otherwise add their time at the end. The thread's modules share
    none with what runs beside it (the static analysis on the main thread, the reference's numerics
    on its own thread: tests/evaluate/pipeline/test_warm_imports.py checks WARM_IMPORTS against
    BESIDE_WARM_IMPORTS), and the main thread joins it before any later phase
    (EvaluationSession._warm_imports_done): no module is ever imported by two threads at once."""
    import importlib
    import threading

    def load() -> None:
        for name in WARM_IMPORTS:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the phase that needs it imports it again and reports
                pass

    thread = threading.Thread(target=load, name="nkitui-warm-imports", daemon=True)
    thread.start()
    return thread


# What the warm-import thread imports, and what other threads import while it runs (the static
# analysis; the reference's thread, _ask_reference). Their nkitui modules must not overlap.
WARM_IMPORTS = ("nkitui.perf.estimate", "nkitui.executor.backends.costmodel")
BESIDE_WARM_IMPORTS = ("nkitui.analysis", "nkitui.evaluate.numerics.audit", "nkitui.evaluate.numerics.inputs",
                       "nkitui.evaluate.numerics.recorded", "nkitui.evaluate.pipeline.reference",
                       "nkitui.evaluate.pipeline.children")


class MutantRunner:
    """Runs mutated copies of the port in a kernel process of their own (spawned on first use, again
    after a mutant kills it), so the port's own process state never touches a mutant."""

    def __init__(self, session: EvaluationSession) -> None:
        self.session = session
        self.process: Any = None
        self.respawns = 0

    def _process(self) -> Any:
        from nkitui.evaluate.pipeline.kernel import KernelProcess

        if self.process is None:
            if self.respawns > MUTANT_RESPAWNS:
                raise RuntimeError("the mutants' kernel process died too often; the remaining mutants were not run")
            child = self.session._spawn("mutants", self.session._kernel_payload())
            child.ready()
            self.process = KernelProcess(child, self.session.task, device_provenance=False)
        return self.process

    def __call__(self, source: str, inputs: dict[str, Any], options: Any) -> dict[str, Any]:
        import hashlib

        from nkitui.evaluate.pipeline.children import ChildGone
        from nkitui.evaluate.pipeline.kernel import KernelRunFailed

        process = self._process()
        scratch = process.child.handle.scratch
        digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:12]
        folder = scratch.work / MUTANT_DIR / digest
        path = folder / self.session.task.kernel.path.name
        from nkitui.executor.workspace import write_beneath

        try:  # the previous mutant's code ran in that process: it may have planted a link in work/
            write_beneath(scratch.root, path.relative_to(scratch.root), source.encode("utf-8"))
        except OSError as exc:
            process.child.kill()
            self.process = None
            raise RuntimeError(f"the mutant could not be written into the kernel process's scratch folder without "
                               f"following a link ({exc.strerror or exc}): task code planted one") from None
        try:
            run = process.run(inputs, precise=options.precise, what=options.label or "a mutant", source=str(path))
        except ChildGone as gone:
            process.child.kill()
            self.process = None
            self.respawns += 1
            raise RuntimeError(f"the mutant ended its kernel process: {gone.error.message}") from None
        if run.error is not None:
            raise KernelRunFailed(run.error)
        return run.outputs or {}

    def close(self) -> None:
        if self.process is not None:
            self.process.child.close()


def _sandbox(violations: list[dict[str, Any]], refusals: list[dict[str, Any]], confinement: dict[str, dict[str, Any]],
             observed: dict[str, dict[str, Any]], summary: str) -> Any:
    """The result's sandbox record, built from what the children sent (each field checked) and what
    the evaluator saw in their /proc."""
    from nkitui.common.codec import CodecError, decode
    from nkitui.evaluate.run.result import Confinement, Observed, Refusal, Sandbox, Violation

    def records(cls: Any, items: list[dict[str, Any]]) -> tuple[Any, ...]:
        out = []
        for item in items:
            try:
                out.append(decode(cls, {k: v for k, v in item.items() if v is not None}))
            except CodecError:
                continue
        return tuple(out)

    def by_role(cls: Any, items: dict[str, dict[str, Any]]) -> dict[str, Any]:
        out = {}
        for role, item in items.items():
            got = records(cls, [{k: v for k, v in item.items() if k != "summary"}])
            if got:
                out[role] = got[0]
        return out

    return Sandbox(violations=records(Violation, violations), confinement=by_role(Confinement, confinement),
                   observed=by_role(Observed, observed), refusals_received=records(Refusal, refusals), summary=summary)


def _confinement_summary(report: dict[str, Any] | None, observed: dict[str, Any] | None) -> str:
    """"sandbox: seccomp, landlock, ..." plus "; degraded: ..." from a child's confinement report, not
    believed where /proc disagrees (nkitui.executor.confine.record)."""
    if not isinstance(report, dict):
        return "sandbox: not reported (the task's processes ended before they were confined)"
    from nkitui.executor import confine

    return str(confine.record({"confinement": report}, observed).get("summary", ""))[:600]


def _launch_state_finding(what: str, changes: list[str], file: str | None) -> Finding:
    from nkitui.common.findings import Finding

    return Finding(
        rule="HACK-LAUNCH-STATE", severity="high", title="The kernel keeps state across its launches",
        message=(f"{what}: the launch left behind state a later launch in the same process could read "
                 f"({'; '.join(changes[:6])}). nkitui launches every seed in a kernel process of its own, so each "
                 "launch it judged was the kernel's first; a kernel whose launch changes module-level state (a "
                 "counter, a cache, an attribute set on a function or a module, a file it writes, a descriptor it "
                 "keeps) can compute something else on its next call, and nothing nkitui ran shows what. A port "
                 "should be a function of its inputs: keep per-launch values local to the kernel's body. The run is "
                 "not proven correct (internal-error)."),
        category="integrity", source="executor", file=file, data={"launch": what, "changes": changes[:8]})


def _host_compute_finding(why: str, file: str | None, line: int | None) -> Finding:
    from nkitui.common.findings import Finding

    return Finding(
        rule="HACK-HOST-COMPUTE", severity="high", title="The kernel's outputs were computed on the host, not by the device",
        message=(f"The run's outputs did not come out of the emulated NeuronCore: {why}. nkitui counts an output only "
                 "when it is an HBM tensor that the kernel's own launch allocated and wrote with store/DMA "
                 "instructions, unchanged afterwards. A wrapper that runs the kernel and returns a numpy result, an "
                 "entry name rebound to such an object, or numpy arithmetic on the inputs produces the right numbers "
                 "on a CPU while the device does none of the work; the outputs were not compared and the run fails."),
        category="integrity", source="executor", file=file, line=line, data={"why": why})


def _describe_violations(violations: list[dict[str, Any]]) -> str:
    if not violations:
        return "no refused writes, no processes, no credential lookups"
    parts = []
    for v, times in _distinct_violations(violations)[:5]:
        where = f" at {v['file']}:{v['line']}" if v.get("file") else ""
        who = f" ({v['process']} process)" if v.get("process") == "reference" else ""
        parts.append(f"{v['action']}: {v['target'] or v['detail']}{where}{who}" + (f" ({times} times)" if times > 1 else ""))
    return "; ".join(parts)


def _distinct_violations(violations: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Each distinct violation once, with how often it happened (every seed repeats the same one)."""
    counts: dict[tuple[Any, ...], list[Any]] = {}
    for v in violations:
        key = (v["action"], v.get("target"), v.get("detail"), v.get("file"), v.get("line"), v.get("process"))
        counts.setdefault(key, [v, 0])[1] += 1
    return [(v, n) for v, n in counts.values()]


_VIOLATION_TEXT = {
    "write": ("Kernel tried to write outside its scratch folder",
              "The kernel (or code it called) tried to modify `{target}` ({detail}). nkitui refused it: kernels run on a "
              "copy of the task and may only write in their scratch folder. A port has no reason to touch files."),
    "process": ("Kernel tried to start a process",
                "The kernel tried to start a process ({what}). nkitui refused it on this backend. "
                "A port has no reason to run programs."),
    "forgery": ("Kernel forged a message to the evaluator",
                "{detail}. Only nkitui's own code in the kernel's process answers the evaluator, once per request; "
                "a second or unrequested answer is task code posing as it. The run fails."),
    "descriptor": ("Kernel opened one of its process's own pipes",
                   "The kernel tried to wrap a raw file descriptor ({detail}). The descriptors of a kernel's process "
                   "are nkitui's pipes to the evaluator: writing there would pose as nkitui's own code. Refused."),
    "introspection": ("Kernel reached into the interpreter",
                      "The kernel's code asked for {what}: frames, the garbage collector, ctypes or tracing, which no "
                      "kernel needs and a forgery of the evaluation would. nkitui refused it (the verdict is computed "
                      "in another process anyway)."),
    "thread": ("Kernel started a thread",
               "The kernel's code tried to start a thread ({target}). A thread of the kernel's code could run "
               "after the kernel returned and rewrite what nkitui saves; kernels run on one thread (the "
               "emulator's logical cores are nkitui's own). Refused."),
    "signal": ("Kernel installed a signal handler or a timer",
               "The kernel's code called `{target}`. A signal handler runs in the middle of whatever code the "
               "signal interrupts, nkitui's own included, and is handed its frame: it could rewrite the outputs "
               "while nkitui saves them. Kernels install no handlers and no timers. Refused."),
    "credential": ("Kernel looked up a credential variable",
                   "The kernel looked up the environment variable `{target}`. nkitui removes credentials from the "
                   "environment of every run, so it found nothing; a port has no reason to read credentials."),
}


def _violation_finding(v: dict[str, Any], times: int = 1) -> Finding:
    from nkitui.common.findings import Finding

    title, text = _VIOLATION_TEXT.get(v["action"], ("Sandbox violation", "{detail}: {target}"))
    fields = {"target": v.get("target") or "", "detail": v.get("detail") or ""}
    what = f"{fields['detail']}: `{fields['target']}`" if fields["target"] else fields["detail"]  # os.fork() has no command
    message = text.format(**fields, what=what)
    if v.get("process") == "reference":
        title = title.replace("Kernel", "Reference")
        message = message.replace("The kernel", "The reference").replace("kernels run", "task code runs")
    if times > 1:
        message += f" It happened {times} times (once per seed or call)."
    return Finding(rule=f"EXEC-SANDBOX-{str(v['action']).upper()}", severity="high", title=title, message=message,
                   category="integrity", source="executor", file=v.get("file") if isinstance(v.get("file"), str) else None,
                   line=v.get("line") if isinstance(v.get("line"), int) else None, data=dict(v, times=times))

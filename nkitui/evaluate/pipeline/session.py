"""One evaluation of a task, inside the worker: the job entry point `nkitui.evaluate.pipeline.session:run_job`.

Phases (each reported with its duration; a phase that cannot happen is reported "skipped" with
the reason):

  static     static findings on the port (nkitui.analysis), when enabled
  load       read task.toml from the workspace copy, pick seeds and target
  compile    choose the backend (auto says why), import or compile the kernel, import the reference
  run        per seed: inputs from the manifest policy, kernel layout, launch, natural layout
  reference  per seed: the numpy reference on the same inputs
  compare    per seed and output: metrics in float64 under the task's tolerance, tolerance advice,
             failure diagnosis and tolerance sanity findings
  trials     adversarial inputs (nkitui.evaluate.numerics.trials), when enabled
  precision  precise off vs on (nkitui.evaluate.numerics.precision), when the backend can switch
  goldens    the recorded GPU outputs (when the task has goldens.npz)
  mutants    mutation testing of the tolerance (opt-in)
  profile    timing and utilisation: the cost model on the emulator's trace, or on hardware timed
             launches plus the profiler's summary

The run result goes out as the last event; the worker's exit code is the CONTRACT's (0 passed,
1 a check failed, 2 invalid).

Imports: this module is the worker's entry point, so what it imports at the top is paid before the
first phase event. Only the result and event types are; numpy, the task model, the backends and
each phase's machinery (analysis, numerics, perf) are imported inside the phase that needs them,
after its start event, so the UI sees the run begin at once and each phase's time includes its
imports.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterator

from nkitui.evaluate.run.result import Check, RunResult, SeedResult
from nkitui.executor.context import PhaseFailed, WorkerContext
from nkitui.executor.events import ErrorEvent

if TYPE_CHECKING:
    import numpy as np

    from nkitui.common.findings import Finding

# What task code may raise that is its own failure, not nkitui's: a kernel or reference calling
# sys.exit() or raising KeyboardInterrupt must not read as an internal error (WorkerCancelled, the
# SIGTERM of a cancel or timeout, is not among them).
TASK_ERRORS = (Exception, SystemExit, KeyboardInterrupt)

# The worker's log line naming the chosen backend; the parent reads it back when the worker dies
# before its result (nkitui.evaluate.run.build_result), so such a run still says what ran it.
BACKEND_LINE = "backend: {name} — {reason}"

DEFAULT_OPTIONS: dict[str, Any] = {
    "backend": "auto", "target": None, "seeds": None, "precise": True, "static": True, "trials": True,
    "precision": True, "goldens": True, "mutants": False, "max_mutants_per_operator": 2, "timing": None,
}
NEURON_COMPILE_CACHE = "/var/tmp/neuron-compile-cache"


def resolve_seeds(requested: int | list[int] | None, task_seeds: Any) -> list[int]:
    """The seeds a run uses: the task's own (None), the first N (an int), or those listed."""
    if requested is None:
        return list(task_seeds)
    if isinstance(requested, int):
        return list(range(requested))
    return [int(s) for s in requested]


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


class EvaluationSession:
    def __init__(self, payload: dict[str, Any], ctx: WorkerContext) -> None:
        self.options = {**DEFAULT_OPTIONS, **(payload or {})}
        self.ctx = ctx
        self.started = time.perf_counter()
        self.result = RunResult(
            run_id=ctx.run_id, task_id="", status="internal-error", created_at=utc_now(),
            backend_requested=str(self.options["backend"]), limits=dict(ctx.limits),
            precise=bool(self.options["precise"]), notes=list(ctx.notes),
        )
        self.findings: list[Finding] = []
        self.checks: list[Check] = []
        self.task: Any = None
        self.backend: Any = None
        self.reference: Any = None
        self.seeds: list[int] = []
        self.inputs: dict[int, dict[str, np.ndarray]] = {}
        self.outputs: dict[int, dict[str, np.ndarray]] = {}  # natural layout
        self.kernel_outputs: dict[int, dict[str, np.ndarray]] = {}  # kernel layout
        self.references: dict[int, dict[str, np.ndarray]] = {}
        self.seed_metrics: dict[int, list[Any]] = {}  # OutputMetrics per output, per compared seed
        self.seed_results: dict[int, SeedResult] = {}
        self.trace: Any = None
        self.first_metrics: list[Any] = []  # OutputMetrics of the first compared seed
        self.advice: list[Any] = []  # ToleranceAdvice of the first compared seed
        self.numeric_findings: list[Finding] = []
        self.audit_parts: dict[str, Any] = {}
        self._done_phases: set[str] = set()

    # -- orchestration ---------------------------------------------------------------------------
    def run(self) -> int:
        steps = [
            ("load", self._load), ("static", self._static), ("compile", self._compile), ("run", self._run),
            ("reference", self._reference), ("compare", self._compare), ("trials", self._trials),
            ("precision", self._precision), ("goldens", self._goldens), ("mutants", self._mutants),
            ("profile", self._profile),
        ]
        try:
            for _name, step in steps:
                step()
            self.result.status = "passed" if all(c.passed is not False for c in self.checks) else "failed"
        except Stop as stop:
            self.result.status = stop.status
            self.result.error = _error_dict(stop.error)
            if not stop.reported:
                self.ctx.error(stop.error)
            for name, _ in steps:
                if name not in self._done_phases and name in ("load", "compile", "run", "reference", "compare", "profile"):
                    with self.phase(name) as ph:
                        ph.skip(f"not reached: {stop.error.message}")
        self._finish()
        self.ctx.result(self.result.to_dict())
        return self.result.exit_code

    @contextmanager
    def phase(self, name: str) -> Iterator[Any]:
        self._done_phases.add(name)
        with self.ctx.phase(name) as handle:
            yield handle

    def _finish(self) -> None:
        r = self.result
        r.finished_at = utc_now()
        r.duration_s = round(time.perf_counter() - self.started, 6)
        r.checks = self.checks
        r.seed_results = [self.seed_results[s] for s in self.seeds if s in self.seed_results]
        r.phases = [p.to_dict() for p in self.ctx.phases]
        r.versions = self._versions()
        r.numerics = self._numerics_audit()
        from nkitui.executor.sandbox import current_guard

        guard = current_guard()
        violations = [v.to_dict() for v in guard.violations] if guard else []
        r.sandbox = {"violations": violations}
        if guard is not None:
            r.checks.append(Check("sandbox", "the kernel stayed inside its sandbox (no writes outside its scratch folder, no processes, no credential lookups)",
                                  not violations, _describe_violations(violations)))
            for v, times in _distinct_violations(violations):
                self.findings.append(_violation_finding(v, times))
            if violations and r.status == "passed":
                r.status = "failed"
        r.findings = [f.to_dict() for f in self.findings]

    def _versions(self) -> dict[str, Any]:
        import numpy as np

        from nkitui import __version__

        versions: dict[str, Any] = {"nkitui": __version__, "python": sys.version.split()[0], "numpy": np.__version__}
        try:
            import ml_dtypes

            versions["ml_dtypes"] = ml_dtypes.__version__
        except ImportError:
            pass
        if self.backend is not None:
            versions.update(self.backend.versions())
        return versions

    # -- errors ----------------------------------------------------------------------------------
    def kernel_error(self, exc: BaseException, what: str, kind: str = "kernel-error") -> ErrorEvent:
        """An exception raised by task code, as an error event with the task's file and line
        (`kind` for an ordinary exception: the reference's own failures are `reference-error`)."""
        from nkitui.emulator.errors import NKIEmulatorError
        from nkitui.executor.backends import KernelLoadError, OutputError

        tb = self.ctx.format_traceback(exc)
        if isinstance(exc, NKIEmulatorError):
            rel = self.ctx.task_relative(getattr(exc, "path", "")) or getattr(exc, "file", None)
            return ErrorEvent(kind="emulator-error", message=f"{what}: {exc} (rule: {getattr(exc, 'rule', 'emulator')})",
                              file=rel or None, line=getattr(exc, "line", None) or None, traceback=tb)
        if isinstance(exc, SystemExit):
            file, line = self.ctx.kernel_location(exc)
            message = f"{what}: task code called sys.exit({exc.code!r}); it must return its outputs, not end the process"
            return ErrorEvent(kind=kind, message=message + (f" (at {file}:{line})" if file else ""), file=file, line=line,
                              traceback=tb)
        if isinstance(exc, SyntaxError):
            return ErrorEvent(kind="syntax-error", message=f"{what}: {exc.msg}", file=self.ctx.task_relative(exc.filename),
                              line=exc.lineno, traceback=tb)
        if isinstance(exc, MemoryError):
            mb = self.ctx.limits.get("memory_mb")
            file, line = self.ctx.kernel_location(exc)
            message = f"{what}: ran out of memory (limit {mb} MB of address space)" if mb else f"{what}: ran out of memory"
            if file:
                message += f" at {file}:{line}"
            return ErrorEvent(kind="memory-limit", message=message, file=file, line=line, traceback=tb)
        file, line = self.ctx.kernel_location(exc)
        kind = {OutputError: "output-error", KernelLoadError: "load-error", PermissionError: "sandbox"}.get(type(exc), kind)
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = f"{what}: {type(exc).__name__}" + (f": {text}" if text else "")
        if file:
            message += f" (at {file}:{line})"
        return ErrorEvent(kind=kind, message=message, file=file, line=line, traceback=tb)

    # -- phases ----------------------------------------------------------------------------------
    def _load(self) -> None:
        with self.phase("load") as ph:
            from nkitui.task import TaskError, load_task

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
            self.seeds = resolve_seeds(self.options.get("seeds"), task.seeds)
            if not self.seeds:
                raise Stop("invalid", ErrorEvent(kind="request-invalid", message="no seeds to run (give --seeds N with N >= 1)"))
            r.seeds = list(self.seeds)
            r.target = self.options.get("target") or task.target
            r.tolerances = {o.name: o.tolerance.to_dict() for o in task.outputs if o.tolerance is not None}
            for w in task.warnings:
                self.ctx.log(self.ctx.scrub(f"task warning: {w}"), level="warning")
            ph.detail = f"{task.id}: {len(task.inputs)} input(s), {len(task.outputs)} output(s), seeds {self.seeds}, target {r.target}"

    def _static(self) -> None:
        if not self.options.get("static"):
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

    def _compile(self) -> None:
        with self.phase("compile") as ph:
            from nkitui.evaluate.calls import load_reference
            from nkitui.executor.backends import BackendUnavailable, choose_backend, make_backend
            from nkitui.executor.backends.detect import probe_environment
            from nkitui.executor.sandbox import current_guard

            probe = probe_environment()
            namespace = self.task.kernel.namespace
            try:
                choice = choose_backend(str(self.options["backend"]), probe, namespace)
            except (BackendUnavailable, ValueError) as exc:
                raise Stop("invalid", ErrorEvent(kind="backend-unavailable", message=str(exc))) from None
            self.result.backend, self.result.backend_reason = choice.name, choice.reason
            self.ctx.log(BACKEND_LINE.format(name=choice.name, reason=choice.reason))
            timing = None
            if self.options.get("timing"):
                from nkitui.executor.timing import TimingPolicy

                timing = TimingPolicy(**self.options["timing"])
            self.backend = make_backend(choice, self.task, self.result.target, probe, timing=timing)
            guard = current_guard()
            if guard is not None:
                guard.allow_processes = self.backend.allows_subprocess
                if self.backend.allows_subprocess:
                    guard.allow_writes_under(NEURON_COMPILE_CACHE)
            try:
                self.backend.prepare()
            except BackendUnavailable as exc:
                raise Stop("invalid", ErrorEvent(kind="backend-unavailable", message=str(exc))) from None
            except TASK_ERRORS as exc:  # noqa: BLE001 - the kernel module's own error, reported in words
                self.checks.append(Check("kernel-runs", "the kernel imports and runs on every seed", False, str(exc)))
                raise Stop("failed", self.kernel_error(exc, f"importing {self.backend.kernel_label} failed")) from None
            try:
                self.reference = load_reference(self.task)
            except TASK_ERRORS as exc:  # noqa: BLE001
                raise Stop("invalid", self.kernel_error(exc, f"importing the reference {self.task.sources.reference.spec} failed",
                                                       kind="reference-error")) from None
            ph.detail = f"{choice.name}: {self.backend.kernel_label}"

    def _run(self) -> None:
        task = self.task
        with self.phase("run") as ph:
            from nkitui.evaluate.calls import kernel_args, natural_outputs, output_dtype_findings
            from nkitui.evaluate.numerics.inputs import make_inputs

            errors: list[str] = []
            for i, seed in enumerate(self.seeds):
                inputs = make_inputs(task, seed)
                self.inputs[seed] = inputs
                args = kernel_args(task, inputs)
                try:
                    run = self.backend.run(args, precise=self.result.precise, trace=self.trace is None)
                    outputs = natural_outputs(task, run.outputs)
                except MemoryError as exc:
                    err = self.kernel_error(exc, f"seed {seed}")
                    self.ctx.error(err)
                    self.seed_results[seed] = SeedResult(seed, False, error=_error_dict(err))
                    errors.append(err.message)
                    break  # the address space is exhausted; later seeds would fail the same way
                except TASK_ERRORS as exc:  # noqa: BLE001 - the kernel's failure is a result, not a crash
                    err = self.kernel_error(exc, f"the kernel failed on seed {seed}")
                    self.ctx.error(err)
                    self.seed_results[seed] = SeedResult(seed, False, error=_error_dict(err))
                    errors.append(err.message)
                else:
                    if run.trace is not None and self.trace is None:
                        self.trace = run.trace
                    self.kernel_outputs[seed] = run.outputs
                    self.outputs[seed] = outputs
                    if len(self.outputs) == 1:  # the first seed that ran: is each output of its declared dtype?
                        for finding in output_dtype_findings(task, outputs):
                            self.numeric_findings.append(finding)
                            self.ctx.log(finding.message, level="warning")
                    self.seed_results[seed] = SeedResult(seed, None, kernel_s=round(run.elapsed_s, 6))
                    self.ctx.log(f"seed {seed}: kernel ran in {run.elapsed_s * 1e3:.1f} ms")
                self.ctx.progress(i + 1, len(self.seeds), f"seed {seed}")
            ran = len(self.outputs)
            self.checks.append(Check("kernel-runs", "the kernel runs on every seed", not errors,
                                     f"{ran}/{len(self.seeds)} seeds ran" + (f"; {errors[0]}" if errors else "")))
            ph.detail = f"{ran}/{len(self.seeds)} seeds ran"
            if not self.outputs:
                first = self.seed_results[self.seeds[0]].error if self.seeds[0] in self.seed_results else None
                kind = (first or {}).get("kind", "kernel-error")
                status = "memory-limit" if kind == "memory-limit" else "failed"
                raise Stop(status, ErrorEvent(kind=kind, message=errors[0] if errors else "the kernel produced no outputs",
                                              file=(first or {}).get("file"), line=(first or {}).get("line"),
                                              traceback=(first or {}).get("traceback", "")), reported=bool(errors))

    def _reference(self) -> None:
        with self.phase("reference") as ph:
            from nkitui.evaluate.calls import ReferenceOutputError

            for seed in self.seeds:
                if seed not in self.outputs:
                    continue
                try:
                    self.references[seed] = dict(self.reference(self.inputs[seed]))
                except ReferenceOutputError as exc:
                    raise Stop("invalid", ErrorEvent(kind="reference-error", message=str(exc),
                                                     file=self.task.rel(self.task.sources.reference.path))) from None
                except TASK_ERRORS as exc:  # noqa: BLE001
                    raise Stop("invalid", self.kernel_error(exc, f"the reference failed on seed {seed}",
                                                           kind="reference-error")) from None
            ph.detail = f"{len(self.references)} seed(s)"

    def _compare(self) -> None:
        task = self.task
        with self.phase("compare") as ph:
            from nkitui.evaluate.numerics.metrics import ShapeMismatchError
            from nkitui.evaluate.numerics.audit import check_outputs, compare_seed, partial_sum_magnitudes

            per_output: dict[str, list[str]] = {o.name: [] for o in task.outputs}
            for seed in self.seeds:
                if seed not in self.references:
                    continue
                sr = self.seed_results[seed]
                inputs, actual, expected = self.inputs[seed], self.outputs[seed], self.references[seed]
                try:
                    if not self.first_metrics:  # the first seed: metrics, tolerance advice, sanity, diagnosis
                        magnitudes = partial_sum_magnitudes(self.reference, inputs, task.outputs, task.op)
                        metrics, advice, findings = check_outputs(task.outputs, inputs, actual, expected, task.op,
                                                                  magnitudes=magnitudes, context=f"with seed {seed}")
                    else:  # later seeds: metrics under the same advice, diagnosis of failures
                        advice = self.advice
                        metrics, findings = compare_seed(task.outputs, actual, expected, advice, context=f"with seed {seed}")
                except ShapeMismatchError as exc:
                    sr.passed = False
                    sr.error = {"kind": "shape-mismatch", "message": str(exc), "file": None, "line": None, "traceback": ""}
                    for spec in task.outputs:
                        per_output[spec.name].append(f"seed {seed}: {exc}")
                    self.ctx.log(f"seed {seed}: {exc}", level="error")
                    continue
                if not self.first_metrics:
                    self.first_metrics, self.advice = metrics, advice
                self.seed_metrics[seed] = metrics
                self.numeric_findings.extend(findings)
                sr.outputs = [m.to_dict() for m in metrics]
                sr.passed = all(m.passed for m in metrics)
                for m in metrics:
                    if not m.passed:
                        per_output[m.name].append(f"seed {seed}: {m.mismatches}/{m.count} elements outside {m.policy.describe()}")
                    ulp = f"{m.max_ulp:g}" if m.max_ulp is not None else "-"
                    self.ctx.log(f"seed {seed}: {m.name} {'passes' if m.passed else 'FAILS'} "
                                 f"(max abs {m.max_abs:.3g}, max ULP {ulp}, {m.mismatches} mismatches)",
                                 level="info" if m.passed else "warning")  # a level filter finds the failures
            compared = sum(1 for s in self.seeds if s in self.references)
            for spec in task.outputs:
                fails = per_output[spec.name]
                self.checks.append(Check(
                    f"output:{spec.name}", f"`{spec.name}` matches the reference ({spec.tolerance.describe()})",
                    not fails and compared > 0,
                    "; ".join(fails[:3]) if fails else f"{compared}/{len(self.seeds)} seeds within tolerance",
                ))
            self._tolerance_checks(compared)
            ph.detail = ", ".join(f"{c.id}: {'pass' if c.passed else 'FAIL'}" for c in self.checks if c.id.startswith("output:"))

    def _tolerance_checks(self, compared: int) -> None:
        """One check per output that its tolerance can fail a wrong kernel and pass a right one.

        A task whose test passes all zeros, or fails the correctly rounded reference, is a broken task
        even when its kernel is right; the auditor's exit code should say so.
        """
        from nkitui.evaluate.numerics import findings as rules

        if compared == 0:
            return
        broken = (rules.ZEROS_PASS, rules.ECHO_PASS, rules.TOL_TIGHT)
        weak: dict[str, list[str]] = {}
        for f in self.numeric_findings:
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
        return [s for s in self.seeds if s in self.references and self.seed_results[s].error is None]

    def _trials(self) -> None:
        if not self.options.get("trials") or not self._compared_seeds():
            return
        with self.phase("trials") as ph:
            from nkitui.evaluate.calls import kernel_runner
            from nkitui.evaluate.numerics.inputs import make_inputs
            from nkitui.evaluate.numerics.trials import run_trials

            seeds = self._compared_seeds()
            # the seeds' runs and comparisons are already made: trials add only the adversarial runs
            done = {s: (self.inputs[s], self.outputs[s], self.references[s], self.seed_metrics.get(s)) for s in seeds}
            report = run_trials(kernel_runner(self.backend, self.task), self.reference, lambda s: make_inputs(self.task, s),
                                seeds, self.task.outputs, self.task.op, adversarial=True, precise=self.result.precise,
                                precomputed=done)
            self.audit_parts["trials"] = report
            self.numeric_findings.extend(report.findings)
            adversarial = report.adversarial
            bad = [t for t in adversarial if t.status in ("fail", "error")]
            self.checks.append(Check("trials", "the kernel survives adversarial inputs", not bad,
                                     f"{len(adversarial) - len(bad)}/{len(adversarial)} adversarial trials pass"
                                     + (": failing " + ", ".join(f"{t.name} ({t.status})" for t in bad[:4]) if bad else "")))
            ph.detail = f"{len(adversarial)} adversarial trial(s), {len(bad)} failing"

    def _precision(self) -> None:
        if not self.options.get("precision") or not self._compared_seeds():
            return
        with self.phase("precision") as ph:
            from nkitui.evaluate.calls import kernel_runner
            from nkitui.evaluate.numerics.precision import isolate_precision

            if not self.backend.supports_precise_switch:
                ph.skip(f"the {self.backend.name} backend cannot keep every float in fp32")
                return
            report = isolate_precision(kernel_runner(self.backend, self.task), self.reference,
                                       self.inputs[self._compared_seeds()[0]], self.task.outputs, self.task.op)
            self.audit_parts["precision"] = report
            self.numeric_findings.extend(report.findings)
            if report.error:
                ph.detail = f"could not isolate precision: {report.error}"
                return
            bad = [o for o in report.outputs if o.verdict != "consistent"]
            self.checks.append(Check("precision", "dtype and algorithm error are what a correct port makes", not bad,
                                     "; ".join(f"`{o.name}`: {o.verdict}" for o in report.outputs)))
            ph.detail = "; ".join(f"{o.name}: {o.verdict}" for o in report.outputs)

    def _goldens(self) -> None:
        if not self.options.get("goldens") or self.task.goldens is None or not self._compared_seeds():
            return
        with self.phase("goldens") as ph:
            from nkitui.evaluate.calls import kernel_runner
            from nkitui.evaluate.numerics.goldens import GoldenFormatError, compare_goldens, golden_error_finding, load_goldens

            rel = self.task.rel(self.task.goldens)
            try:
                goldens = load_goldens(self.task.goldens, self.task.inputs, self.task.outputs, shown_as=rel)
            except GoldenFormatError as exc:
                self.numeric_findings.append(golden_error_finding(str(exc), rel))
                ph.detail = f"unusable goldens: {exc}"
                return
            report = compare_goldens(kernel_runner(self.backend, self.task), self.reference, goldens, self.task.outputs, self.task.op)
            self.audit_parts["goldens"] = report
            self.numeric_findings.extend(report.findings)
            if report.error:
                ph.detail = f"could not compare goldens: {report.error}"
                return
            bad = [o for o in report.outputs if o.verdict in ("port-diverges", "all-differ")]
            self.checks.append(Check("goldens", "the port agrees with the recorded GPU outputs", not bad,
                                     "; ".join(f"`{o.name}`: {o.verdict}" for o in report.outputs)))
            ph.detail = "; ".join(f"{o.name}: {o.verdict}" for o in report.outputs)

    def _mutants(self) -> None:
        if not self.options.get("mutants") or not self._compared_seeds():
            return
        with self.phase("mutants") as ph:
            from nkitui.evaluate.calls import source_runner
            from nkitui.evaluate.numerics.mutants import MutationReport, generate_mutants, run_mutants

            entry = self.task.kernel
            source = entry.path.read_text(encoding="utf-8")
            try:
                mutants = generate_mutants(source, self.task.rel(entry.path) or entry.path.name,
                                           int(self.options.get("max_mutants_per_operator", 2)))
            except SyntaxError as exc:
                self.audit_parts["mutants"] = MutationReport(error=str(exc))
                ph.detail = f"cannot mutate the port: {exc}"
                return
            seed = self._compared_seeds()[0]
            report = run_mutants(mutants, source_runner(self.backend, self.task, self.ctx.workspace), self.inputs[seed],
                                 self.references[seed], self.task.outputs, original_outputs=self.outputs[seed],
                                 advised={a.name: a.policy for a in self.advice})
            self.audit_parts["mutants"] = report
            self.numeric_findings.extend(report.findings)
            counts: dict[str, int] = {}
            for r in report.results:
                counts[r.status] = counts.get(r.status, 0) + 1
            ph.detail = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no mutation sites"

    def _numerics_audit(self) -> dict[str, Any] | None:
        """The numerics results in nkitui.evaluate.numerics.audit' own form (NumericsAudit), so its
        report and UI panels read them as they are."""
        from nkitui.evaluate.numerics.audit import NumericsAudit, _dedupe
        from nkitui.common.findings import sort_findings

        if not self.first_metrics and not self.numeric_findings:
            return None
        audit = NumericsAudit(
            outputs=tuple(self.first_metrics), advice=tuple(self.advice),
            trials=self.audit_parts.get("trials"), precision=self.audit_parts.get("precision"),
            mutants=self.audit_parts.get("mutants"), goldens=self.audit_parts.get("goldens"),
            findings=tuple(sort_findings(_dedupe(self.numeric_findings))),
        )
        self.findings.extend(audit.findings)
        return audit.to_dict()

    def _profile(self) -> None:
        with self.phase("profile") as ph:
            from nkitui.evaluate.calls import kernel_args

            if not self._compared_seeds():
                ph.skip("no seed produced outputs that matched the reference's shapes")
                return
            seed = self._compared_seeds()[0]
            expected = self.kernel_outputs[seed]
            task = self.task

            def recheck(outputs: dict[str, np.ndarray]) -> str | None:
                return _recheck(task, outputs, expected)

            outcome = self.backend.profile(kernel_args(task, self.inputs[seed]), self.references.get(seed), recheck,
                                           self.trace, self.ctx.log)
            if outcome.skipped:
                ph.skip(outcome.skipped)
            self.result.timing = outcome.timing
            self.result.utilisation = outcome.utilisation
            self.result.notes.extend(outcome.notes)
            timing = outcome.timing or {}
            if timing.get("kind") == "measured":
                failures = timing.get("recheck_failure_count", 0)
                self.checks.append(Check("timed-recheck", "every timed launch produced the verified outputs", failures == 0,
                                         f"{timing.get('rechecked', 0)} timed launches re-checked, {failures} differed"
                                         + (f": {timing['recheck_failures'][0]}" if failures else "")))
            if not outcome.skipped:
                med = timing.get("median_us")
                ph.detail = f"{timing.get('kind', '')} {med:.2f} µs" if isinstance(med, (int, float)) else "no timing"


def _recheck(task: Any, got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> str | None:
    """None when a timed launch's outputs equal the verified first launch bit for bit."""
    import numpy as np

    for spec in task.outputs:
        a, b = np.asarray(got.get(spec.name)), np.asarray(expected[spec.name])
        if a.shape != b.shape:
            return f"`{spec.name}` has shape {a.shape}, the verified launch {b.shape}"
        same_bits = a.dtype == b.dtype and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
        if not same_bits:
            diff = int(np.count_nonzero(a.astype(np.float64) != b.astype(np.float64)))
            return f"`{spec.name}` differs from the verified launch in {diff} element(s)"
    return None


def _error_dict(err: ErrorEvent) -> dict[str, Any]:
    d = err.to_dict()
    d.pop("event", None)
    return d


def _describe_violations(violations: list[dict[str, Any]]) -> str:
    if not violations:
        return "no refused writes, no processes, no credential lookups"
    parts = []
    for v, times in _distinct_violations(violations)[:5]:
        where = f" at {v['file']}:{v['line']}" if v.get("file") else ""
        parts.append(f"{v['action']}: {v['target'] or v['detail']}{where}" + (f" ({times} times)" if times > 1 else ""))
    return "; ".join(parts)


def _distinct_violations(violations: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Each distinct violation once, with how often it happened (every seed repeats the same one)."""
    counts: dict[tuple, list] = {}
    for v in violations:
        key = (v["action"], v["target"], v.get("detail"), v.get("file"), v.get("line"))
        counts.setdefault(key, [v, 0])[1] += 1
    return [(v, n) for v, n in counts.values()]


_VIOLATION_TEXT = {
    "write": ("Kernel tried to write outside its scratch folder",
              "The kernel (or code it called) tried to modify `{target}` ({detail}). nkitui refused it: kernels run on a "
              "copy of the task and may only write in their scratch folder. A port has no reason to touch files."),
    "process": ("Kernel tried to start a process",
                "The kernel tried to start a process ({what}). nkitui refused it on this backend. "
                "A port has no reason to run programs."),
    "credential": ("Kernel looked up a credential variable",
                   "The kernel looked up the environment variable `{target}`. nkitui removes credentials from the "
                   "environment of every run, so it found nothing; a port has no reason to read credentials."),
}


def _violation_finding(v: dict[str, Any], times: int = 1) -> Finding:
    from nkitui.common.findings import Finding

    title, text = _VIOLATION_TEXT.get(v["action"], ("Sandbox violation", "{detail}: {target}"))
    what = f"{v['detail']}: `{v['target']}`" if v["target"] else v["detail"]  # os.fork() has no command
    message = text.format(**v, what=what)
    if times > 1:
        message += f" It happened {times} times (once per seed or call)."
    return Finding(rule=f"EXEC-SANDBOX-{v['action'].upper()}", severity="high", title=title, message=message,
                   category="integrity", source="executor", file=v.get("file"), line=v.get("line"),
                   data=dict(v, times=times))


"""The numerics audit of one task: ONE orchestration, step by step, used by the pipeline (one phase
per step) and, all at once, by `run_numerics_audit` for callers holding plain callables.

    auditor = NumericsAuditor(outputs, reference, make_inputs, seeds, op, AuditOptions(...))
    auditor.ask_reference()          # every reference output the audit will need, asked up front
    auditor.compare(seed, actual)    # each seed in order: metrics; advice and sanity on the first
    auditor.trials(runner)           # adversarial inputs (built while asking the reference)
    auditor.precision(runner)        # precise off vs on
    auditor.goldens(runner)          # the recorded GPU outputs
    auditor.mutants(run_source, nki_source, nki_file)
    audit = auditor.audit()          # NumericsAudit: first-seed metrics, advice, every report, findings

    audit = run_numerics_audit(outputs, runner, reference, make_inputs, seeds, op, ...)

All the reference's answers are asked for in `ask_reference`, before any kernel output exists:
the pipeline then seals the reference (RecordedReference), so the judging steps replay answers
and the reference process can end before the kernel's code is ever imported. `check_outputs` is
the first comparison on its own, for callers that ran the kernel themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from nkitui.common.codec import Record

from nkitui.common.findings import Finding, dedupe_findings, sort_findings
from nkitui.evaluate.numerics.advisor import ToleranceAdvice, advise_output, partial_sum_rms, reduction_length_for, tolerance_sanity
from nkitui.evaluate.numerics.diagnose import diagnose_failures
from nkitui.evaluate.numerics.fpformat import format_name
from nkitui.evaluate.numerics.goldens import GoldenReport, Goldens, compare_goldens
from nkitui.evaluate.numerics.kbound import KBound, TraceBound, bound_outputs
from nkitui.evaluate.numerics.metrics import OutputMetrics, ShapeMismatchError, compute_metrics
from nkitui.evaluate.numerics.mutants import MutationReport, generate_mutants, run_mutants
from nkitui.evaluate.numerics.precision import PrecisionReport, isolate_precision
from nkitui.evaluate.numerics.adversarial import AdversarialCase, make_adversarial_cases, output_dtype_names
from nkitui.evaluate.numerics.callables import (
    InputMaker,
    KernelRunner,
    ReferenceFn,
    RunOptions,
    SourceRunner,
    abs_inputs,
    describe_exception,
)
from nkitui.evaluate.numerics.tolerance import Comparison, Reference
from nkitui.evaluate.numerics.trials import LINEAR_OPS, TrialsReport, adversarial_reference_inputs, run_trials

Progress = Callable[[str], None]


@dataclass(frozen=True)
class NumericsAudit(Record):
    _codec_computed = ("passed",)
    outputs: tuple[OutputMetrics, ...] = ()  # the first seed
    advice: tuple[ToleranceAdvice, ...] = ()
    trials: TrialsReport | None = None
    precision: PrecisionReport | None = None
    mutants: MutationReport | None = None
    goldens: GoldenReport | None = None
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    error: str | None = None  # the first run failed: nothing else was compared
    reduction_lengths: tuple[KBound, ...] = ()  # each output's declared K held to its bound (kbound.py)

    @property
    def passed(self) -> bool:
        """Every output passes its tolerance on every seed (the check's verdict)."""
        if self.error is not None or not self.outputs:
            return False
        if not all(m.passed for m in self.outputs):
            return False
        if self.trials is not None and any(t.status != "pass" for t in self.trials.seeds):
            return False
        return True

    def advice_for(self, name: str) -> ToleranceAdvice | None:
        return next((a for a in self.advice if a.name == name), None)


def partial_sum_magnitudes(
    reference: ReferenceFn, inputs: Mapping[str, np.ndarray], outputs: Sequence[Any], op: str | None
) -> dict[str, float]:
    """For ops linear in each input: the rms the partial sums behave like (reference run on |inputs|)."""
    if op not in LINEAR_OPS:
        return {}
    try:
        with np.errstate(all="ignore"):
            abs_out = reference(abs_inputs(inputs))
    except Exception:  # noqa: BLE001 - the proxy is optional: without it the model uses the output's rms
        return {}
    out = {}
    for spec in outputs:
        if spec.name in abs_out:
            k, _ = reduction_length_for(spec, inputs, op)
            out[spec.name] = partial_sum_rms(np.asarray(abs_out[spec.name]), k)
    return out


def check_outputs(
    outputs: Sequence[Any],
    inputs: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    reference_outputs: Mapping[str, np.ndarray],
    op: str | None = None,
    *,
    accumulation_dtype: str = "float32",
    magnitudes: Mapping[str, float] | None = None,
    context: str = "",
) -> tuple[list[OutputMetrics], list[ToleranceAdvice], list[Finding]]:
    """Metrics, advice and findings for one run whose outputs are already at hand.

    Raises ShapeMismatchError when an output's shape differs from the reference's.
    """
    metrics, advice, findings = [], [], []
    for spec in outputs:
        ref = np.asarray(reference_outputs[spec.name])
        got = np.asarray(actual[spec.name])
        adv = advise_output(spec, ref, inputs, op, accumulation_dtype=accumulation_dtype,
                            magnitude_rms=(magnitudes or {}).get(spec.name))
        m, cmp = _metrics_of(spec, got, ref, adv.advised)
        metrics.append(m)
        advice.append(adv)
        findings += tolerance_sanity(spec.name, cmp.ref, spec.tolerance, spec.dtype, inputs, adv)
        findings += diagnose_failures(m, got, ref, adv, context, comparison=cmp)
    return metrics, advice, findings


def compare_seed(
    outputs: Sequence[Any],
    actual: Mapping[str, np.ndarray],
    reference_outputs: Mapping[str, np.ndarray],
    advice: Sequence[ToleranceAdvice],
    context: str = "",
) -> tuple[list[OutputMetrics], list[Finding]]:
    """Metrics of a further seed under the advice made on the first, and the diagnosis of failures.

    Raises ShapeMismatchError when an output's shape differs from the reference's.
    """
    by_name = {a.name: a for a in advice}
    metrics, findings = [], []
    for spec in outputs:
        adv = by_name.get(spec.name)
        got, ref = np.asarray(actual[spec.name]), np.asarray(reference_outputs[spec.name])
        m, cmp = _metrics_of(spec, got, ref, adv.advised if adv else None)
        metrics.append(m)
        if not m.passed:
            findings += diagnose_failures(m, got, ref, adv, context, comparison=cmp)
    return metrics, findings


def _metrics_of(spec: Any, got: np.ndarray, ref: np.ndarray, advised: Mapping[str, Any] | None) -> tuple[OutputMetrics, Comparison]:
    """compute_metrics on one prepared Comparison, kept for the sanity checks and the diagnosis."""
    if got.shape != ref.shape:  # compute_metrics words the error
        compute_metrics(spec.name, got, ref, spec.tolerance, spec.dtype)
    cmp = Comparison(got, Reference(ref), format_name(spec.dtype))
    return compute_metrics(spec.name, got, cmp.ref, spec.tolerance, spec.dtype, conventions=advised, comparison=cmp), cmp


@dataclass(frozen=True)
class AuditOptions:
    """Which steps run, and their settings (the defaults are `nkitui check`'s)."""

    trials: bool = True
    adversarial: bool = True
    precision: bool = True
    goldens: bool = True
    mutants: bool = False
    max_mutants_per_operator: int = 2
    accumulation_dtype: str = "float32"
    precise: bool = True  # the mode of the seeds' runs (precision isolation runs both)


@dataclass
class SeedComparison:
    seed: int
    metrics: list[OutputMetrics] = field(default_factory=list)
    error: str | None = None  # a shape mismatch: nothing was compared

    @property
    def passed(self) -> bool:
        return self.error is None and all(m.passed for m in self.metrics)


class NumericsAuditor:
    """The numerics of one task, one step at a time (see the module docstring)."""

    def __init__(
        self,
        outputs: Sequence[Any],
        reference: ReferenceFn,
        make_inputs: InputMaker,
        seeds: Sequence[int],
        op: str | None = None,
        options: AuditOptions = AuditOptions(),
        goldens: Goldens | None = None,
    ) -> None:
        self.declared_outputs = list(outputs)  # as the task declares them; `outputs` hold K to its bound
        self.outputs = list(outputs)
        self.k_bounds: list[KBound] = []
        self.k_findings: list[Finding] = []
        self.reference = reference
        self.make_inputs = make_inputs
        self.seeds = list(seeds) or [0]
        self.op = op
        self.options = options
        self.golden_data = goldens
        self.inputs: dict[int, dict[str, np.ndarray]] = {}
        self.references: dict[int, dict[str, np.ndarray]] = {}
        self.reference_errors: dict[int, BaseException] = {}
        self.magnitudes: dict[str, float] = {}
        self.cases: list[AdversarialCase] = []
        self.actual: dict[int, dict[str, np.ndarray]] = {}
        self.comparisons: dict[int, SeedComparison] = {}
        self.first_metrics: list[OutputMetrics] = []
        self.advice: list[ToleranceAdvice] = []
        self.findings: list[Finding] = []
        self.trials_report: TrialsReport | None = None
        self.precision_report: PrecisionReport | None = None
        self.golden_report: GoldenReport | None = None
        self.mutation_report: MutationReport | None = None
        self.error: str | None = None

    # -- step 1: everything the reference is asked ------------------------------------------------
    def ask_reference(self, stop_on_error: bool = True, announce: Callable[[str], None] | None = None) -> None:
        """The reference on every seed, the partial-sum magnitudes, the adversarial cases (built from
        the reference's answers) and the reference on them, and on the golden inputs. A seed the
        reference fails on raises at once (`stop_on_error`) or is kept in `reference_errors`.
        `announce(what)` is told what is asked next ("seed 1", "adversarial inputs", ...)."""
        say = announce or (lambda _what: None)
        fetch = getattr(self.reference, "prefetch", None) or (lambda _sets: None)
        for seed in self.seeds:
            self.inputs[seed] = self.make_inputs(seed)
        say("the seeds' inputs")
        first_inputs = self.inputs[self.seeds[0]]
        self.bound_reduction_lengths()
        fetch([self.inputs[s] for s in self.seeds]
              + ([abs_inputs(first_inputs)] if self.op in LINEAR_OPS else []))  # one round trip for all of them
        for seed in self.seeds:
            say(f"seed {seed}")
            inputs = self.inputs[seed]
            self.inputs[seed] = inputs
            try:
                with np.errstate(all="ignore"):
                    self.references[seed] = _named(self.reference(dict(inputs)), self.outputs, "the reference")
            except Exception as exc:
                if stop_on_error:
                    raise
                self.reference_errors[seed] = exc
        first = self.seeds[0]
        if first not in self.references:
            return
        say(f"|inputs| of seed {first}")
        self.magnitudes = partial_sum_magnitudes(self.reference, self.inputs[first], self.outputs, self.op)
        if self.options.trials and self.options.adversarial and self.outputs:
            say("adversarial inputs")
            k = reduction_length_for(self.outputs[0], self.inputs[first], self.op)[0]
            self.cases = make_adversarial_cases(self.inputs[first], _NamedReference(self.reference, self.outputs),
                                                self.op, output_dtype_names(self.outputs), k, first)
            fetch([inputs for case in self.cases for inputs in adversarial_reference_inputs(case, self.op)])
            for case in self.cases:
                for inputs in adversarial_reference_inputs(case, self.op):
                    try:
                        with np.errstate(all="ignore"):
                            self.reference(dict(inputs))
                    except Exception:  # noqa: BLE001 - the judging step meets (and reports) the same failure
                        pass
        if self.options.goldens and self.golden_data is not None:
            say("the goldens' inputs")
            try:
                with np.errstate(all="ignore"):
                    self.reference(dict(self.golden_data.inputs))
            except Exception:  # noqa: BLE001 - compare_goldens reports it
                pass

    def bound_reduction_lengths(self, trace: TraceBound | None = None) -> None:
        """Hold each output's declared K to what the first seed's input shapes (and, given, the kernel's
        instruction trace) allow: every later step judges with the bounded K (kbound.py)."""
        inputs = self.inputs.get(self.seeds[0])
        if inputs is None:
            return
        self.outputs, bounds, findings = bound_outputs(self.declared_outputs, inputs, self.op, trace)
        self.k_bounds, self.k_findings = bounds, findings

    # -- step 2: the seeds' outputs ---------------------------------------------------------------
    def compare(self, seed: int, actual: Mapping[str, np.ndarray]) -> SeedComparison:
        """Metrics of one seed's outputs (natural layout); the first compared seed also gets the
        tolerance advice, the tolerance's sanity findings and the diagnosis; later seeds are judged
        under that advice."""
        inputs, expected = self.inputs[seed], self.references[seed]
        context = f"with seed {seed}"
        try:
            if not self.first_metrics:
                metrics, advice, findings = check_outputs(self.outputs, inputs, actual, expected, self.op,
                                                          accumulation_dtype=self.options.accumulation_dtype,
                                                          magnitudes=self.magnitudes, context=context)
                self.first_metrics, self.advice = metrics, advice
            else:
                metrics, findings = compare_seed(self.outputs, actual, expected, self.advice, context=context)
        except ShapeMismatchError as exc:
            result = SeedComparison(seed, error=str(exc))
            self.comparisons[seed] = result
            return result
        self.actual[seed] = {k: np.asarray(v) for k, v in actual.items()}
        self.findings.extend(findings)
        result = SeedComparison(seed, list(metrics))
        self.comparisons[seed] = result
        return result

    def compared_seeds(self) -> list[int]:
        return [s for s in self.seeds if s in self.comparisons and self.comparisons[s].error is None]

    # -- later steps --------------------------------------------------------------------------
    def trials(self, runner: KernelRunner) -> TrialsReport:
        seeds = self.compared_seeds()
        done = {s: (self.inputs[s], self.actual[s], self.references[s], self.comparisons[s].metrics) for s in seeds}
        report = run_trials(runner, self.reference, self.make_inputs, seeds, self.outputs, self.op,
                            adversarial=self.options.adversarial, precise=self.options.precise,
                            accumulation_dtype=self.options.accumulation_dtype, precomputed=done, cases=self.cases)
        self.trials_report = report
        self.findings.extend(report.findings)
        return report

    def precision(self, runner: KernelRunner) -> PrecisionReport:
        seed = self.compared_seeds()[0]
        report = isolate_precision(runner, self.reference, self.inputs[seed], self.outputs, self.op)
        self.precision_report = report
        self.findings.extend(report.findings)
        return report

    def goldens(self, runner: KernelRunner) -> GoldenReport | None:
        if self.golden_data is None:
            return None
        report = compare_goldens(runner, self.reference, self.golden_data, self.outputs, self.op)
        self.golden_report = report
        self.findings.extend(report.findings)
        return report

    def mutants(self, run_source: SourceRunner, nki_source: str, nki_file: str) -> MutationReport:
        try:
            candidates = generate_mutants(nki_source, nki_file, self.options.max_mutants_per_operator)
        except SyntaxError as exc:
            self.mutation_report = MutationReport(error=str(exc))
            return self.mutation_report
        seed = self.compared_seeds()[0]
        report = run_mutants(candidates, run_source, self.inputs[seed], self.references[seed], self.outputs,
                             original_outputs=self.actual[seed], advised={a.name: a.policy for a in self.advice})
        self.mutation_report = report
        self.findings.extend(report.findings)
        return report

    def add_findings(self, findings: Sequence[Finding]) -> None:
        self.findings.extend(findings)

    def audit(self) -> NumericsAudit:
        return NumericsAudit(
            outputs=tuple(self.first_metrics), advice=tuple(self.advice), trials=self.trials_report,
            precision=self.precision_report, mutants=self.mutation_report, goldens=self.golden_report,
            findings=tuple(sort_findings(dedupe_findings(self.k_findings + self.findings))), error=self.error,
            reduction_lengths=tuple(self.k_bounds),
        )


class _NamedReference:
    """The reference as the adversarial search calls it: outputs checked by name; batches passed on."""

    def __init__(self, reference: ReferenceFn, outputs: Sequence[Any]) -> None:
        self.reference = reference
        self.outputs = outputs

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return _named(self.reference(dict(inputs)), self.outputs, "the reference")

    def prefetch(self, sets: list[dict[str, np.ndarray]]) -> None:
        fetch = getattr(self.reference, "prefetch", None)
        if fetch is not None:
            fetch([dict(s) for s in sets])

    def batch_size(self, wanted: int) -> int:
        hint = getattr(self.reference, "batch_size", None)
        return hint(wanted) if hint is not None else wanted


def _named(raw: Mapping[str, Any], outputs: Sequence[Any], who: str) -> dict[str, np.ndarray]:
    missing = [o.name for o in outputs if o.name not in raw]
    if missing:
        raise KeyError(f"{who} returned no output named {', '.join(missing)} (it returned {', '.join(raw) or 'nothing'})")
    return {o.name: np.asarray(raw[o.name]) for o in outputs}


def run_numerics_audit(
    outputs: Sequence[Any],
    runner: KernelRunner,
    reference: ReferenceFn,
    make_inputs: InputMaker,
    seeds: Sequence[int],
    op: str | None = None,
    *,
    nki_source: str | None = None,
    nki_file: str = "kernel.py",
    run_source: SourceRunner | None = None,
    goldens: Goldens | None = None,
    options: AuditOptions | None = None,
    trials: bool = True,
    adversarial: bool = True,
    precision: bool = True,
    mutants: bool = True,
    progress: Progress | None = None,
) -> NumericsAudit:
    """Every numerics check on a task, through plain callables (natural layout on both sides): the
    same steps as the pipeline's phases. `options` wins over the step switches."""
    opts = options or AuditOptions(trials=trials, adversarial=adversarial, precision=precision,
                                   mutants=mutants and nki_source is not None and run_source is not None)
    say = progress or (lambda _msg: None)
    auditor = NumericsAuditor(outputs, reference, make_inputs, seeds, op, opts, goldens=goldens)
    say("asking the reference")
    try:
        auditor.ask_reference()
    except Exception as exc:  # noqa: BLE001 - the reference raised
        return NumericsAudit(error=describe_exception(exc))
    for seed in auditor.seeds:
        say(f"seed {seed}: running the port")
        try:
            with np.errstate(all="ignore"):
                got = _named(runner(dict(auditor.inputs[seed]), RunOptions(precise=opts.precise, label=f"seed {seed}")),
                             outputs, "the port")
        except Exception as exc:  # noqa: BLE001 - the port raised
            if seed == auditor.seeds[0]:
                return NumericsAudit(error=describe_exception(exc))
            continue
        comparison = auditor.compare(seed, got)
        if comparison.error is not None and seed == auditor.seeds[0]:
            return NumericsAudit(error=comparison.error)
    if not auditor.compared_seeds():
        return NumericsAudit(error="no seed could be compared")
    if opts.trials:
        say("trials")
        auditor.trials(runner)
    if opts.precision:
        say("precision isolation: fp32 and precise runs")
        auditor.precision(runner)
    if opts.mutants and nki_source is not None and run_source is not None:
        say("mutants")
        auditor.mutants(run_source, nki_source, nki_file)
    if opts.goldens and goldens is not None:
        say("GPU goldens")
        auditor.goldens(runner)
    return auditor.audit()


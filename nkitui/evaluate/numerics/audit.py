"""The whole numerics audit of one task in one call, for the pipeline, `nkitui check` and the UI.

    audit = run_numerics_audit(outputs, runner, reference, make_inputs, seeds, op,
                               nki_source=text, nki_file="port.py", run_source=run_source,
                               goldens=goldens)
    audit.to_dict()      # JSON for the run result; NumericsAudit.from_dict() reads it back

Steps: the first seed's run is compared output by output (metrics, tolerance advice, warnings
about the tolerance itself, diagnosis of failures); then trials (all seeds, adversarial inputs),
precision isolation, mutants and GPU goldens, each optional. `check_outputs` is the first step on
its own, for callers that ran the kernel themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from nkitui.common.findings import Finding, sort_findings
from nkitui.evaluate.numerics.advisor import ToleranceAdvice, advise_output, partial_sum_rms, reduction_length_for, tolerance_sanity
from nkitui.evaluate.numerics.diagnose import diagnose_failures
from nkitui.evaluate.numerics.fpformat import format_name
from nkitui.evaluate.numerics.goldens import GoldenReport, Goldens, compare_goldens
from nkitui.evaluate.numerics.metrics import OutputMetrics, ShapeMismatchError, compute_metrics
from nkitui.evaluate.numerics.mutants import MutationReport, generate_mutants, run_mutants
from nkitui.evaluate.numerics.precision import PrecisionReport, isolate_precision
from nkitui.evaluate.numerics.callables import InputMaker, KernelRunner, ReferenceFn, RunOptions, SourceRunner, describe_exception
from nkitui.evaluate.numerics.tolerance import Comparison, Reference
from nkitui.evaluate.numerics.trials import LINEAR_OPS, TrialsReport, run_trials

Progress = Callable[[str], None]


@dataclass(frozen=True)
class NumericsAudit:
    outputs: tuple[OutputMetrics, ...] = ()  # the first seed
    advice: tuple[ToleranceAdvice, ...] = ()
    trials: TrialsReport | None = None
    precision: PrecisionReport | None = None
    mutants: MutationReport | None = None
    goldens: GoldenReport | None = None
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    error: str | None = None  # the first run failed: nothing else was compared

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "outputs": [m.to_dict() for m in self.outputs],
            "advice": [a.to_dict() for a in self.advice],
            "trials": self.trials.to_dict() if self.trials else None,
            "precision": self.precision.to_dict() if self.precision else None,
            "mutants": self.mutants.to_dict() if self.mutants else None,
            "goldens": self.goldens.to_dict() if self.goldens else None,
            "findings": [f.to_dict() for f in self.findings],
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NumericsAudit":
        return cls(
            outputs=tuple(OutputMetrics.from_dict(m) for m in d.get("outputs", [])),
            advice=tuple(ToleranceAdvice.from_dict(a) for a in d.get("advice", [])),
            trials=TrialsReport.from_dict(d["trials"]) if d.get("trials") else None,
            precision=PrecisionReport.from_dict(d["precision"]) if d.get("precision") else None,
            mutants=MutationReport.from_dict(d["mutants"]) if d.get("mutants") else None,
            goldens=GoldenReport.from_dict(d["goldens"]) if d.get("goldens") else None,
            findings=tuple(Finding.from_dict(f) for f in d.get("findings", [])),
            error=d.get("error"),
        )


def partial_sum_magnitudes(
    reference: ReferenceFn, inputs: Mapping[str, np.ndarray], outputs: Sequence[Any], op: str | None
) -> dict[str, float]:
    """For ops linear in each input: the rms the partial sums behave like (reference run on |inputs|)."""
    if op not in LINEAR_OPS:
        return {}
    try:
        with np.errstate(all="ignore"):
            abs_out = reference({n: np.abs(np.asarray(v).astype(np.float64)) for n, v in inputs.items()})
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
    trials: bool = True,
    adversarial: bool = True,
    precision: bool = True,
    mutants: bool = True,
    max_mutants_per_operator: int = 3,
    accumulation_dtype: str = "float32",
    progress: Progress | None = None,
) -> NumericsAudit:
    """Every numerics check on a task. `outputs` are the task's output specs (name, shape, dtype,
    tolerance, reduction_length); arrays are in the natural layout on both sides of the callables."""
    say = progress or (lambda _msg: None)
    seeds = list(seeds) or [0]
    first = seeds[0]
    say(f"seed {first}: running the port and the reference")
    inputs = make_inputs(first)
    try:
        with np.errstate(all="ignore"):
            ref = reference(dict(inputs))
            got = runner(dict(inputs), RunOptions(precise=True, label=f"seed {first}"))
        missing = [o.name for o in outputs if o.name not in got or o.name not in ref]
        if missing:
            raise KeyError(f"output(s) {', '.join(missing)} missing from the port's or the reference's results")
        magnitudes = partial_sum_magnitudes(reference, inputs, outputs, op)
        metrics, advice, findings = check_outputs(outputs, inputs, got, ref, op, accumulation_dtype=accumulation_dtype,
                                                  magnitudes=magnitudes, context=f"with seed {first}")
    except ShapeMismatchError as exc:
        return NumericsAudit(error=str(exc))
    except Exception as exc:  # noqa: BLE001 - the port or the reference raised on the first run
        return NumericsAudit(error=describe_exception(exc))

    trials_report = precision_report = mutation_report = golden_report = None
    if trials:
        say(f"trials: {len(seeds)} seed(s)" + (" and adversarial inputs" if adversarial else ""))
        trials_report = run_trials(runner, reference, make_inputs, seeds, outputs, op, adversarial=adversarial,
                                   accumulation_dtype=accumulation_dtype, precomputed={first: (inputs, got, ref, metrics)})
        findings += trials_report.findings
    if precision:
        say("precision isolation: fp32 and precise runs")
        precision_report = isolate_precision(runner, reference, inputs, outputs, op)
        findings += precision_report.findings
    if mutants and nki_source is not None and run_source is not None:
        try:
            candidates = generate_mutants(nki_source, nki_file, max_mutants_per_operator)
        except SyntaxError as exc:
            mutation_report = MutationReport(error=str(exc))
        else:
            say(f"mutants: {len(candidates)} mutated port(s)")
            mutation_report = run_mutants(candidates, run_source, inputs, ref, outputs, original_outputs=got,
                                          advised={a.name: a.policy for a in advice})
            findings += mutation_report.findings
    if goldens is not None:
        say("GPU goldens")
        golden_report = compare_goldens(runner, reference, goldens, outputs, op)
        findings += golden_report.findings
    return NumericsAudit(
        outputs=tuple(metrics),
        advice=tuple(advice),
        trials=trials_report,
        precision=precision_report,
        mutants=mutation_report,
        goldens=golden_report,
        findings=tuple(sort_findings(_dedupe(findings))),
    )


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.rule, f.title, f.file, f.line)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out

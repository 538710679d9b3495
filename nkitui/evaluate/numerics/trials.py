"""Trials: the port on several seeds and on adversarial inputs, each reported on its own.

A seed trial passes when every output passes the task's tolerance. An adversarial trial is
judged twice: by the task's tolerance, and by the advisor's error model recomputed for that trial's
own outputs and evaluated element by element (x8 safety, `trial_bounds.element_bound`), because a
fixed atol written for unit-scale data says little about inputs scaled by 1e4, and one bound for
the whole tensor sized by its largest element excuses thousands of ULPs on its moderate ones. For a
norm the bound also holds the reference's own response to the rounding of the row statistics
(`trial_bounds.conditioning_bound`), which judges rows of equal or low-variance values numerically.
Where the task promises ULPs, the promise is scale-free: an excused trial stays within
PROMISE_FACTOR x max_ulp. Its status is

  pass            every output passes the task's tolerance
  tolerance-only  the task's tolerance fails, but the errors are what a correct kernel makes on
                  these values (no NaN/Inf disagreement, every element within its bound)
  fail            NaN/Inf where the reference has none (or the reverse), or errors beyond the bound
  error           the port raised an exception
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from nkitui.common.codec import Record

from nkitui.common.findings import Finding
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.adversarial import AdversarialCase, make_adversarial_cases, output_dtype_names
from nkitui.evaluate.numerics.advisor import advise_output, partial_sum_rms, reduction_length_for
from nkitui.evaluate.numerics.metrics import OutputMetrics, ShapeMismatchError, compute_metrics
from nkitui.evaluate.numerics.findings import g, numerics_finding
from nkitui.evaluate.numerics.callables import (
    InputMaker,
    KernelRunner,
    ReferenceFn,
    RunOptions,
    abs_inputs,
    describe_exception,
)
from nkitui.evaluate.numerics import trial_bounds
from nkitui.evaluate.numerics.tolerance import check_policy

TrialStatus = Literal["pass", "fail", "tolerance-only", "error"]
LINEAR_OPS = ("matmul", "reduction", "scan")
# Ops whose output elements keep their own scale when the inputs' magnitudes spread over decades: a spread
# case is judged element by element there (softmax and attention normalise it away; a norm keeps the scale
# of its per-feature gamma and beta).
PER_ELEMENT_OPS = ("matmul", "reduction", "scan", "elementwise", "transpose", "norm", "other", None)
# ... of which these find an element's scale without asking the reference (see _element_scale)
SCALE_WITHOUT_REFERENCE = ("elementwise", "transpose", "norm")
ELEMENTWISE_KINDS = ("allclose", "ulp", "exact")  # tolerances that bound each element on its own
ADVERSARIAL_SAFETY = 8.0
# A task's ULP promise holds at every scale (a correct kernel's ULP error does not grow with its
# inputs' size): an adversarial trial may exceed it only by this factor and still be excused.
PROMISE_FACTOR = 4.0
CONDITIONED_OPS = ("norm",)  # judged by the reference's response to rounding of the row statistics
# The cases whose conditioning differs from the seeds': a scaled copy of the seeds (large, tiny) keeps
# their rows' conditioning, which the advisor's model already holds, so it is not probed.
PROBED_CASES = ("equal", "low-variance", "offset", "structured")


@dataclass(frozen=True)
class OutputSummary(Record):
    name: str
    passed: bool  # the task's tolerance
    mismatches: int
    count: int
    max_abs: float
    max_rel: float
    rel_l2: float
    max_ulp: float | None
    nonfinite_mismatched: int
    # adversarial only: within the per-element bound for this trial; None where it did not decide (the
    # task's tolerance passed, or NaN/Inf disagree)
    within_expected: bool | None = None

    @classmethod
    def from_metrics(cls, m: OutputMetrics, within_expected: bool | None = None) -> "OutputSummary":
        return cls(m.name, m.passed, m.mismatches, m.count, m.max_abs, m.max_rel, m.rel_l2, m.max_ulp,
                   m.nonfinite.mismatched, within_expected)


@dataclass(frozen=True)
class TrialResult(Record):
    name: str  # "seed 3" or the adversarial case ("large", "mask", ...)
    kind: Literal["seed", "adversarial"]
    seed: int
    description: str
    status: TrialStatus
    outputs: tuple[OutputSummary, ...] = ()
    error: str | None = None
    metrics: tuple[OutputMetrics, ...] = ()  # full metrics, kept for the first seed only

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True)
class TrialsReport(Record):
    trials: tuple[TrialResult, ...]
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def seeds(self) -> tuple[TrialResult, ...]:
        return tuple(t for t in self.trials if t.kind == "seed")

    @property
    def adversarial(self) -> tuple[TrialResult, ...]:
        return tuple(t for t in self.trials if t.kind == "adversarial")


def _as_outputs(raw: Mapping[str, np.ndarray], outputs: Sequence[Any], who: str) -> dict[str, np.ndarray]:
    missing = [o.name for o in outputs if o.name not in raw]
    if missing:
        raise KeyError(f"{who} returned no output named {', '.join(missing)} (it returned {', '.join(raw) or 'nothing'})")
    return {o.name: np.asarray(raw[o.name]) for o in outputs}


def _run_pair(runner: KernelRunner, reference: ReferenceFn, inputs: dict[str, np.ndarray], outputs: Sequence[Any],
              options: RunOptions) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    with np.errstate(all="ignore"):
        ref = _as_outputs(reference(dict(inputs)), outputs, "the reference")
        got = _as_outputs(runner(dict(inputs), options), outputs, "the port")
    return got, ref


def run_trials(
    runner: KernelRunner,
    reference: ReferenceFn,
    make_inputs: InputMaker,
    seeds: Sequence[int],
    outputs: Sequence[Any],
    op: str | None = None,
    *,
    adversarial: bool = True,
    precise: bool = True,
    accumulation_dtype: str = "float32",
    precomputed: Mapping[int, tuple[Any, ...]] | None = None,
    cases: Sequence[AdversarialCase] | None = None,
) -> TrialsReport:
    """Run the port on every seed, then on the adversarial cases for `op` (built from the first seed).

    `outputs`: the task's output specs (name, shape, dtype, tolerance, reduction_length).
    `precomputed`: {seed: (inputs, port outputs, reference outputs[, metrics])} for runs already
    made (and compared: a list of OutputMetrics, one per output in order), so they are neither run
    nor compared again. `cases`: the adversarial cases, already built (the audit builds them while
    the reference is asked); None builds them here from the first seed's inputs.
    """
    trials: list[TrialResult] = []
    seed_rms: dict[str, float] = {}
    first_inputs: dict[str, np.ndarray] | None = None
    for i, seed in enumerate(seeds):
        label = f"seed {seed}"
        done = (precomputed or {}).get(seed)
        inputs = done[0] if done is not None else make_inputs(seed)
        if first_inputs is None:
            first_inputs = inputs
        try:
            known = _known_metrics(done, outputs)
            if known is not None:
                metrics = known
            else:
                if done is not None:
                    got = _as_outputs(done[1], outputs, "the port")
                    ref = _as_outputs(done[2], outputs, "the reference")
                else:
                    got, ref = _run_pair(runner, reference, inputs, outputs, RunOptions(precise=precise, label=label))
                metrics = [compute_metrics(o.name, got[o.name], ref[o.name], o.tolerance, o.dtype, all_conventions=i == 0)
                           for o in outputs]
        except ShapeMismatchError as exc:
            trials.append(TrialResult(label, "seed", seed, "random inputs", "error", error=str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - the port (or reference) raised: reported, not fatal
            trials.append(TrialResult(label, "seed", seed, "random inputs", "error", error=describe_exception(exc)))
            continue
        for m in metrics:
            seed_rms.setdefault(m.name, m.ref_rms)
        status: TrialStatus = "pass" if all(m.passed for m in metrics) else "fail"
        trials.append(
            TrialResult(
                label, "seed", seed, "random inputs from the manifest", status,
                outputs=tuple(OutputSummary.from_metrics(m) for m in metrics),
                metrics=tuple(metrics) if i == 0 else (),
            )
        )
    if adversarial and first_inputs is not None:
        trials += _adversarial_trials(
            runner, reference, first_inputs, seeds[0] if seeds else 0, outputs, op, precise, accumulation_dtype, seed_rms,
            cases,
        )
    report = TrialsReport(tuple(trials))
    return TrialsReport(report.trials, tuple(trial_findings(report)))


def _known_metrics(done: tuple[Any, ...] | None, outputs: Sequence[Any]) -> list[OutputMetrics] | None:
    """The metrics a precomputed run already carries, when they cover every output in order."""
    if done is None or len(done) < 4 or done[3] is None:
        return None
    metrics = list(done[3])
    if [m.name for m in metrics] != [o.name for o in outputs]:
        return None
    return metrics


def adversarial_reference_inputs(case: AdversarialCase, op: str | None) -> list[dict[str, np.ndarray]]:
    """The inputs the reference is asked for when `case` is judged: the case itself and, for linear
    ops, its |inputs| (the magnitude of the partial sums behind the advisor's bound)."""
    asked = [case.inputs]
    if op in LINEAR_OPS or (_per_element(case, op) and op not in SCALE_WITHOUT_REFERENCE):
        asked.append(abs_inputs(case.inputs))
    if op in CONDITIONED_OPS and case.name in PROBED_CASES:
        asked.append(trial_bounds.probe_inputs(case.inputs, case.changed))
    return asked


def _per_element(case: AdversarialCase, op: str | None) -> bool:
    return case.spread and op in PER_ELEMENT_OPS


def _adversarial_trials(runner: KernelRunner, reference: ReferenceFn, base_inputs: dict[str, np.ndarray], seed: int,
                        outputs: Sequence[Any], op: str | None, precise: bool, acc_dtype: str,
                        seed_rms: Mapping[str, float], cases: Sequence[AdversarialCase] | None = None,
                        ) -> list[TrialResult]:
    if cases is None:
        ref_fn = lambda inp: _as_outputs(reference(dict(inp)), outputs, "the reference")  # noqa: E731
        # The cancellation case splits the reduction axis: K of the first output tells which one it is.
        k = reduction_length_for(outputs[0], base_inputs, op)[0] if outputs else None
        cases = make_adversarial_cases(base_inputs, ref_fn, op, output_dtype_names(outputs), k, seed)
    results: list[TrialResult] = []
    for case in cases:
        label = f"adversarial: {case.name}"
        try:
            got, ref = _run_pair(runner, reference, case.inputs, outputs, RunOptions(precise=precise, label=label))
        except Exception as exc:  # noqa: BLE001
            results.append(TrialResult(case.name, "adversarial", seed, case.description, "error",
                                       error=describe_exception(exc)))
            continue
        summaries = []
        statuses = []
        for o in outputs:
            try:
                m = compute_metrics(o.name, got[o.name], ref[o.name], o.tolerance, o.dtype, all_conventions=False)
            except ShapeMismatchError as exc:
                results.append(TrialResult(case.name, "adversarial", seed, case.description, "error", error=str(exc)))
                break
            within: bool | None = None
            if _per_element(case, op):
                # A task tolerance that bounds every element on its own, passed, says all a spread case asks.
                if not (m.passed and o.tolerance.kind in ELEMENTWISE_KINDS):
                    within = _within_at_each_scale(o, got[o.name], ref[o.name], case, reference, op, acc_dtype)
            elif not m.passed and m.nonfinite.mismatched == 0:
                # the bound is asked only where it decides: the task's tolerance fails on finite values
                within = _within_expected(o, got[o.name], ref[o.name], case, reference, op, acc_dtype,
                                          seed_rms.get(o.name, 0.0))
            summaries.append(OutputSummary.from_metrics(m, within))
            if m.passed and (within is not False or not _per_element(case, op)):
                statuses.append("pass")
            elif m.nonfinite.mismatched == 0 and within:
                statuses.append("tolerance-only")
            else:
                statuses.append("fail")
        else:
            status: TrialStatus = "fail" if "fail" in statuses else (
                "tolerance-only" if "tolerance-only" in statuses else "pass")
            results.append(TrialResult(case.name, "adversarial", seed, case.description, status, tuple(summaries)))
    return results


def _within_expected(spec: Any, actual: np.ndarray, ref: np.ndarray, case: AdversarialCase, reference: ReferenceFn,
                     op: str | None, acc_dtype: str, seed_rms: float) -> bool:
    """Is the error what a correct port makes on these inputs, at every element (the advisor's error
    model at x8 safety, element by element; for a norm, or the reference's own response to the
    rounding of its row statistics)? And within the task's ULP promise x PROMISE_FACTOR?"""
    magnitude = 0.0 if case.rescaled else seed_rms
    if op in LINEAR_OPS:
        k = reduction_length_for(spec, case.inputs, op)[0]
        try:
            with np.errstate(all="ignore"):
                abs_ref = np.asarray(reference(abs_inputs(case.inputs))[spec.name])
            magnitude = max(magnitude, partial_sum_rms(abs_ref, k))
        except Exception:  # noqa: BLE001 - the magnitude proxy is optional
            pass
    advice = advise_output(spec, ref, case.inputs, op, accumulation_dtype=acc_dtype, magnitude_rms=magnitude,
                           safety=ADVERSARIAL_SAFETY)
    bound = trial_bounds.element_bound(advice, ref, case.inputs, op, ADVERSARIAL_SAFETY)
    if op in CONDITIONED_OPS and case.name in PROBED_CASES:
        try:
            with np.errstate(all="ignore"):
                probed = np.asarray(reference(trial_bounds.probe_inputs(case.inputs, case.changed))[spec.name])
            bound = np.maximum(bound, trial_bounds.conditioning_bound(ref, probed, ADVERSARIAL_SAFETY))
        except Exception:  # noqa: BLE001 - no probe answer: the error model alone judges
            pass
    if not trial_bounds.within(actual, ref, bound)[0]:
        return False
    return _keeps_ulp_promise(spec, actual, ref)


def _keeps_ulp_promise(spec: Any, actual: np.ndarray, ref: np.ndarray) -> bool:
    """A task's ULP promise is scale-free: an excused trial stays within PROMISE_FACTOR of it."""
    tolerance = getattr(spec, "tolerance", None)
    if tolerance is not None and getattr(tolerance, "kind", None) == "ulp":
        promised = replace(tolerance, max_ulp=max(1, int(PROMISE_FACTOR * (tolerance.max_ulp or 0))))
        return check_policy(actual, ref, promised, spec.dtype).passed
    return True


def _within_at_each_scale(spec: Any, actual: np.ndarray, ref: np.ndarray, case: AdversarialCase,
                          reference: ReferenceFn, op: str | None, acc_dtype: str) -> bool:
    """A spread case's errors, each judged at its own element's scale.

    Across a tensor whose magnitudes span 70 decades, one atol (the advisor's, or the task's
    range-relative one) set by the largest element hides any error at the others. The scale S of
    an element is the reference on |inputs| there (the sum of |terms| of a matmul, reduction or scan;
    |a| + |b| of an add), at least |reference|. The advisor's allclose, made for partial sums as
    large as the largest S (x8 safety), is shrunk to each element: |err| <= atol * S / max S +
    rtol * |ref|. NaN/Inf must agree (the metrics count those). An element-wise op whose inputs do not
    broadcast to its output is judged as the other cases are (`_within_expected`)."""
    scale = _element_scale(spec, ref, case, reference, op)
    if scale is None:
        return _within_expected(spec, actual, ref, case, reference, op, acc_dtype, 0.0)
    expected = np.asarray(ref).astype(np.float64)
    got = np.asarray(actual).astype(np.float64)
    if scale.shape != expected.shape or got.shape != expected.shape:
        return False
    with np.errstate(all="ignore"):
        scale = np.where(np.isfinite(scale), np.maximum(scale, np.abs(expected)), np.abs(expected))
        both = np.isfinite(expected) & np.isfinite(got)
        finite_scale = scale[both & np.isfinite(scale)]
        top = float(finite_scale.max()) if finite_scale.size else 0.0
        if top == 0.0:
            return bool(np.array_equal(got[both], expected[both]))
        advice = advise_output(spec, expected, case.inputs, op, accumulation_dtype=acc_dtype, magnitude_rms=top,
                               safety=ADVERSARIAL_SAFETY)
        policy = advice.advised["allclose"]
        atol, rtol = float(policy.atol or 0.0), float(policy.rtol or 0.0)
        bound = atol * np.minimum(scale[both] / top, 1.0) + rtol * np.abs(expected[both])
        if not np.all(np.abs(got[both] - expected[both]) <= bound):
            return False
    return _keeps_ulp_promise(spec, actual, ref)


def _element_scale(spec: Any, ref: np.ndarray, case: AdversarialCase, reference: ReferenceFn,
                   op: str | None) -> np.ndarray | None:
    """Each output element's scale, |x| of the terms behind it: for an element-wise op the sum of its float
    inputs' |values| broadcast to the output (None when they do not broadcast); a transpose's is the value
    itself; a norm's the value plus its per-feature parameters' |values|; otherwise the reference on |inputs| (asked while it was live: adversarial_reference_inputs; None
    when it failed there)."""
    shape = tuple(np.shape(ref))
    if op == "transpose":
        return np.abs(np.asarray(ref).astype(np.float64))
    if op == "norm":
        # |y| plus the per-feature parameters' |values| (gamma, beta: the inputs smaller than the output that
        # broadcast to it): a normalised element's error is absolute in units of its gamma.
        total = np.abs(np.asarray(ref).astype(np.float64))
        for arr in case.inputs.values():
            a = np.asarray(arr)
            if a.dtype.kind not in "fV" or a.size >= total.size:
                continue
            try:
                with np.errstate(all="ignore"):
                    total = total + np.broadcast_to(np.abs(a.astype(np.float64)), shape)
            except (ValueError, TypeError):
                continue
        return total
    if op == "elementwise":
        total = np.zeros(shape)
        for arr in case.inputs.values():
            a = np.asarray(arr)
            if a.dtype.kind not in "fV":
                continue
            try:
                with np.errstate(all="ignore"):
                    total = total + np.broadcast_to(np.abs(a.astype(np.float64)), shape)
            except (ValueError, TypeError):
                return None
        return total
    try:
        with np.errstate(all="ignore"):
            return np.abs(np.asarray(reference(abs_inputs(case.inputs))[spec.name]).astype(np.float64))
    except Exception:  # noqa: BLE001 - no scale: judged as the other cases are
        return None


def trial_findings(report: TrialsReport) -> list[Finding]:
    findings: list[Finding] = []
    seeds = report.seeds
    passing = [t for t in seeds if t.status == "pass"]
    failing = [t for t in seeds if t.status in ("fail", "error")]
    if passing and failing:
        worst = []
        for t in failing:
            bad = [o for o in t.outputs if not o.passed]
            if bad:
                worst.append(f"seed {t.seed}: `{bad[0].name}` {bad[0].mismatches} mismatches, max abs error {g(bad[0].max_abs)}")
            else:
                worst.append(f"seed {t.seed}: {t.error}")
        findings.append(
            numerics_finding(
                rules.TRIAL_FAILED,
                "high",
                "The port fails on some seeds and passes on others",
                f"The port passes with seed(s) {', '.join(str(t.seed) for t in passing)} but fails with "
                f"seed(s) {', '.join(str(t.seed) for t in failing)} ({'; '.join(worst)}). Its correctness depends on "
                "the input values: check data-dependent branches, uninitialised buffers and tiles reused across "
                "iterations.",
                {"passing": [t.seed for t in passing], "failing": [t.seed for t in failing]},
            )
        )
    if failing or not passing:
        return findings  # the port is already wrong on ordinary inputs: adversarial failures add nothing
    # The spread trials (`large`, `large: <x>`) usually fail together for one cause: one finding names them all.
    spread_failed = [t for t in report.adversarial if t.status == "fail" and _is_spread_name(t.name)]
    for t in report.adversarial:
        if t.status == "fail" and _is_spread_name(t.name) and t is not spread_failed[0]:
            continue
        if t.status == "error":
            findings.append(
                numerics_finding(
                    rules.ADVERSARIAL_FAILED,
                    "medium",
                    f"The port crashes on adversarial inputs: {t.name}",
                    f"The port raised an error on adversarial inputs ({t.description}): {t.error}. "
                    "The reference handles these values, so the port should too.",
                    {"case": t.name, "error": t.error},
                )
            )
        elif t.status == "fail":
            # an output can pass the task's tolerance and still fail a spread trial (at its elements' own scale)
            bad = [o for o in t.outputs if not o.passed or o.within_expected is False]
            parts = []
            for o in bad:
                if o.nonfinite_mismatched:
                    parts.append(f"`{o.name}` has {o.nonfinite_mismatched} NaN/Inf value(s) that disagree with the reference")
                else:
                    parts.append(f"`{o.name}` is off by up to {g(o.max_abs)} (relative L2 {g(o.rel_l2)})")
            group = spread_failed if _is_spread_name(t.name) else [t]
            names = ", ".join(x.name for x in group)
            also = (f" It fails the same way on {', '.join(x.name for x in group[1:])}." if len(group) > 1 else "")
            findings.append(
                numerics_finding(
                    rules.ADVERSARIAL_FAILED,
                    "medium",
                    f"The port breaks on adversarial inputs: {names}",
                    f"On adversarial inputs ({t.description}) {'; '.join(parts)}, beyond what correct arithmetic "
                    "in these dtypes explains. Real inputs of this kind (very large or very small values, masks, "
                    f"cancelling terms) would give wrong results.{also}",
                    {"case": t.name, "outputs": [o.to_dict() for o in bad]}
                    | ({"cases": [x.name for x in group]} if len(group) > 1 else {}),
                )
            )
    return findings


def _is_spread_name(name: str) -> bool:
    return name == "large" or name.startswith("large: ")

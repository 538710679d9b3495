"""Precision isolation: run the port with low-precision storage off (every float kept in fp32) and on,
and split its error into algorithm error and dtype error.

  algorithm error  precise off  vs the reference: what the algorithm gets wrong with fp32 everywhere
  dtype error      precise on   vs precise off:   what bf16/fp8/fp16 storage and accumulation add
  total error      precise on   vs the reference

Both are set beside what the advisor's model expects for a correct port: for the dtype error,
TensorE operands in the input dtype, fp32 (PSUM) accumulation and one rounding to the output
dtype; for the algorithm error, fp32 arithmetic and the reference's own rounding.

A correct port with fp32 (PSUM) accumulation, run precise-on, gives the precise-off result rounded
once to the output dtype. The *excess* dtype error, precise-on against round(precise-off), is
therefore ~0 for it; one extra legitimate rounding (an intermediate tile in the output dtype) adds
u_out/sqrt(3).

Extra roundings of the result stay within 1 ULP of the output dtype; rounding inside a sum does
not, because its error follows the partial sums: near-zero results land many ULPs away.

NUM-DTYPE-ERROR-DOMINATES  excess > 1.5 * u_out/sqrt(3) plus an fp32 floor, or (narrow outputs of pure
                           sums: matmul, reduction, scan) more than 0.5% of the elements >= 3 ULPs from
                           round(precise off): the port keeps
                           something in a narrower dtype than it should (a bf16 accumulator, operands
                           downcast for TensorE). The closest hypothesis is named with its prediction.
NUM-ALGO-ERROR             algorithm error > 8x what fp32 arithmetic explains: a bug that no dtype
                           change would fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from nkitui.common.codec import Record

from nkitui.common.findings import Finding
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import SUM_LIKE_OPS, reduction_length_for
from nkitui.evaluate.numerics.fpformat import format_name, is_float_format, round_to, ulp_distance, unit_roundoff
from nkitui.evaluate.numerics.findings import g, numerics_finding
from nkitui.evaluate.numerics.callables import KernelRunner, ReferenceFn, RunOptions, describe_exception
from nkitui.evaluate.numerics.tolerance import check_policy, nonfinite_match, rel_l2_error

Verdict = Literal["consistent", "dtype-error-dominates", "algorithm-error", "both"]
EXCESS_FACTOR = 1.5  # extra roundings in the output dtype a correct port may make, in u_out/sqrt(3)
ALGO_FACTOR = 8.0
EXCESS_ULPS = 3.0  # an element this many output ULPs from round(precise off) was not merely re-rounded
EXCESS_ULP_FRACTION = 0.005
# Ops whose only legitimate narrow rounding is the final store. Compound ops (attention, softmax, norm)
# may round an intermediate that feeds a second matmul (flash attention's P in bf16), whose error then
# follows the partial sums too; for them only the rel L2 excess is judged.
PURE_SUM_OPS = ("matmul", "reduction", "scan")
PE_ROWS = 128  # TensorE accumulates up to 128 terms internally in fp32, then once per matmul in PSUM
U32 = 2.0**-24
NARROW_DTYPES = ("bfloat16", "float16", "tfloat32", "float8_e4m3", "float8_e5m2")
RNE_RMS = 0.735  # rms of RNE's relative error is 0.735*u/sqrt(3) for values spread over binades
ACCUMULATION_CALIBRATION = 0.5  # measured sequential-accumulation rms sits ~0.5x the model's sigma


@dataclass(frozen=True)
class Hypothesis(Record):
    cause: str  # e.g. "accumulating in bfloat16"
    predicted_rel_l2: float


@dataclass(frozen=True)
class PrecisionOutput(Record):
    name: str
    dtype: str
    reduction_length: int
    algorithm_rel_l2: float
    algorithm_max_abs: float
    algorithm_nonfinite: int  # NaN/Inf disagreements with the reference, precise off
    dtype_rel_l2: float
    dtype_max_abs: float
    excess_rel_l2: float  # precise on vs precise off rounded once to the output dtype
    allowed_excess_rel_l2: float
    excess_ulp_fraction: float  # share of elements >= EXCESS_ULPS output ULPs from round(precise off)
    excess_max_ulp: float
    total_rel_l2: float
    total_max_abs: float
    expected_algorithm_rel_l2: float
    expected_dtype_rel_l2: float
    passed_fp32: bool  # the task's tolerance, precise off
    passed_precise: bool  # the task's tolerance, precise on
    verdict: Verdict
    best_hypothesis: Hypothesis | None = None

    @property
    def excess_ratio(self) -> float:
        return self.excess_rel_l2 / self.allowed_excess_rel_l2 if self.allowed_excess_rel_l2 > 0 else math.inf


@dataclass(frozen=True)
class PrecisionReport(Record):
    outputs: tuple[PrecisionOutput, ...] = ()
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    error: str | None = None  # a run raised; no comparison was made


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0


def _nonfinite_disagreements(a: np.ndarray, b: np.ndarray) -> int:
    nf = nonfinite_match(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
    return int((nf.decided & ~nf.matched).sum())


def _rounding_rms(u: float) -> float:
    """rms relative error of one round-to-nearest in a format with unit roundoff u."""
    return u / math.sqrt(3.0)


def _sum_like(op: str | None, k: int) -> bool:
    return k > 1 and (op in SUM_LIKE_OPS or op in (None, "other"))


def fp32_noise(k: int) -> float:
    """rel L2 two fp32 runs of the same sums may differ by (the emulator may reorder between modes)."""
    return 4.0 * U32 * math.sqrt(max(k, 1))


def expected_dtype_rel_l2(output_dtype: str, k: int) -> float:
    """rel L2 between precise on and off for a correct port: one rounding to the output dtype."""
    u_out = unit_roundoff(output_dtype)
    rounding = _rounding_rms(u_out) if u_out > U32 else 0.0
    return math.hypot(rounding, fp32_noise(k))


def allowed_excess_rel_l2(output_dtype: str, k: int) -> float:
    """Largest excess (precise on vs round(precise off)) a correct port makes."""
    u_out = unit_roundoff(output_dtype)
    rounding = _rounding_rms(u_out) if u_out > U32 else 0.0
    return EXCESS_FACTOR * rounding + fp32_noise(k)


def expected_algorithm_rel_l2(reference_dtype: str, output_dtype: str, k: int, op: str | None) -> float:
    """rel L2 between the all-fp32 port and the reference for a correct port."""
    u_ref = max(unit_roundoff(reference_dtype), U32)
    terms = [_rounding_rms(u_ref) if u_ref > U32 else 0.0]
    if _sum_like(op, k) or op in ("softmax", "norm"):
        terms.append(2.0 * U32 * math.sqrt((k - 1) / 3.0) if k > 1 else 0.0)
    terms.append(8.0 * U32)  # activation approximations and the reference's own fp32 rounding
    return math.sqrt(sum(t * t for t in terms))


def candidate_dtypes(task_dtypes: Sequence[str]) -> list[str]:
    """Narrow dtypes a port might slip into: the task's own (bf16 inputs -> a bf16 accumulator), else the usual ones."""
    own = []
    for d in task_dtypes:
        try:
            name = format_name(d)
        except ValueError:
            continue
        if is_float_format(name) and unit_roundoff(name) > U32 and name not in own:
            own.append(name)
    return own or ["bfloat16", "float16", "tfloat32"]


def hypotheses(
    k: int,
    op: str | None,
    task_dtypes: Sequence[str] = NARROW_DTYPES,
    input_dtype: str | None = None,
    output_dtype: str | None = None,
) -> list[Hypothesis]:
    """Candidate causes of an unexpectedly large dtype error, with their predicted excess rel L2.

    Operands cannot be rounded to a dtype the inputs already have, nor an output stored in its own
    dtype count as a flaw: such candidates are left out when `input_dtype`/`output_dtype` are given.
    Predictions use the measured rms of one round-to-nearest, RNE_RMS * u/sqrt(3).
    """
    out = []
    sum_like = _sum_like(op, k)
    u_in = unit_roundoff(input_dtype) if input_dtype else 0.0
    u_out = unit_roundoff(output_dtype) if output_dtype else 0.0
    for d in candidate_dtypes(task_dtypes):
        u = unit_roundoff(d)
        one = RNE_RMS * _rounding_rms(u)
        if sum_like and k > PE_ROWS:
            steps = math.ceil(k / PE_ROWS)
            out.append(Hypothesis(
                f"accumulating the {steps} matmul partial sums (K = {k} in tiles of {PE_ROWS}) in {d} instead of fp32 PSUM",
                one * math.sqrt((steps + 1) / 2.0),
            ))
        if sum_like or op in ("softmax", "norm"):
            if op in ("softmax", "norm"):
                acc = u * math.sqrt(k) / 3.0
            else:
                acc = ACCUMULATION_CALIBRATION * u * math.sqrt((k - 1) / 3.0) * math.sqrt(5.0 / 6.0)
            out.append(Hypothesis(f"accumulating all K = {k} terms one by one in {d}", acc))
        if sum_like and u > u_in:
            out.append(Hypothesis(f"rounding the operands to {d} before the products", RNE_RMS * u * math.sqrt(2.0 / 3.0)))
        if u > u_out:
            out.append(Hypothesis(f"storing an intermediate or the output in {d}", one))
    return out


def closest_hypothesis(
    measured: float,
    k: int,
    op: str | None,
    task_dtypes: Sequence[str] = NARROW_DTYPES,
    factor: float = 2.5,
    input_dtype: str | None = None,
    output_dtype: str | None = None,
) -> Hypothesis | None:
    best, best_gap = None, math.inf
    for h in hypotheses(k, op, task_dtypes, input_dtype, output_dtype):
        if h.predicted_rel_l2 <= 0 or measured <= 0:
            continue
        gap = abs(math.log(measured / h.predicted_rel_l2))
        if gap < best_gap:
            best, best_gap = h, gap
    return best if best is not None and best_gap <= math.log(factor) else None


def isolate_precision(
    runner: KernelRunner,
    reference: ReferenceFn,
    inputs: dict[str, np.ndarray],
    outputs: Sequence[Any],
    op: str | None = None,
) -> PrecisionReport:
    """Run the port precise-off and precise-on on `inputs` and compare both with the reference."""
    try:
        with np.errstate(all="ignore"):
            ref = reference(dict(inputs))
            off = runner(dict(inputs), RunOptions(precise=False, label="precision isolation: fp32"))
            on = runner(dict(inputs), RunOptions(precise=True, label="precision isolation: precise"))
    except Exception as exc:  # noqa: BLE001 - reported in the result
        return PrecisionReport(error=describe_exception(exc))
    results: list[PrecisionOutput] = []
    findings: list[Finding] = []
    for spec in outputs:
        name = spec.name
        if name not in ref or name not in off or name not in on:
            return PrecisionReport(tuple(results), tuple(findings), error=f"output {name!r} missing from a run")
        b = np.asarray(ref[name])
        a_off, a_on = np.asarray(off[name]), np.asarray(on[name])
        if not (a_off.shape == a_on.shape == b.shape):
            return PrecisionReport(tuple(results), tuple(findings),
                                   error=f"output {name!r}: shapes {a_off.shape} / {a_on.shape} differ from the reference's {b.shape}")
        out_dtype = format_name(spec.dtype)
        ref_dtype = format_name(b.dtype) if is_float_format(b.dtype) else "float64"
        k, _ = reduction_length_for(spec, inputs, op)
        in_dtypes = [format_name(np.asarray(v).dtype) for v in inputs.values() if np.asarray(v).dtype.kind in "fV"]
        task_dtypes = [out_dtype] + in_dtypes
        input_dtype = max(in_dtypes, key=unit_roundoff) if in_dtypes else None
        res = _one_output(spec, out_dtype, ref_dtype, k, op, b, a_off, a_on, task_dtypes, input_dtype)
        results.append(res)
        findings += precision_findings(res)
    return PrecisionReport(tuple(results), tuple(findings))


def _one_output(spec: Any, out_dtype: str, ref_dtype: str, k: int, op: str | None, b: np.ndarray, a_off: np.ndarray,
                a_on: np.ndarray, task_dtypes: Sequence[str] = (), input_dtype: str | None = None) -> PrecisionOutput:
    algo = rel_l2_error(a_off, b)
    dtype_err = rel_l2_error(a_on, a_off)
    rounded_off = round_to(a_off, out_dtype) if is_float_format(out_dtype) else np.asarray(a_off).astype(np.float64)
    excess = rel_l2_error(a_on, rounded_off)
    allowed = allowed_excess_rel_l2(out_dtype, k)
    ulp_fraction, max_ulp = 0.0, 0.0
    if op in PURE_SUM_OPS and is_float_format(out_dtype) and unit_roundoff(out_dtype) > U32:
        ulps = ulp_distance(a_on, rounded_off, out_dtype)
        ulps = ulps[np.isfinite(ulps)]
        if ulps.size:
            ulp_fraction = float(np.mean(ulps >= EXCESS_ULPS))
            max_ulp = float(ulps.max())
    exp_algo = expected_algorithm_rel_l2(ref_dtype, out_dtype, k, op)
    dtype_bad = excess > allowed or ulp_fraction > EXCESS_ULP_FRACTION
    algo_nonfinite = _nonfinite_disagreements(a_off, b)
    algo_bad = algo > ALGO_FACTOR * exp_algo or algo_nonfinite > 0
    verdict: Verdict = "both" if dtype_bad and algo_bad else (
        "dtype-error-dominates" if dtype_bad else "algorithm-error" if algo_bad else "consistent")
    return PrecisionOutput(
        name=spec.name,
        dtype=out_dtype,
        reduction_length=k,
        algorithm_rel_l2=algo,
        algorithm_max_abs=_max_abs(a_off, b),
        algorithm_nonfinite=algo_nonfinite,
        dtype_rel_l2=dtype_err,
        dtype_max_abs=_max_abs(a_on, a_off),
        excess_rel_l2=excess,
        allowed_excess_rel_l2=allowed,
        excess_ulp_fraction=ulp_fraction,
        excess_max_ulp=max_ulp,
        total_rel_l2=rel_l2_error(a_on, b),
        total_max_abs=_max_abs(a_on, b),
        expected_algorithm_rel_l2=exp_algo,
        expected_dtype_rel_l2=expected_dtype_rel_l2(out_dtype, k),
        passed_fp32=check_policy(a_off, b, spec.tolerance, out_dtype).passed,
        passed_precise=check_policy(a_on, b, spec.tolerance, out_dtype).passed,
        verdict=verdict,
        best_hypothesis=_explain(excess, ulp_fraction, k, op, task_dtypes, input_dtype, out_dtype) if dtype_bad else None,
    )


def _explain(excess: float, ulp_fraction: float, k: int, op: str | None, task_dtypes: Sequence[str],
             input_dtype: str | None, output_dtype: str) -> Hypothesis | None:
    best = closest_hypothesis(excess, k, op, task_dtypes, input_dtype=input_dtype, output_dtype=output_dtype)
    if ulp_fraction > EXCESS_ULP_FRACTION and _sum_like(op, k) and (best is None or "accumulating" not in best.cause):
        # Errors far beyond re-rounding follow partial sums: prefer the accumulation hypothesis of the right size.
        acc = [h for h in hypotheses(k, op, task_dtypes, input_dtype, output_dtype) if "accumulating" in h.cause]
        if acc:
            best = min(acc, key=lambda h: abs(math.log(max(excess, 1e-300) / h.predicted_rel_l2)))
    return best


def precision_findings(res: PrecisionOutput) -> list[Finding]:
    findings: list[Finding] = []
    name = res.name
    if res.verdict in ("dtype-error-dominates", "both"):
        cause = (
            f" The size matches {res.best_hypothesis.cause} (predicted about {g(res.best_hypothesis.predicted_rel_l2)})."
            if res.best_hypothesis else ""
        )
        passing = (" The task's tolerance still accepts it, so only this check shows it."
                   if res.passed_precise else " It also makes the port fail the task's tolerance.")
        findings.append(
            numerics_finding(
                rules.DTYPE_ERROR_DOMINATES,
                "high",
                f"Low-precision error of `{name}` is far above what its dtypes explain",
                f"Running the port with low-precision storage off (all fp32) and on isolates the dtype error of "
                f"output `{name}`: relative L2 {g(res.dtype_rel_l2)} (a correct port with fp32 PSUM accumulation over "
                f"K = {res.reduction_length} and one rounding to {res.dtype} makes about {g(res.expected_dtype_rel_l2)}). "
                f"Beyond that single rounding the port adds relative L2 {g(res.excess_rel_l2)} (a correct port stays under "
                f"{g(res.allowed_excess_rel_l2)})"
                + (f", and {res.excess_ulp_fraction:.1%} of the elements land {EXCESS_ULPS:g} or more {res.dtype} ULPs "
                   f"(up to {g(res.excess_max_ulp)}) from the once-rounded fp32 result, which extra roundings of the result "
                   "cannot do: the error follows the partial sums" if res.excess_ulp_fraction > EXCESS_ULP_FRACTION else "")
                + f".{cause}{passing} Keep accumulators in "
                "fp32 (PSUM) and downcast once, when the result is stored.",
                res.to_dict(),
            )
        )
    if res.verdict in ("algorithm-error", "both"):
        findings.append(
            numerics_finding(
                rules.ALGO_ERROR,
                "high" if not res.passed_fp32 else "medium",
                f"`{name}` is wrong even with all arithmetic in fp32",
                f"With every value kept in fp32 (precise mode off), output `{name}` still differs from the reference "
                f"by relative L2 {g(res.algorithm_rel_l2)} (max abs {g(res.algorithm_max_abs)}"
                + (f", {res.algorithm_nonfinite} NaN/Inf where the reference disagrees" if res.algorithm_nonfinite else "")
                + f"), where fp32 arithmetic explains about {g(res.expected_algorithm_rel_l2)}. "
                "The error comes from the algorithm (indexing, "
                "masking, a missing or extra term), not from the dtypes."
                + (" It makes the port fail the task's tolerance." if not res.passed_fp32 else
                   " The task's tolerance accepts it."),
                res.to_dict(),
            )
        )
    return findings

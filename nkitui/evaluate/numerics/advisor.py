"""Tolerance advisor: the error a correct port is expected to make, and the tolerance that follows.

From the dtypes, the accumulation dtype, the reduction length K and the reference's magnitudes it
builds a per-element error model (docs/numerics.md derives it):

* accumulation of K terms in a dtype with unit roundoff u_acc, random-walk growth:
      sigma_acc(s) = u_acc * sqrt((K-1)/3) * sqrt(s^2/3 + R^2/2)
  where s is the element's reference value and R the output's rms (the partial sums of a signed
  dot product grow like the result and like sqrt(k)*R). Worst case (K-1)*u_acc*sum|terms| is shown
  too: hardware never gets near it with random data;
* operand rounding, when the port feeds TensorE a narrower dtype than the reference sees:
      sigma_in(s) = u_c * sqrt(2/3) * sqrt(s^2/K + R^2);
* the reference's own arithmetic (u_ref, same random walk);
* output rounding to the output dtype: |e| <= u_out*|s| (2*u_out when the reference is itself
  rounded to the output dtype, since the two may round to neighbours);
* for ops with activation functions (softmax, norm, attention, elementwise), a few fp32 ULPs for
  ScalarE's polynomial approximations;
* attention: P rounded to the operand dtype before P @ V (sigma = u_c/sqrt(3)*R);
* norm: the mean's error in x - mean, absolute, scaled by rms(x)/std(x) of the input;
* element-wise chains (K = 1): a few fp32 ULPs of the largest input, where they cancel near zero.

The largest of N random errors is about z = sqrt(2 ln 2N) standard deviations. The advice
multiplies the bound z*sigma + rounding by a safety factor and rounds up to 1, 2 or 5 x 10^k.
The model is deliberately on the high side (measured fp32 accumulation errors sit 2-5x below
sigma); the "optimistic" level (sigma/4) is what `tolerance_sanity` uses to claim that a correct
result would fail.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from nkitui.common.codec import Record

from nkitui.common.findings import Finding, Severity
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.fpformat import format_name, is_float_format, round_to, spacing, unit_roundoff
from nkitui.evaluate.numerics.findings import g, numerics_finding
from nkitui.evaluate.numerics.tolerance import PolicyOutcome, Reference, TolerancePolicy, as_policy, check_policy

SUM_LIKE_OPS = ("matmul", "reduction", "attention", "scan")
NORMALISING_OPS = ("softmax", "norm")
FUNCTION_OPS = ("softmax", "norm", "attention", "elementwise", "other")  # use ScalarE/VectorE functions
EXACT_OPS = ("transpose",)
ELEMENTWISE_CHAIN_OPS = ("elementwise", "other", None)
FUNCTION_ULPS = 4.0  # fp32 ULPs allowed per activation-function evaluation (exact bounds are unpublished)
OPTIMISTIC = 0.25
U32_ROUNDOFF = 2.0**-24  # sigma scale for "a correct result would certainly fail" claims


def nice_ceil(x: float) -> float:
    """Smallest 1, 2 or 5 x 10^k that is >= x (0 stays 0)."""
    if x <= 0 or not math.isfinite(x):
        return 0.0 if x <= 0 else x
    exp = math.floor(math.log10(x))
    for m in (1.0, 2.0, 5.0, 10.0):
        v = m * 10.0**exp
        if v >= x * (1 - 1e-12):
            return float(f"{v:.12g}")
    return 10.0 ** (exp + 1)


def _pow2(u: float) -> str:
    if u <= 0:
        return "0 (exact)"
    return f"2^{round(math.log2(u))} = {g(u)}"


# ---------------------------------------------------------------------------------------------
# Reduction length


def infer_reduction_length(
    input_shapes: Mapping[str, Sequence[int]], output_shape: Sequence[int], op: str | None = None
) -> tuple[int, str]:
    """K, the number of terms accumulated into one output element, and how it was found."""
    shapes = {k: tuple(int(d) for d in v) for k, v in input_shapes.items()}
    out = tuple(int(d) for d in output_shape)
    if not shapes:
        return 1, "no inputs: K = 1"
    main_name = max(shapes, key=lambda k: (int(np.prod(shapes[k])) if shapes[k] else 1, k))
    main = shapes[main_name]
    if op in EXACT_OPS or op == "elementwise":
        return 1, f"op '{op}': each output element comes from one input element, K = 1"
    if op in NORMALISING_OPS or op == "scan":
        k = main[-1] if main else 1
        return k, f"op '{op}' reduces along the last axis of {main_name} {list(main)}: K = {k}"
    remaining = Counter(d for s in shapes.values() for d in s)
    remaining.subtract(Counter(out))
    leftover = [d for d, n in remaining.items() for _ in range(max(n, 0)) if d > 1]
    repeated = sorted({d for d, n in remaining.items() if n >= 2 and d > 1})
    if op in ("matmul", "attention") or (op in (None, "other") and repeated and out not in shapes.values()):
        if repeated:
            k = max(repeated)
            return k, f"dimension {k} appears in two inputs and not in the output {list(out)}: contracted, K = {k}"
        if leftover:
            k = max(leftover)
            return k, f"largest input dimension absent from the output {list(out)}: K = {k}"
        return 1, "no contracted dimension found: K = 1 (set reduction_length in the manifest)"
    if op in (None, "other") and out in shapes.values():
        return 1, (
            f"output {list(out)} has the shape of an input and no op is declared: assumed element-wise, K = 1 "
            "(set op or reduction_length in the manifest if each element sums several values)"
        )
    left = Counter(main)
    left.subtract(Counter(out))
    k = int(np.prod([d for d, n in left.items() for _ in range(max(n, 0))] or [1]))
    return k, f"dimensions of {main_name} {list(main)} absent from the output {list(out)} multiply to K = {k}"


# ---------------------------------------------------------------------------------------------
# The error model


@dataclass(frozen=True)
class ErrorModel(Record):
    """sigma_i^2 = floor_sq + rel_sq * s_i^2 (random part); |rounding_i| <= rounding_rel * |s_i|."""

    floor_sq: float
    rel_sq: float
    rounding_rel: float
    tail: float  # z: largest of N errors in units of sigma
    rounding_abs: float = 0.0  # bounded error independent of s (element-wise chains: ULPs of the input)

    def sigma(self, s: np.ndarray, level: float = 1.0) -> np.ndarray:
        return level * np.sqrt(self.floor_sq + self.rel_sq * np.square(np.asarray(s, dtype=np.float64)))

    def envelope(self, s: np.ndarray, level: float = 1.0) -> np.ndarray:
        """The largest error expected at each element: z*sigma + rounding."""
        s = np.asarray(s, dtype=np.float64)
        envelope: np.ndarray = self.tail * self.sigma(s, level) + self.rounding_rel * np.abs(s) + self.rounding_abs
        return envelope


@dataclass(frozen=True)
class ToleranceAdvice(Record):
    name: str
    op: str | None
    reduction_length: int
    k_source: str
    input_dtype: str
    compute_dtype: str
    accumulation_dtype: str
    output_dtype: str
    reference_dtype: str
    reference_rounded: bool
    count: int
    ref_max_abs: float
    ref_rms: float
    model: ErrorModel
    expected_max_abs: float  # largest envelope value over the elements
    expected_rel_l2: float | None
    worst_case_abs: float  # (K-1)*u_acc*sum|terms| bound at the largest element
    advised: dict[str, TolerancePolicy]  # kind -> policy; kinds that do not fit are absent
    recommended: str
    reasoning: tuple[str, ...]
    safety: float = 2.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def policy(self) -> TolerancePolicy:
        return self.advised[self.recommended]


def _narrowest(dtypes: Sequence[str]) -> str:
    floats = [format_name(d) for d in dtypes if is_float_format(d)]
    if not floats:
        return format_name(dtypes[0]) if dtypes else "float32"
    return max(floats, key=unit_roundoff)


def build_error_model(
    *,
    op: str | None,
    k: int,
    count: int,
    ref_rms: float,
    compute_dtype: str,
    input_dtype: str,
    accumulation_dtype: str,
    output_dtype: str,
    reference_dtype: str,
    reference_rounded: bool,
    input_max_abs: float | None = None,
    input_condition: float | None = None,
) -> tuple[ErrorModel, list[str]]:
    """The per-element model and one line of reasoning per term."""
    tail = min(6.0, max(3.0, math.sqrt(2.0 * math.log(2.0 * max(count, 1)))))
    if not is_float_format(output_dtype):
        return ErrorModel(0.0, 0.0, 0.0, tail), [f"integer output ({output_dtype}): the result must be exact"]
    u_acc = unit_roundoff(accumulation_dtype)
    u_in = unit_roundoff(input_dtype)
    u_c = unit_roundoff(compute_dtype)
    u_out = unit_roundoff(output_dtype)
    u_ref = unit_roundoff(reference_dtype)
    u_fn = unit_roundoff("float32")
    R = ref_rms
    floor_sq = rel_sq = 0.0
    lines: list[str] = []
    operand_rounding = u_c > u_in
    sum_like = op in SUM_LIKE_OPS or (op in (None, "other") and k > 1)
    if sum_like and k > 1:
        c2 = (k - 1) / 3.0
        for label, u in (("accumulation", u_acc), ("the reference's own arithmetic", u_ref)):
            if u > 0:
                floor_sq += u * u * c2 * R * R / 2.0
                rel_sq += u * u * c2 / 3.0
                lines.append(
                    f"{label} ({_dtype_u(u)}): random walk over K={k} terms, "
                    f"sigma = u*sqrt((K-1)/3)*sqrt(s^2/3 + R^2/2) = {g(u * math.sqrt(c2) * R * math.sqrt(5 / 6))} at |s| = R"
                )
        if operand_rounding:
            floor_sq += (2.0 / 3.0) * u_c * u_c * R * R
            rel_sq += (2.0 / 3.0) * u_c * u_c / k
            lines.append(
                f"operand rounding to {compute_dtype} (u = {g(u_c)}) before the products: "
                f"sigma = u*sqrt(2/3)*sqrt(s^2/K + R^2) = {g(u_c * math.sqrt(2 / 3) * R)} at s = 0"
            )
        if op == "attention" and u_c > U32_ROUNDOFF:
            # P = softmax(QK^T) is rounded to the operand dtype before P @ V on TensorE; its error
            # follows the weighted values, whose spread is what sets the output's rms R.
            floor_sq += u_c * u_c * R * R / 3.0
            lines.append(
                f"the attention probabilities P are rounded to {compute_dtype} for the P @ V matmul: "
                f"sigma = u/sqrt(3)*R = {g(u_c / math.sqrt(3) * R)}, at every element"
            )
    elif op in NORMALISING_OPS and k > 1:
        for label, u in (("accumulation", u_acc), ("the reference's own arithmetic", u_ref)):
            if u > 0:
                rel_sq += u * u * k / 9.0
                lines.append(
                    f"{label} ({_dtype_u(u)}): the {op} sums K={k} positive terms, relative error of the sum "
                    f"~ u*sqrt(K)/3 = {g(u * math.sqrt(k) / 3)}, carried into every element"
                )
        cond = max(1.0, float(input_condition or 1.0))
        if op == "norm" and u_acc > 0:
            # x - mean: the mean's error (relative to |mean|) lands on every element, in units of the
            # std, so outputs near zero get an absolute error of u*sqrt(K)/3 * rms(x)/std(x) * R.
            floor_sq += (u_acc * u_acc * k / 9.0) * cond * cond * R * R
            lines.append(
                f"the mean's error in x - mean is absolute: sigma = u_acc*sqrt(K)/3 * rms(x)/std(x) * R = "
                f"{g(u_acc * math.sqrt(k) / 3.0 * cond * R)} (rms(x)/std(x) = {g(cond)})"
            )
        if operand_rounding:
            rel_sq += 4.0 * u_c * u_c / 3.0
            lines.append(f"operand rounding to {compute_dtype}: relative sigma ~ 2u/sqrt(3) = {g(2 * u_c / math.sqrt(3))}")
    else:
        if operand_rounding:
            rel_sq += u_c * u_c / 3.0
            lines.append(f"operand rounding to {compute_dtype}: relative sigma ~ u/sqrt(3) = {g(u_c / math.sqrt(3))}")
        if k <= 1:
            lines.append("no accumulation (K = 1): no random-walk term")
    fn_rel = FUNCTION_ULPS * u_fn if op in FUNCTION_OPS else 0.0
    if fn_rel:
        lines.append(
            f"activation functions (exp, rsqrt, ...) are polynomial approximations on ScalarE: allow "
            f"{FUNCTION_ULPS:g} fp32 ULPs, relative {g(fn_rel)}"
        )
    fn_abs = 0.0
    if op == "norm" and fn_rel:
        fn_abs = fn_rel * max(1.0, float(input_condition or 1.0)) * R
    if op in ELEMENTWISE_CHAIN_OPS and k <= 1 and input_max_abs:
        # A chain of fp32 element-wise ops (x*0.5*(1+tanh(...))) cancels where the output nears zero:
        # its error follows the input's size, not the output's.
        fn_abs = FUNCTION_ULPS * u_fn * input_max_abs
        lines.append(
            f"element-wise chains cancel near zero outputs: allow {FUNCTION_ULPS:g} fp32 ULPs of the largest input "
            f"({g(input_max_abs)}), absolute {g(fn_abs)}"
        )
    out_rel = 0.0
    if u_out > max(u_acc, u_fn) or reference_rounded:
        out_rel = (2.0 if reference_rounded else 1.0) * u_out
        lines.append(
            f"output rounding to {output_dtype} ({_dtype_u(u_out)}): |e| <= "
            + ("2u*|s| (the reference is itself rounded to the output dtype, so the two may land on neighbours)"
               if reference_rounded else "u*|s|")
        )
    lines.append(f"largest of N = {count} random errors: z = sqrt(2 ln 2N) = {tail:.2f} standard deviations")
    return ErrorModel(floor_sq=floor_sq, rel_sq=rel_sq, rounding_rel=out_rel + fn_rel, tail=tail,
                      rounding_abs=fn_abs), lines


def _dtype_u(u: float) -> str:
    return f"u = {_pow2(u)}"


def advise_tolerance(
    name: str,
    reference: np.ndarray,
    output_dtype: str,
    input_dtypes: Sequence[str],
    *,
    reduction_length: int | None = None,
    k_source: str | None = None,
    op: str | None = None,
    accumulation_dtype: str = "float32",
    compute_dtype: str | None = None,
    reference_dtype: str | None = None,
    magnitude_rms: float | None = None,
    input_max_abs: float | None = None,
    input_condition: float | None = None,
    safety: float = 2.0,
) -> ToleranceAdvice:
    """Advise atol/rtol (and the other conventions) for output `name`, showing the reasoning.

    `reference`: the reference output (its dtype says how the reference was computed: float64,
    float32, or rounded to a narrow dtype). `input_dtypes`: dtypes of the kernel's inputs.
    `compute_dtype`: the dtype operands are rounded to before products (default: the narrowest
    input dtype, i.e. no extra rounding). `reduction_length`: K (see `infer_reduction_length`).
    `magnitude_rms`: the rms the partial sums behave like, when it is larger than the result's
    (cancelling inputs; see `partial_sum_rms`). `input_max_abs`: the largest input magnitude, which
    bounds the cancellation error of element-wise chains. `input_condition`: rms(x)/std(x) of the
    main input, how much a norm's x - mean cancels.
    """
    ref = np.asarray(reference)
    out_name = format_name(output_dtype)
    in_name = _narrowest(list(input_dtypes)) if input_dtypes else out_name
    comp = format_name(compute_dtype) if compute_dtype else in_name
    acc = format_name(accumulation_dtype)
    ref_dtype_name = format_name(ref.dtype) if ref.dtype.kind == "f" or ref.dtype.kind == "V" else "float64"
    if reference_dtype:
        ref_arith = format_name(reference_dtype)
    elif unit_roundoff(ref_dtype_name) > unit_roundoff("float32"):
        ref_arith = "float32"  # a narrow reference array was computed wider and rounded
    else:
        ref_arith = ref_dtype_name
    reference_rounded = is_float_format(out_name) and ref_dtype_name == out_name and unit_roundoff(out_name) > unit_roundoff(
        "float32"
    )
    k = max(1, int(reduction_length or 1))
    b = np.asarray(ref, dtype=np.float64)
    finite = _finite_values(b)
    abs_finite = np.abs(finite)
    R_ref = float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0
    R = max(R_ref, float(magnitude_rms or 0.0))
    max_abs = float(abs_finite.max()) if finite.size else 0.0
    n = int(b.size)

    reasoning = [
        f"dtypes: inputs {in_name} (u = {_pow2(unit_roundoff(in_name))}), TensorE/compute operands {comp}, "
        f"accumulation {acc} ({_dtype_u(unit_roundoff(acc))}), output {out_name} ({_dtype_u(unit_roundoff(out_name))}), "
        f"reference arithmetic {ref_arith}",
        f"K = {k} ({k_source or 'given'})",
        f"reference magnitudes: max|ref| = {g(max_abs)}, rms R = {g(R_ref)} over {n} elements",
    ]
    if R > R_ref:
        reasoning.append(
            f"the partial sums are larger than the results (cancellation): the model uses R = {g(R)}, "
            "the rms the same terms would give without cancelling"
        )
    model, lines = build_error_model(
        op=op,
        k=k,
        count=n,
        ref_rms=R,
        compute_dtype=comp,
        input_dtype=in_name,
        accumulation_dtype=acc,
        output_dtype=out_name,
        reference_dtype=ref_arith,
        reference_rounded=reference_rounded,
        input_max_abs=input_max_abs,
        input_condition=input_condition,
    )
    reasoning += lines
    u_acc = unit_roundoff(acc)
    sum_abs = max(max_abs, math.sqrt(2.0 * k / math.pi) * R)
    worst = (k - 1) * u_acc * sum_abs if k > 1 else 0.0
    if k > 1:
        reasoning.append(
            f"worst case (every rounding in the same direction): (K-1)*u_acc*sum|terms| ~ {g(worst)}; "
            "linear in K, a bound random data never approaches, so the advice uses the random walk"
        )
    # The envelope grows with |s| (every term, and every rounding of it, is monotone), so its
    # largest value is the one at the largest |s|: no need to evaluate it everywhere for that.
    expected_max = float(model.envelope(np.array([max_abs]))[0]) if finite.size else 0.0
    sig = model.sigma(finite) if finite.size else np.zeros(0)
    expected_rel_l2 = (
        float(np.sqrt(np.mean(sig**2 + (model.rounding_rel * abs_finite + model.rounding_abs) ** 2 / 3.0))) / R
        if R > 0 else None
    )
    a = math.sqrt(model.floor_sq)
    bcoef = math.sqrt(model.rel_sq)
    floor = unit_roundoff(out_name) * R / 16.0 if is_float_format(out_name) else 0.0
    reasoning.append(
        f"expected largest error: z*sigma + rounding, i.e. about {g(model.tail * a + model.rounding_abs)} + "
        f"{g(model.tail * bcoef + model.rounding_rel)}*|s|; at most {g(expected_max)} here"
    )

    advised: dict[str, TolerancePolicy] = {}
    notes: list[str] = []
    exact_ok = expected_max == 0.0 and model.floor_sq == 0.0 and model.rel_sq == 0.0 and model.rounding_rel == 0.0
    if exact_ok:
        advised["exact"] = TolerancePolicy(kind="exact")
    atol = nice_ceil(safety * max(model.tail * a + model.rounding_abs, floor))
    rtol = nice_ceil(safety * (model.tail * bcoef + model.rounding_rel))
    advised["allclose"] = TolerancePolicy(kind="allclose", atol=atol, rtol=rtol)
    if max_abs > 0:
        advised["range_relative"] = TolerancePolicy(
            kind="range_relative", atol=0.0, rtol=nice_ceil(safety * max(expected_max, floor) / max_abs)
        )
    else:
        advised["range_relative"] = TolerancePolicy(kind="range_relative", atol=atol, rtol=0.0)
    if expected_rel_l2 is not None and expected_rel_l2 > 0:
        advised["rel_l2"] = TolerancePolicy(kind="rel_l2", tol=nice_ceil(safety * expected_rel_l2))
    if is_float_format(out_name) and finite.size:
        ulps = float(np.max(model.envelope(finite) / spacing(finite, out_name)))
        if ulps <= 256:
            advised["ulp"] = TolerancePolicy(kind="ulp", max_ulp=max(1, math.ceil(safety * ulps)))
        else:
            notes.append(
                f"ULP tolerance not advised: near-zero outputs would need {g(ulps)} ULPs, because the error "
                "follows the partial sums, not the result"
            )
    recommended = "exact" if exact_ok else "allclose"
    reasoning.append(
        f"advice (x{safety:g} safety, rounded up): "
        + "; ".join(_describe(p) for p in advised.values())
        + f"; recommended: {recommended}"
    )
    reasoning += notes
    return ToleranceAdvice(
        name=name,
        op=op,
        reduction_length=k,
        k_source=k_source or "given",
        input_dtype=in_name,
        compute_dtype=comp,
        accumulation_dtype=acc,
        output_dtype=out_name,
        reference_dtype=ref_arith,
        reference_rounded=reference_rounded,
        count=n,
        ref_max_abs=max_abs,
        ref_rms=R,
        model=model,
        expected_max_abs=expected_max,
        expected_rel_l2=expected_rel_l2,
        worst_case_abs=worst,
        advised=advised,
        recommended=recommended,
        reasoning=tuple(reasoning),
        safety=safety,
        notes=tuple(notes),
    )


def partial_sum_rms(abs_reference: np.ndarray, k: int) -> float:
    """The rms R that the model needs, from the reference run on |inputs| (sum of |terms| per element).

    For zero-mean terms sum|t| ~ sqrt(2K/pi)*R, so R ~ rms(sum|t|)*sqrt(pi/(2K)). Meaningful for ops
    linear in each input (matmul, sums, scans).
    """
    a = np.asarray(abs_reference).astype(np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0 or k <= 1:
        return 0.0
    return float(np.sqrt(np.mean(a**2))) * math.sqrt(math.pi / (2.0 * k))


def _describe(p: TolerancePolicy) -> str:
    return p.describe()


# ---------------------------------------------------------------------------------------------
# Warnings about the task's own tolerance


def _constant_that_passes(prepared: Reference, policy: TolerancePolicy, dtype: str) -> float | None:
    """A constant output that passes `policy`, if one exists (exact for allclose/range_relative)."""
    ref = prepared.values
    b = ref if prepared.all_finite else ref[prepared.finite]
    if b.size == 0:
        return None
    if policy.kind in ("allclose", "range_relative"):
        if policy.kind == "allclose":
            t = policy.atol + policy.rtol * np.abs(b)
        else:
            t = np.full(b.shape, policy.atol + policy.rtol * float(np.abs(b).max()))
        lo, hi = float(np.max(b - t)), float(np.min(b + t))
        if lo > hi:
            return None
        c = (lo + hi) / 2.0
    elif policy.kind == "rel_l2":
        c = float(b.mean())
    else:
        c = float(np.median(b))
        if is_float_format(dtype):
            c = float(round_to(np.array([c]), dtype)[0])
    candidate = np.full(ref.shape, c)
    if not prepared.all_finite:
        candidate[~prepared.finite] = ref[~prepared.finite]
    return c if check_policy(candidate, prepared, policy, dtype).passed else None


LOOSE_FACTOR = 100.0  # a tolerance admitting this many times the advised error gets NUM-TOL-LOOSE


def allowed_error(policy: TolerancePolicy, rms: float, max_abs: float, dtype: str) -> float | None:
    """The error `policy` admits at an element of the output's rms size (None: no such number, exact)."""
    if policy.kind == "allclose":
        return policy.atol + policy.rtol * rms
    if policy.kind == "range_relative":
        return policy.atol + policy.rtol * max_abs
    if policy.kind == "rel_l2":
        return policy.tol * rms  # ||e|| <= tol*||ref||: an rms error of tol*rms
    if policy.kind == "ulp" and is_float_format(dtype):
        return policy.max_ulp * float(spacing(np.array([max(rms, 1e-30)]), dtype)[0])
    return None


def tolerance_looseness(policy: TolerancePolicy, advice: ToleranceAdvice, dtype: str) -> tuple[float, TolerancePolicy] | None:
    """How many times the error the task's tolerance admits exceeds what the advisor's own policy of the same
    kind (else its recommended one) admits, at an element of the output's rms size; None when not comparable."""
    advised = advice.advised.get(policy.kind) or advice.policy
    rms = advice.ref_rms
    if rms <= 0 or not math.isfinite(rms):
        return None
    mine = allowed_error(policy, rms, advice.ref_max_abs, dtype)
    theirs = allowed_error(advised, rms, advice.ref_max_abs, dtype)
    if mine is None or theirs is None or theirs <= 0 or not math.isfinite(mine):
        return None
    return mine / theirs, advised


def _loose_finding(name: str, policy: TolerancePolicy, advice: ToleranceAdvice, dtype: str) -> list[Finding]:
    measured = tolerance_looseness(policy, advice, dtype)
    if measured is None or measured[0] <= LOOSE_FACTOR:
        return []
    ratio, advised = measured
    return [numerics_finding(
        rules.TOL_LOOSE,
        "medium",
        f"Tolerance for `{name}` is {ratio:.0f}x looser than nkitui's advice",
        f"task.toml [[outputs]] `{name}` tolerance ({policy.describe()}) admits an error of "
        f"{g(allowed_error(policy, advice.ref_rms, advice.ref_max_abs, dtype))} "
        + ("at any element" if policy.kind == "range_relative" else f"at an element of the output's rms size ({g(advice.ref_rms)})")
        + f", {ratio:.0f}x what the advisor's {advised.describe()} admits for a correct port "
        f"(K = {advice.reduction_length}, {advice.accumulation_dtype} accumulation, output {advice.output_dtype}; the advice "
        f"already carries x{advice.safety:g} safety over an error model on the high side). A kernel wrong in a few "
        f"elements, or by a dropped term, can pass it. Fix: tighten the tolerance towards {advised.describe()}, or say "
        "in the task why this much error is right.",
        {"output": name, "file": "task.toml", "field": "tolerance", "policy": policy.to_dict(),
         "advised": advised.to_dict(), "ratio": ratio, "reduction_length": advice.reduction_length},
        file="task.toml",
    )]


def tolerance_sanity(
    name: str,
    reference: "np.ndarray | Reference",
    policy: TolerancePolicy | Mapping[str, Any],
    dtype: str,
    inputs: Mapping[str, np.ndarray] | None = None,
    advice: ToleranceAdvice | None = None,
    seed: int = 0,
) -> list[Finding]:
    """Warnings about the task's tolerance for one output, judged on one reference output.

    NUM-ZEROS-PASS / NUM-CONST-PASS / NUM-ECHO-PASS: a trivial output would pass.
    NUM-TOL-TIGHT: a correct result (the reference correctly rounded to the output dtype, plus an
    optimistic accumulation-order drift) would fail.
    NUM-TOL-LOOSE: the tolerance admits more than LOOSE_FACTOR times the advisor's error (`advice` given).
    """
    policy = as_policy(policy)
    out_dtype = format_name(dtype)
    prepared = reference if isinstance(reference, Reference) else Reference(np.asarray(reference))
    ref = prepared.values
    findings: list[Finding] = []
    finite = ref if prepared.all_finite else ref[prepared.finite]
    max_abs = float(np.abs(finite).max()) if finite.size else 0.0
    pol = policy.describe()
    hint = f" The advisor suggests {advice.policy.describe()}." if advice is not None else ""
    if finite.size == 0:
        return findings
    all_zero_ref = max_abs == 0.0

    zeros = np.zeros(ref.shape) if prepared.all_finite else np.where(prepared.finite, 0.0, ref)
    if not all_zero_ref and check_policy(zeros, prepared, policy, out_dtype).passed:
        findings.append(
            numerics_finding(
                rules.ZEROS_PASS,
                "high",
                f"An all-zeros `{name}` passes the tolerance",
                f"The tolerance for output `{name}` ({pol}) is loose enough that an output of all zeros passes: "
                f"the largest reference value is {g(max_abs)}"
                + (f", below atol = {g(policy.atol)}" if policy.kind in ("allclose", "range_relative") and policy.atol >= max_abs else "")
                + ". The test cannot tell a kernel that computes nothing from a correct one; tighten the tolerance "
                "or scale the inputs so the outputs stand well above it." + hint,
                {"output": name, "policy": policy.to_dict(), "ref_max_abs": max_abs},
            )
        )
    else:
        c = _constant_that_passes(prepared, policy, out_dtype)
        if c is not None:
            constant_ref = bool(finite.size) and float(finite.max() - finite.min()) == 0.0
            findings.append(
                numerics_finding(
                    rules.CONST_PASS,
                    "medium",
                    f"A constant `{name}` passes the tolerance",
                    f"For output `{name}`, a kernel that writes the constant {g(c)} everywhere passes the tolerance "
                    f"({pol}); the reference ranges over [{g(float(finite.min()))}, {g(float(finite.max()))}]. "
                    + ("The test inputs make the reference itself constant, so they cannot show whether the kernel "
                       "computes anything; use inputs that vary." if constant_ref else
                       "The test cannot tell the computation from a constant; tighten the tolerance.")
                    + hint,
                    {"output": name, "constant": c, "policy": policy.to_dict(), "ref_min": float(finite.min()),
                     "ref_max": float(finite.max())},
                )
            )
    for in_name, arr in (inputs or {}).items():
        a = np.asarray(arr)
        if a.size != ref.size or a.dtype.kind not in "fiub" and a.dtype.kind != "V":
            continue
        echo = np.asarray(a, dtype=np.float64).reshape(ref.shape)
        if prepared.same_values(echo):
            continue  # the op is an identity on these inputs: nothing to learn
        if check_policy(echo, prepared, policy, out_dtype).passed:
            findings.append(
                numerics_finding(
                    rules.ECHO_PASS,
                    "high",
                    f"Returning input `{in_name}` unchanged passes for `{name}`",
                    f"A kernel that copies input `{in_name}` to output `{name}` without computing anything passes "
                    f"the tolerance ({pol}). The test cannot tell the operation from a copy; tighten the tolerance or "
                    "choose inputs for which the operation changes the values." + hint,
                    {"output": name, "input": in_name, "policy": policy.to_dict()},
                )
            )

    if advice is not None and not findings:  # a trivial output passing says it louder
        findings += _loose_finding(name, policy, advice, out_dtype)

    if is_float_format(out_dtype):
        rounded = prepared.rounded(out_dtype)
        if rounded is ref:  # the reference is already in the output dtype: it passes against itself
            out_rounding = PolicyOutcome(passed=True, mismatches=0, total=int(ref.size))
        else:
            out_rounding = check_policy(rounded, prepared, policy, out_dtype)
        drift_fail = None
        if advice is not None and (advice.model.floor_sq > 0 or advice.model.rel_sq > 0):
            rng = np.random.default_rng(seed)
            noise = rng.standard_normal(ref.shape) * advice.model.sigma(np.nan_to_num(ref), OPTIMISTIC)
            drifted = round_to(ref + np.where(np.isfinite(ref), noise, 0.0), out_dtype)
            drift = check_policy(drifted, prepared, policy, out_dtype)
            if not drift.passed and (drift.mismatches > max(1, drift.total // 1000) or policy.kind == "rel_l2"):
                drift_fail = drift
        if not out_rounding.passed or drift_fail is not None:
            if not out_rounding.passed:
                what = (
                    f"the reference correctly rounded to {out_dtype} fails it"
                    + (f" in {out_rounding.mismatches} of {out_rounding.total} elements" if policy.kind != "rel_l2" else
                       f" (relative L2 {g(out_rounding.statistic)} > {g(policy.tol)})")
                    + f" ({out_dtype} unit roundoff {g(unit_roundoff(out_dtype))})"
                )
                severity: Severity = "high"
            else:
                assert drift_fail is not None and advice is not None
                what = (
                    f"a result carrying a quarter of the expected accumulation-order drift for K = {advice.reduction_length} "
                    f"({advice.accumulation_dtype} accumulation) fails it"
                    + (f" in {drift_fail.mismatches} of {drift_fail.total} elements" if policy.kind != "rel_l2" else
                       f" (relative L2 {g(drift_fail.statistic)} > {g(policy.tol)})")
                )
                severity = "medium"
            findings.append(
                numerics_finding(
                    rules.TOL_TIGHT,
                    severity,
                    f"Tolerance for `{name}` is tighter than {out_dtype} arithmetic allows",
                    f"The tolerance for output `{name}` ({pol}) is tighter than the reference's own dtype error: {what}. "
                    "A correct result on Trainium or on the GPU would fail this test." + hint,
                    {"output": name, "policy": policy.to_dict(), "rounding_mismatches": out_rounding.mismatches,
                     "drift_mismatches": drift_fail.mismatches if drift_fail else 0, "dtype": out_dtype},
                )
            )
    return findings


def _finite_values(x: np.ndarray) -> np.ndarray:
    """The finite values of `x`: `x` itself when all are (no copy), else a flat copy of them."""
    finite = np.isfinite(x)
    return x if finite.all() else x[finite]


def _float_view(a: np.ndarray) -> np.ndarray | None:
    """A float array holding exactly the values of `a` (float32 for bf16/fp8), or None."""
    if a.dtype.kind == "f":
        return a
    try:
        return np.asarray(a, dtype=np.float32 if a.dtype.itemsize <= 2 else np.float64)
    except (TypeError, ValueError):
        return None


def _input_max_abs(inputs: Mapping[str, np.ndarray]) -> float:
    best = 0.0
    for arr in inputs.values():
        a = np.asarray(arr)
        if a.dtype.kind in "fV" and a.size:
            f = _float_view(a)  # |x| and max are exact in the input's own precision
            if f is None:
                continue
            f = _finite_values(f)
            if f.size:
                best = max(best, float(np.abs(f).max()))
    return best


def _input_condition(inputs: Mapping[str, np.ndarray]) -> float:
    """rms(x)/std(x) of the largest float input: >> 1 when its values sit on a large common offset."""
    x = None
    for arr in inputs.values():  # the first of the largest convertible float inputs
        a = np.asarray(arr)
        if a.dtype.kind in "fV" and a.size > 1 and (x is None or a.size > x.size):
            try:
                x = np.asarray(a, dtype=np.float64)
            except (TypeError, ValueError):
                continue
    if x is None:
        return 1.0
    x = _finite_values(x)
    std = float(x.std()) if x.size > 1 else 0.0
    if std == 0.0:
        return 1.0
    return max(1.0, float(np.sqrt(np.mean(x**2))) / std)


def reduction_length_for(spec: Any, inputs: Mapping[str, np.ndarray], op: str | None) -> tuple[int, str]:
    """K for an output spec (anything with .shape and optional .reduction_length): the manifest's or inferred."""
    k = getattr(spec, "reduction_length", None)
    declared = getattr(spec, "declared_reduction_length", None)  # kbound.BoundedOutput
    if k and declared:
        return int(k), f"the manifest declares {declared}, more than the kernel can sum: held to its bound (NUM-K-EXCEEDS-BOUND)"
    if k:
        return int(k), "from the manifest"
    k, why = infer_reduction_length({n: np.shape(a) for n, a in inputs.items()}, tuple(spec.shape), op)
    return k, f"inferred: {why}"


def advise_output(
    spec: Any,
    reference: np.ndarray,
    inputs: Mapping[str, np.ndarray],
    op: str | None = None,
    *,
    accumulation_dtype: str = "float32",
    compute_dtype: str | None = None,
    magnitude_rms: float | None = None,
    safety: float = 2.0,
) -> ToleranceAdvice:
    """`advise_tolerance` for an output spec (the task's TensorSpec: name, shape, dtype, reduction_length)."""
    k, source = reduction_length_for(spec, inputs, op)
    input_dtypes = [format_name(np.asarray(a).dtype) for a in inputs.values()]
    return advise_tolerance(
        spec.name,
        reference,
        spec.dtype,
        input_dtypes,
        reduction_length=k,
        k_source=source,
        op=op,
        accumulation_dtype=accumulation_dtype,
        compute_dtype=compute_dtype,
        magnitude_rms=magnitude_rms,
        input_max_abs=_input_max_abs(inputs),
        input_condition=_input_condition(inputs),
        safety=safety,
    )

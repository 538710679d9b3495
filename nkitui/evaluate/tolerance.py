"""Tolerance policies and how an output is judged against its reference under each of them.

The policy type is the task model's `Tolerance` (kind, atol, rtol, tol, max_ulp), so a manifest's
policy is used as it is. Every comparison happens in float64. Non-finite values follow one rule
under every kind: NaN matches NaN, an infinity matches the same infinity, and any other pairing
that involves a NaN or an infinity is a mismatch.

Element-wise rules (docs/numerics.md has the same table):

  allclose        |a-b| <= atol + rtol*|ref|
  range_relative  |a-b| <= atol + rtol*max|ref|         (nki-library maxAllClose)
  rel_l2          ||a-b||_2 <= tol*||ref||_2             (norm-wise; an element "mismatches" when
                                                          |a-b| > tol*||ref||_2/sqrt(n), its fair share)
  ulp             ULP distance in the output dtype <= max_ulp
  exact           bitwise-equal values in the output dtype
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from nkitui.evaluate.fpformat import format_name, is_float_format, round_to, ulp_distance
from nkitui.task.model import TOLERANCE_KINDS, Tolerance

TolerancePolicy = Tolerance
"""A tolerance policy: the task model's Tolerance (kind, atol, rtol, tol, max_ulp)."""


def policy_from_dict(d: Mapping[str, Any], where: str = "tolerance") -> TolerancePolicy:
    """Build a policy from a dict such as ``{"kind": "allclose", "atol": 1e-3, "rtol": 1e-2}``.

    `where` names the field in error messages (e.g. ``outputs[0].tolerance``).
    """
    kind = d.get("kind", "allclose")
    if kind not in TOLERANCE_KINDS:
        raise ValueError(f"{where}.kind: unknown kind {kind!r}; use one of {', '.join(TOLERANCE_KINDS)}")
    values: dict[str, Any] = {"kind": kind}
    for key, cast in (("atol", float), ("rtol", float), ("tol", float), ("max_ulp", int)):
        if key in d and d[key] is not None:
            try:
                values[key] = cast(d[key])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}.{key}: expected a number, got {d[key]!r}") from exc
            if values[key] < 0:
                raise ValueError(f"{where}.{key}: must be >= 0, got {d[key]!r}")
    if kind == "rel_l2" and values.get("tol", 0.0) <= 0.0:
        raise ValueError(f"{where}.tol: rel_l2 needs a positive tol, e.g. tol = 2e-5")
    return TolerancePolicy(**values)


def as_policy(policy: TolerancePolicy | Mapping[str, Any]) -> TolerancePolicy:
    if isinstance(policy, Tolerance):
        return policy
    if isinstance(policy, Mapping):
        return policy_from_dict(policy)
    fields = {k: getattr(policy, k) for k in ("kind", "atol", "rtol", "tol", "max_ulp") if hasattr(policy, k)}
    return policy_from_dict(fields)


def policy_to_dict(policy: TolerancePolicy) -> dict[str, Any]:
    return policy.to_dict()


def describe_policy(policy: TolerancePolicy) -> str:
    """Short human wording, e.g. 'allclose atol=1e-05 rtol=1e-05'."""
    return policy.describe()


def _as_f64(x: np.ndarray) -> np.ndarray:
    arr = np.asarray(x)
    try:
        return np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot compare an array of dtype {arr.dtype}: expected numbers") from exc


@dataclass(frozen=True)
class NonFiniteMatch:
    """Where non-finite values decide the comparison on their own."""

    decided: np.ndarray  # bool: at least one side is NaN or an infinity
    matched: np.ndarray  # bool: decided and the pair counts as equal


def nonfinite_match(a: np.ndarray, b: np.ndarray) -> NonFiniteMatch:
    if np.isfinite(a).all() and np.isfinite(b).all():
        none = np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b)), dtype=bool)
        return NonFiniteMatch(decided=none, matched=none)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    decided = nan_a | nan_b | inf_a | inf_b
    same_inf = inf_a & inf_b & (np.sign(a) == np.sign(b))
    matched = (nan_a & nan_b) | same_inf
    return NonFiniteMatch(decided=decided, matched=matched)


def element_mismatches(
    actual: np.ndarray,
    expected: np.ndarray,
    policy: TolerancePolicy,
    dtype: str | np.dtype | None = None,
    ulps: np.ndarray | None = None,
) -> np.ndarray:
    """Boolean array: True where an element breaks `policy` (see the module docstring).

    `dtype` is the output dtype (for ulp/exact); defaults to the dtype of `actual`. `ulps`: the
    ULP distances, when the caller already has them.
    """
    a, b = _as_f64(actual), _as_f64(expected)
    if a.shape != b.shape:
        raise ValueError(f"shape {a.shape} of the result differs from the reference's {b.shape}")
    nf = nonfinite_match(a, b)
    all_finite = not nf.decided.any()
    finite = ~nf.decided
    out_dtype = format_name(dtype if dtype is not None else np.asarray(actual).dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - b) if all_finite else np.where(finite, np.abs(a - b), 0.0)
        kind = policy.kind
        if kind == "allclose":
            bad = err > policy.atol + policy.rtol * np.abs(b if all_finite else np.where(finite, b, 0.0))
        elif kind == "range_relative":
            bad = err > policy.atol + policy.rtol * _max_abs_finite(b)
        elif kind == "rel_l2":
            n = max(int(finite.sum()), 1)
            share = policy.tol * float(np.sqrt(np.sum(np.where(finite, b, 0.0) ** 2))) / np.sqrt(n)
            bad = err > share
        elif kind == "ulp":
            if is_float_format(out_dtype):
                bad = (ulps if ulps is not None else ulp_distance(a, b, out_dtype)) > policy.max_ulp
            else:
                bad = err > policy.max_ulp
        elif kind == "exact":
            if is_float_format(out_dtype):
                ra, rb = round_to(a, out_dtype), round_to(b, out_dtype)
                bad = (ra != rb) | (np.signbit(ra) != np.signbit(rb))
            else:
                bad = a != b
        else:
            raise ValueError(f"unknown tolerance kind {kind!r}; use one of {', '.join(TOLERANCE_KINDS)}")
    return bad if all_finite else np.where(nf.decided, ~nf.matched, bad)


def _max_abs_finite(b: np.ndarray) -> float:
    finite = np.isfinite(b)
    return float(np.max(np.abs(b[finite]))) if finite.any() else 0.0


def rel_l2_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||a-b||_2 / ||ref||_2 over the elements where both are finite (inf when ref is all zeros and a is not)."""
    a, b = _as_f64(actual), _as_f64(expected)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = float(np.sqrt(np.sum((a[finite] - b[finite]) ** 2)))
    norm = float(np.sqrt(np.sum(b[finite] ** 2)))
    if norm == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / norm


@dataclass(frozen=True)
class PolicyOutcome:
    passed: bool
    mismatches: int
    total: int
    statistic: float | None = None  # rel_l2: the measured ratio; ulp: the largest distance
    limit: float | None = None  # the bound the statistic is held to

    @property
    def fraction(self) -> float:
        return self.mismatches / self.total if self.total else 0.0


def check_policy(
    actual: np.ndarray,
    expected: np.ndarray,
    policy: TolerancePolicy,
    dtype: str | np.dtype | None = None,
    ulps: np.ndarray | None = None,
) -> PolicyOutcome:
    """Does `actual` pass `policy` against `expected`? rel_l2 is judged norm-wise, the rest per element.

    `ulps`: the ULP distances in the output dtype, when the caller already has them.
    """
    policy = as_policy(policy)
    bad = element_mismatches(actual, expected, policy, dtype, ulps)
    total = int(bad.size)
    mismatches = int(bad.sum())
    if policy.kind == "rel_l2":
        a, b = _as_f64(actual), _as_f64(expected)
        nf = nonfinite_match(a, b)
        nonfinite_bad = int((nf.decided & ~nf.matched).sum())
        ratio = rel_l2_error(a, b)
        return PolicyOutcome(
            passed=nonfinite_bad == 0 and ratio <= policy.tol,
            mismatches=mismatches,
            total=total,
            statistic=ratio,
            limit=policy.tol,
        )
    if policy.kind == "ulp":
        out_dtype = format_name(dtype if dtype is not None else np.asarray(actual).dtype)
        if is_float_format(out_dtype):
            dist = ulps if ulps is not None else ulp_distance(_as_f64(actual), _as_f64(expected), out_dtype)
            both_nan = np.isnan(_as_f64(actual)) & np.isnan(_as_f64(expected))
            worst = float(np.max(np.where(both_nan, 0.0, dist))) if dist.size else 0.0
            return PolicyOutcome(mismatches == 0, mismatches, total, statistic=worst, limit=float(policy.max_ulp))
    return PolicyOutcome(passed=mismatches == 0, mismatches=mismatches, total=total)


def passes(
    actual: np.ndarray, expected: np.ndarray, policy: TolerancePolicy, dtype: str | np.dtype | None = None
) -> bool:
    return check_policy(actual, expected, policy, dtype).passed

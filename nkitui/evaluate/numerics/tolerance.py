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
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from nkitui.evaluate.numerics.fpformat import KeyedValues, format_name, is_float_format, keyed, round_to, ulp_distance_keyed
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


class Reference:
    """A reference output prepared once for many comparisons (the task's policy, the advice, the
    defaults, and the sanity checks' zeros/constant/echo candidates all compare against it).

    Everything is derived lazily from the float64 values and kept: finiteness, |ref|, the largest
    finite magnitude, the values rounded to an output dtype and their ULP keys. Treat the array as
    read-only while the Reference is in use.
    """

    def __init__(self, values: np.ndarray) -> None:
        raw = np.asarray(values)
        self.values = _as_f64(raw)
        # the format the values were given in: rounding to it changes nothing
        self.source_format = format_name(raw.dtype) if is_float_format(raw.dtype) else None
        self._keyed: dict[str, KeyedValues] = {}
        self._rounded: dict[str, np.ndarray] = {}

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @cached_property
    def finite(self) -> np.ndarray:
        finite: np.ndarray = np.isfinite(self.values)
        return finite

    @cached_property
    def all_finite(self) -> bool:
        return bool(self.finite.all())

    @cached_property
    def abs(self) -> np.ndarray:
        magnitude: np.ndarray = np.abs(self.values)
        return magnitude

    @cached_property
    def max_abs_finite(self) -> float:
        if self.all_finite:
            return float(self.abs.max()) if self.values.size else 0.0
        return float(np.max(self.abs[self.finite])) if self.finite.any() else 0.0

    @cached_property
    def sum_sq(self) -> float:
        """Sum of squares of the whole array (meaningful when every value is finite)."""
        return float(np.sum(self.values**2))

    def keyed(self, dtype: str) -> KeyedValues:
        if dtype not in self._keyed:
            self._keyed[dtype] = keyed(self.values, dtype)
        return self._keyed[dtype]

    def rounded(self, dtype: str) -> np.ndarray:
        """The values correctly rounded to `dtype`, as float64 (the values themselves when they are
        already in that format)."""
        if dtype not in self._rounded:
            same = self.source_format is not None and format_name(dtype) == self.source_format
            self._rounded[dtype] = self.values if same else round_to(self.values, dtype)
        return self._rounded[dtype]

    def same_values(self, other: np.ndarray) -> bool:
        """`other` holds exactly these values (NaN where these are NaN)."""
        x = np.asarray(other)
        if x.shape != self.shape:
            return False
        equal = x == self.values
        if self.all_finite:
            return bool(equal.all())
        return bool((equal | (np.isnan(x) & np.isnan(self.values))).all())


class Comparison:
    """One result against one reference, in float64, under any number of policies.

    What the policies share (non-finite matching, |a - b|, ULP distances, the relative L2 error)
    is computed once, on first use. `check_policy` and `element_mismatches` are one-policy
    shortcuts over this class.
    """

    def __init__(
        self,
        actual: np.ndarray,
        expected: "np.ndarray | Reference",
        dtype: str | np.dtype | None = None,
        ulps: np.ndarray | None = None,
    ) -> None:
        self.ref = expected if isinstance(expected, Reference) else Reference(expected)
        self.a, self.b = _as_f64(actual), self.ref.values
        if self.a.shape != self.b.shape:
            raise ValueError(f"shape {self.a.shape} of the result differs from the reference's {self.b.shape}")
        self.dtype = format_name(dtype if dtype is not None else np.asarray(actual).dtype)
        self.is_float = is_float_format(self.dtype)
        if ulps is not None:
            self.__dict__["ulps"] = ulps
        self._outcomes: dict[TolerancePolicy, tuple[np.ndarray, PolicyOutcome]] = {}

    @cached_property
    def all_finite(self) -> bool:
        """Both sides finite everywhere (the common case: no masks needed)."""
        return self.ref.all_finite and bool(np.isfinite(self.a).all())

    @cached_property
    def nonfinite(self) -> NonFiniteMatch:
        if self.all_finite:
            none = np.zeros(self.a.shape, dtype=bool)
            return NonFiniteMatch(decided=none, matched=none)
        return nonfinite_match(self.a, self.b)

    @cached_property
    def both_finite(self) -> np.ndarray:
        return ~self.nonfinite.decided

    @cached_property
    def err(self) -> np.ndarray:
        """|a - b| where both are finite, 0 elsewhere."""
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.asarray(np.subtract(self.a, self.b))
            np.abs(diff, out=diff)
        if not self.all_finite:
            diff[~self.both_finite] = 0.0
        return diff

    @cached_property
    def keyed(self) -> KeyedValues:
        """The result rounded to the output dtype (a float format), keyed for ULP distances."""
        return keyed(self.a, self.dtype)

    @cached_property
    def ulps(self) -> np.ndarray:
        """ULP distances in the output dtype (a float format)."""
        return ulp_distance_keyed(self.keyed, self.ref.keyed(self.dtype))

    @cached_property
    def rel_l2(self) -> float:
        """||a-b||_2 / ||ref||_2 over the elements where both are finite (see `rel_l2_error`)."""
        if self.all_finite:
            diff = float(np.sqrt(np.sum(self.err**2)))
            norm = float(np.sqrt(self.ref.sum_sq))
        else:
            finite = self.both_finite
            diff = float(np.sqrt(np.sum((self.a[finite] - self.b[finite]) ** 2)))
            norm = float(np.sqrt(np.sum(self.b[finite] ** 2)))
        if norm == 0.0:
            return 0.0 if diff == 0.0 else float("inf")
        return diff / norm

    def mismatches(self, policy: TolerancePolicy) -> np.ndarray:
        """Boolean array: True where an element breaks `policy` (see the module docstring)."""
        return self._judge(policy)[0]

    def outcome(self, policy: TolerancePolicy) -> PolicyOutcome:
        return self._judge(policy)[1]

    def _judge(self, policy: TolerancePolicy) -> tuple[np.ndarray, PolicyOutcome]:
        policy = as_policy(policy)
        if policy not in self._outcomes:
            bad = self._element_mismatches(policy)
            self._outcomes[policy] = (bad, self._outcome(policy, bad))
        return self._outcomes[policy]

    def _element_mismatches(self, policy: TolerancePolicy) -> np.ndarray:
        a, b = self.a, self.b
        all_finite = self.all_finite
        with np.errstate(invalid="ignore", over="ignore"):
            kind = policy.kind
            if kind == "allclose":
                ref_abs = self.ref.abs if all_finite else np.where(self.both_finite, self.ref.abs, 0.0)
                limit = np.asarray(np.multiply(policy.rtol, ref_abs))
                limit += policy.atol
                bad = self.err > limit
            elif kind == "range_relative":
                bad = self.err > policy.atol + policy.rtol * self.ref.max_abs_finite
            elif kind == "rel_l2":
                if all_finite:
                    n, sum_sq = max(int(b.size), 1), self.ref.sum_sq
                else:
                    n = max(int(self.both_finite.sum()), 1)
                    sum_sq = float(np.sum(np.where(self.both_finite, b, 0.0) ** 2))
                bad = self.err > policy.tol * float(np.sqrt(sum_sq)) / np.sqrt(n)
            elif kind == "ulp":
                bad = self.ulps > policy.max_ulp if self.is_float else self.err > policy.max_ulp
            elif kind == "exact":
                if self.is_float:  # the rounded values differ, or differ in sign (+0 vs -0)
                    bad = ~self.keyed.same_as(self.ref.keyed(self.dtype))
                else:
                    bad = a != b
            else:
                raise ValueError(f"unknown tolerance kind {kind!r}; use one of {', '.join(TOLERANCE_KINDS)}")
        if all_finite:
            return bad
        nf = self.nonfinite
        return np.where(nf.decided, ~nf.matched, bad)

    def _outcome(self, policy: TolerancePolicy, bad: np.ndarray) -> PolicyOutcome:
        total = int(bad.size)
        mismatches = int(np.count_nonzero(bad))
        if policy.kind == "rel_l2":
            nonfinite_bad = 0 if self.all_finite else int(np.count_nonzero(self.nonfinite.decided & ~self.nonfinite.matched))
            ratio = self.rel_l2
            return PolicyOutcome(passed=nonfinite_bad == 0 and ratio <= policy.tol, mismatches=mismatches, total=total,
                                 statistic=ratio, limit=policy.tol)
        if policy.kind == "ulp" and self.is_float:
            # ulp_distance is 0 where both are NaN, so the largest distance is the statistic as it is
            worst = float(np.max(self.ulps)) if self.ulps.size else 0.0
            return PolicyOutcome(mismatches == 0, mismatches, total, statistic=worst, limit=float(policy.max_ulp))
        return PolicyOutcome(passed=mismatches == 0, mismatches=mismatches, total=total)


def element_mismatches(
    actual: np.ndarray,
    expected: "np.ndarray | Reference",
    policy: TolerancePolicy,
    dtype: str | np.dtype | None = None,
    ulps: np.ndarray | None = None,
) -> np.ndarray:
    """Boolean array: True where an element breaks `policy` (see the module docstring).

    `dtype` is the output dtype (for ulp/exact); defaults to the dtype of `actual`. `ulps`: the
    ULP distances, when the caller already has them. `expected` may be a prepared Reference.
    """
    return Comparison(actual, expected, dtype, ulps).mismatches(policy)


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
    expected: "np.ndarray | Reference",
    policy: TolerancePolicy,
    dtype: str | np.dtype | None = None,
    ulps: np.ndarray | None = None,
) -> PolicyOutcome:
    """Does `actual` pass `policy` against `expected`? rel_l2 is judged norm-wise, the rest per element.

    `ulps`: the ULP distances in the output dtype, when the caller already has them. `expected`
    may be a prepared Reference (cheaper for several checks against the same reference).
    """
    return Comparison(actual, expected, dtype, ulps).outcome(as_policy(policy))


def passes(
    actual: np.ndarray, expected: np.ndarray, policy: TolerancePolicy, dtype: str | np.dtype | None = None
) -> bool:
    return check_policy(actual, expected, policy, dtype).passed

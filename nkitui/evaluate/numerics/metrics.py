"""Error metrics of one output against its reference, all computed in float64.

For each output: max absolute and relative error, ULP error in the output dtype, relative L2,
mismatch count and fraction under every convention (allclose, range_relative, rel_l2, ulp,
exact), the worst elements with both values, NaN/Inf accounting, and a per-tile heat map.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from nkitui.common.codec import Record

from nkitui.evaluate.numerics.fpformat import format_name, unit_roundoff
from nkitui.evaluate.numerics.heatmap import DEFAULT_TILE, MAX_CELLS, Localisation, TileHeatmap, localise, tile_heatmap
from nkitui.evaluate.numerics.tolerance import Comparison, Reference, TolerancePolicy, as_policy, nonfinite_match
from nkitui.task.model import TOLERANCE_KINDS


class ShapeMismatchError(ValueError):
    """The kernel's output does not have the reference's shape."""


@dataclass(frozen=True)
class ConventionResult(Record):
    """Mismatches of one output under one comparison convention."""

    _codec_computed = ("fraction",)

    policy: TolerancePolicy
    mismatches: int
    total: int
    passed: bool
    statistic: float | None = None  # rel_l2 ratio / largest ULP distance
    source: str = "task"  # "task" (the task's own policy), "advice" (the advisor's) or "default"

    @property
    def fraction(self) -> float:
        return self.mismatches / self.total if self.total else 0.0


@dataclass(frozen=True)
class WorstElement(Record):
    index: tuple[int, ...]
    actual: float
    expected: float
    abs_error: float
    rel_error: float
    ulp: float | None
    mismatch: bool  # under the task's policy


@dataclass(frozen=True)
class NonFiniteCounts(Record):
    _codec_computed = ("mismatched",)
    actual_nan: int = 0
    actual_posinf: int = 0
    actual_neginf: int = 0
    expected_nan: int = 0
    expected_posinf: int = 0
    expected_neginf: int = 0
    matched: int = 0  # NaN against NaN, or the same infinity on both sides
    nan_where_finite: int = 0  # the result is NaN where the reference is finite
    inf_where_finite: int = 0  # the result is infinite where the reference is finite
    finite_where_nonfinite: int = 0  # the result is finite where the reference is NaN/inf
    other_mismatch: int = 0  # NaN against inf, or +inf against -inf

    @property
    def mismatched(self) -> int:
        return self.nan_where_finite + self.inf_where_finite + self.finite_where_nonfinite + self.other_mismatch

    @property
    def any(self) -> bool:
        return bool(
            self.actual_nan + self.actual_posinf + self.actual_neginf
            + self.expected_nan + self.expected_posinf + self.expected_neginf
        )


def count_nonfinite(a: np.ndarray, b: np.ndarray) -> NonFiniteCounts:
    fa, fb = np.isfinite(a), np.isfinite(b)
    nf = nonfinite_match(a, b)
    bad = nf.decided & ~nf.matched
    return NonFiniteCounts(
        actual_nan=int(np.isnan(a).sum()),
        actual_posinf=int(np.isposinf(a).sum()),
        actual_neginf=int(np.isneginf(a).sum()),
        expected_nan=int(np.isnan(b).sum()),
        expected_posinf=int(np.isposinf(b).sum()),
        expected_neginf=int(np.isneginf(b).sum()),
        matched=int(nf.matched.sum()),
        nan_where_finite=int((np.isnan(a) & fb).sum()),
        inf_where_finite=int((np.isinf(a) & fb).sum()),
        finite_where_nonfinite=int((fa & ~fb).sum()),
        other_mismatch=int((bad & ~fa & ~fb).sum()),
    )


@dataclass(frozen=True)
class OutputMetrics(Record):
    _codec_computed = ("mismatch_fraction",)
    name: str
    dtype: str
    shape: tuple[int, ...]
    policy: TolerancePolicy
    passed: bool  # under the task's policy
    mismatches: int  # under the task's policy
    count: int
    max_abs: float  # over elements finite on both sides
    max_rel: float  # |a-b|/|ref| over finite elements; inf where ref is 0 and a is not
    mean_abs: float
    rel_l2: float
    max_ulp: float | None  # in the output dtype; None for integer outputs
    mean_ulp: float | None
    ref_max_abs: float
    ref_rms: float
    conventions: tuple[ConventionResult, ...]
    worst: tuple[WorstElement, ...]
    nonfinite: NonFiniteCounts
    heatmap: TileHeatmap
    localisation: Localisation | None = None
    statistic: float | None = None  # the task policy's own statistic (rel_l2 ratio, largest ULP)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mismatch_fraction(self) -> float:
        return self.mismatches / self.count if self.count else 0.0

    def convention(self, kind: str, source: str | None = None) -> ConventionResult | None:
        """The result under `kind` (the first listed: task, then advice, then default) or from `source`."""
        for c in self.conventions:
            if c.policy.kind == kind and (source is None or c.source == source):
                return c
        return None


def default_conventions(dtype: str) -> dict[str, TolerancePolicy]:
    """Per-dtype constants used for conventions the task and the advisor leave open.

    These are the common harness defaults (KernelBench: fp32 1e-4, half types 1e-2; NKIBench rel L2
    2e-5 for fp32), scaled for fp8; they only fill the side-by-side table.
    """
    name = format_name(dtype)
    u = unit_roundoff(name)
    if u == 0.0:
        tol = 0.0
    elif u <= 2.0**-24:
        tol = 1e-4
    elif u <= 2.0**-8:
        tol = 1e-2
    else:
        tol = 1e-1
    rel = 2e-5 if (0.0 < u <= 2.0**-24) else max(tol, 1e-6)
    return {
        "allclose": TolerancePolicy(kind="allclose", atol=tol, rtol=tol),
        "range_relative": TolerancePolicy(kind="range_relative", atol=tol, rtol=tol),
        "rel_l2": TolerancePolicy(kind="rel_l2", tol=rel),
        "ulp": TolerancePolicy(kind="ulp", max_ulp=2),
        "exact": TolerancePolicy(kind="exact"),
    }


def compute_metrics(
    name: str,
    actual: np.ndarray,
    expected: "np.ndarray | Reference",
    policy: TolerancePolicy | Mapping[str, Any],
    dtype: str | np.dtype | None = None,
    conventions: Mapping[str, TolerancePolicy] | None = None,
    worst_k: int = 5,
    tile: tuple[int, int] = DEFAULT_TILE,
    max_cells: int = MAX_CELLS,
    all_conventions: bool = True,
    comparison: Comparison | None = None,
) -> OutputMetrics:
    """All metrics of output `name`. `dtype` is the declared output dtype (default: actual's dtype).

    `conventions` gives the parameters of the other conventions (e.g. the advisor's advice);
    kinds it leaves out use `default_conventions`. The task's own policy always fills its kind.
    `all_conventions=False` judges the task's policy only and skips ULPs unless the policy is ulp
    (cheaper, for extra trials). `expected` may be a prepared `Reference`; `comparison`, a
    `Comparison` of these same arrays the caller keeps (e.g. for `diagnose_failures`).
    """
    policy = as_policy(policy)
    a_raw = np.asarray(actual)
    b_shape = expected.shape if isinstance(expected, Reference) else np.shape(expected)
    if a_raw.shape != tuple(b_shape):
        if a_raw.size == int(np.prod(b_shape)):
            hint = " (same number of elements: is the output's layout declared in the manifest?)"
        else:
            hint = ""
        raise ShapeMismatchError(
            f"output {name!r}: the kernel returned shape {a_raw.shape}, the reference {tuple(b_shape)}{hint}"
        )
    out_dtype = format_name(dtype if dtype is not None else a_raw.dtype)
    cmp = comparison if comparison is not None else Comparison(a_raw, expected, out_dtype)
    a, b = cmp.a, cmp.b
    err = cmp.err
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        # |a-b|/|ref|: 0/0 (a = ref = 0, or a pair that is not both finite) is 0; x/0 stays inf
        rel = np.asarray(err / cmp.ref.abs)
        rel[np.isnan(rel)] = 0.0
    want_ulps = all_conventions or policy.kind == "ulp"
    ulps = cmp.ulps if want_ulps and cmp.is_float and a.size else None

    outcome = cmp.outcome(policy)
    bad = cmp.mismatches(policy)

    # The task's own policy first, then the advice for every kind (the task's kind included, so the
    # two sit side by side), then per-dtype defaults for kinds neither covers.
    chosen: list[tuple[TolerancePolicy, str]] = [(policy, "task")]
    if all_conventions:
        advised = {k: as_policy(p) for k, p in (conventions or {}).items()}
        defaults = default_conventions(out_dtype)
        for kind in TOLERANCE_KINDS:
            if kind in advised:
                chosen.append((advised[kind], "advice"))
            elif kind != policy.kind:
                chosen.append((defaults[kind], "default"))
    results = []
    for p, source in chosen:
        o = cmp.outcome(p)
        results.append(ConventionResult(p, o.mismatches, o.total, o.passed, o.statistic, source))

    if cmp.all_finite:
        err_for_rank, finite_ref, both_finite = err, b, None
        finite_err, finite_ulps = err, ulps
    else:
        nf = cmp.nonfinite
        err_for_rank = np.where(nf.decided & ~nf.matched, np.inf, err)
        finite_ref = b[cmp.ref.finite]
        both_finite = cmp.both_finite
        finite_err = err[both_finite]
        finite_ulps = ulps[both_finite] if ulps is not None else None
    worst = _worst_elements(a, b, err_for_rank, rel, ulps, bad, worst_k, outcome.mismatches)
    return OutputMetrics(
        name=name,
        dtype=out_dtype,
        shape=tuple(a.shape),
        policy=policy,
        passed=outcome.passed,
        mismatches=outcome.mismatches,
        count=int(a.size),
        max_abs=float(err.max()) if a.size else 0.0,
        max_rel=float(rel.max()) if a.size else 0.0,
        mean_abs=float(finite_err.mean()) if finite_err.size else 0.0,
        rel_l2=cmp.rel_l2,
        max_ulp=float(finite_ulps.max()) if finite_ulps is not None and finite_ulps.size else None,
        mean_ulp=float(finite_ulps.mean()) if finite_ulps is not None and finite_ulps.size else None,
        ref_max_abs=cmp.ref.max_abs_finite if finite_ref.size else 0.0,
        ref_rms=float(np.sqrt(np.mean(finite_ref**2))) if finite_ref.size else 0.0,
        conventions=tuple(results),
        worst=worst,
        nonfinite=count_nonfinite(a, b) if not cmp.all_finite else NonFiniteCounts(),
        heatmap=tile_heatmap(err_for_rank, bad, tile, max_cells),
        localisation=localise(bad, tile) if outcome.mismatches else None,
        statistic=outcome.statistic,
    )


def _worst_elements(
    a: np.ndarray,
    b: np.ndarray,
    err: np.ndarray,
    rel: np.ndarray,
    ulps: np.ndarray | None,
    bad: np.ndarray,
    k: int,
    n_bad: int | None = None,
) -> tuple[WorstElement, ...]:
    """The `k` worst elements: mismatches first, each group by decreasing error (the lower index
    first among equal errors)."""
    if a.size == 0 or k <= 0:
        return ()
    flat = err.ravel()
    bad_flat = bad.ravel()
    if n_bad is None:
        n_bad = int(np.count_nonzero(bad_flat))
    # Errors are >= 0 (inf at non-finite mismatches), so -1 ranks an element below every other.
    if n_bad == 0:
        order = _largest(flat, k)
    elif n_bad == flat.size:
        order = _largest(flat, k)
    else:
        order = _largest(np.where(bad_flat, flat, -1.0), min(k, n_bad))
        if len(order) < k:
            order += _largest(np.where(bad_flat, -1.0, flat), k - len(order))
    out = []
    for i in order:
        nd = tuple(int(v) for v in np.unravel_index(int(i), a.shape))
        out.append(
            WorstElement(
                index=nd,
                actual=float(a.ravel()[i]),
                expected=float(b.ravel()[i]),
                abs_error=float(flat[i]),
                rel_error=float(rel.ravel()[i]),
                ulp=float(ulps.ravel()[i]) if ulps is not None else None,
                mismatch=bool(bad_flat[i]),
            )
        )
    return tuple(out)


def _largest(values: np.ndarray, k: int) -> list[int]:
    """Indices of the k largest values in decreasing order, the lower index first among equals.
    k argmax passes: for the handful of worst elements this beats a partition of the whole array,
    which degrades on the many ties (exact zeros) of a good result."""
    work = np.array(values, dtype=np.float64, copy=True)
    out: list[int] = []
    for _ in range(min(k, work.size)):
        i = int(np.argmax(work))
        out.append(i)
        work[i] = -np.inf
    return out

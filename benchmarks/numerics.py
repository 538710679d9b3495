"""Numerics benchmark: the compare phase on large outputs, as a ratio to plain numpy.

    .venv/bin/python benchmarks/numerics.py [--elements 1048576] [--repeats 5] [--json]

For each case, one output of N elements (a result that differs from its reference by a few ULPs,
plus a few real mismatches where the case says so) is judged the way the evaluation's compare
phase judges it:

  compare    nkitui.evaluate.numerics.check_outputs: float64 metrics under every convention (the
             task's, the advisor's, per-dtype defaults), ULP distances, heat map, worst elements,
             tolerance advice, the warnings about the tolerance, the diagnosis of failures
  metrics    compute_metrics alone, every convention (what later seeds cost)
  trial      compute_metrics for an extra trial (the task's policy only)

Baseline, measured in the same run on the same arrays: `np.abs(a - b).max()`. Printed: milliseconds
per million elements and the ratio to the baseline (the best of --repeats runs each; machines
differ, ratios travel). Goal: compare well under 0.5 s per million float32 elements.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nkitui.evaluate.numerics.fpformat import round_to, storage_dtype  # noqa: E402
from nkitui.evaluate.numerics.metrics import compute_metrics  # noqa: E402
from nkitui.evaluate.numerics.audit import check_outputs  # noqa: E402
from nkitui.task.model import Tolerance  # noqa: E402
from timing import best_of  # noqa: E402  (benchmarks/timing.py)


@dataclass(frozen=True)
class Spec:
    """The fields of an output spec the numerics code reads."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    tolerance: Tolerance
    reduction_length: int | None = None


@dataclass(frozen=True)
class Case:
    label: str
    op: str
    dtype: str
    tolerance: Tolerance
    two_d: bool  # rows x 1024 instead of a flat vector
    broken: int  # elements made wrong on purpose (0: a correct result)


CASES = (
    Case("float32 vector, ulp <= 1 (vector_add)", "elementwise", "float32", Tolerance(kind="ulp", max_ulp=1), False, 0),
    Case("float32 rows, allclose 1e-2 (softmax)", "softmax", "float32", Tolerance(kind="allclose", atol=1e-2, rtol=1e-2),
         True, 0),
    Case("bfloat16 rows, allclose, one bad tile", "elementwise", "bfloat16",
         Tolerance(kind="allclose", atol=1e-3, rtol=1e-2), True, 128 * 64),
)


def make_case(case: Case, n: int, seed: int = 0) -> tuple[Spec, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = (n // 1024, 1024) if case.two_d else (n,)
    x = rng.normal(size=shape).astype(np.float32)
    exact = x.astype(np.float64) * 1.5 + 0.25
    # a correct port's result: the exact value with a little noise, rounded to the output dtype
    noisy = exact * (1.0 + rng.normal(size=shape) * 2.0**-28)
    store = storage_dtype(case.dtype)
    reference = round_to(exact, case.dtype).astype(store)
    actual = round_to(noisy, case.dtype).astype(store)
    if case.broken:
        flat = actual.reshape(-1)
        flat[-case.broken:] = (flat[-case.broken:].astype(np.float64) + 1.0).astype(store)
    spec = Spec("y", shape, case.dtype, case.tolerance, 1)
    return spec, {"x": x}, {"y": actual}, {"y": reference}


def run_case(case: Case, n: int, repeats: int) -> dict[str, Any]:
    spec, inputs, actual, reference = make_case(case, n)
    a, b = actual["y"], reference["y"]
    millions = a.size / 1e6
    baseline = best_of(lambda: np.abs(a - b).max(), repeats * 3)
    compare = best_of(lambda: check_outputs([spec], inputs, actual, reference, case.op, context="with seed 0"), repeats)
    metrics = best_of(lambda: compute_metrics("y", a, b, spec.tolerance, spec.dtype), repeats)
    trial = best_of(lambda: compute_metrics("y", a, b, spec.tolerance, spec.dtype, all_conventions=False), repeats)
    out: dict[str, Any] = {"case": case.label, "elements": int(a.size), "baseline_ms_per_million": baseline * 1e3 / millions}
    for key, seconds in (("compare", compare), ("metrics", metrics), ("trial", trial)):
        out[f"{key}_ms_per_million"] = seconds * 1e3 / millions
        out[f"{key}_ratio"] = seconds / baseline
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 20, help="elements per output (default 1048576)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    n = max(1024, args.elements // 1024 * 1024)
    results = [run_case(case, n, args.repeats) for case in CASES]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"compare phase on {n:,} elements; baseline np.abs(a - b).max() on the same arrays (best of {args.repeats})")
    for r in results:
        print(f"\n{r['case']}")
        print(f"  baseline  {r['baseline_ms_per_million']:9.2f} ms per million")
        for key, what in (("compare", "check_outputs (all of the compare phase)"),
                          ("metrics", "compute_metrics, every convention"),
                          ("trial", "compute_metrics, the task's policy only")):
            print(f"  {key:<8}  {r[f'{key}_ms_per_million']:9.2f} ms per million   x{r[f'{key}_ratio']:6.1f} baseline   {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

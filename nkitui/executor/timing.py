"""Timing a kernel on hardware: warm-up, repeats, adaptive stopping, median and spread, re-checks.

Method (anchors-ux.md §C.3; GPU MODE's adaptive stopping and re-check):
  * `warmup` untimed launches first (compilation, caches, clocks);
  * then timed launches, at least `min_repeats`; after each one the 95% confidence interval of the
    median is recomputed from order statistics (distribution-free: ranks n/2 ± 0.98·√n) and the
    loop stops once its half-width is within `target_rel_ci` of the median, or `max_repeats`, or
    `max_time_s` of timed work is reached; the reason is reported;
  * the outputs of every timed launch are re-checked (`recheck` returns None when they are fine,
    or a sentence saying what differs), because a kernel that is fast only on repeated calls
    (cached results, skipped work) must not get a good time;
  * reported: median, IQR, p10/p90, min, max, mean, std, the CI, the number of samples.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nkitui.common.codec import Record


@dataclass(frozen=True)
class TimingPolicy(Record):
    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 1000
    max_time_s: float = 10.0
    target_rel_ci: float = 0.01  # stop when the CI half-width is within 1% of the median


@dataclass
class TimingStats:
    samples_s: list[float]
    warmup: int
    stopped: str  # why the loop ended, in words
    rechecked: int = 0
    recheck_failures: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.samples_s)

    def quantile(self, q: float) -> float:
        xs = sorted(self.samples_s)
        if not xs:
            return math.nan
        pos = q * (len(xs) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    def median_ci(self) -> tuple[float, float]:
        return median_ci(self.samples_s)

    def to_dict(self, method: str) -> dict[str, Any]:
        us = 1e6
        lo, hi = self.median_ci()
        return {
            "kind": "measured",
            "method": method,
            "unit": "us",
            "median_us": self.median * us,
            "iqr_us": (self.quantile(0.75) - self.quantile(0.25)) * us,
            "p10_us": self.quantile(0.10) * us,
            "p90_us": self.quantile(0.90) * us,
            "min_us": min(self.samples_s) * us if self.samples_s else None,
            "max_us": max(self.samples_s) * us if self.samples_s else None,
            "mean_us": statistics.fmean(self.samples_s) * us if self.samples_s else None,
            "std_us": statistics.stdev(self.samples_s) * us if self.n > 1 else 0.0,
            "ci95_us": [lo * us, hi * us],
            "samples": self.n,
            "warmup": self.warmup,
            "stopped": self.stopped,
            "rechecked": self.rechecked,
            "recheck_failures": list(self.recheck_failures[:10]),
            "recheck_failure_count": len(self.recheck_failures),
        }


def median_ci(samples: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median (order statistics)."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return (math.nan, math.nan)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return xs[lo], xs[hi]


def measure(
    launch: Callable[[], Any],
    policy: TimingPolicy,
    *,
    recheck: Callable[[Any], str | None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> TimingStats:
    """Time `launch()` (which returns the outputs) under `policy`."""
    for _ in range(policy.warmup):
        launch()
    samples: list[float] = []
    failures: list[str] = []
    rechecked = 0
    spent = 0.0
    stopped = f"reached the maximum of {policy.max_repeats} timed launches"
    while len(samples) < policy.max_repeats:
        start = clock()
        outputs = launch()
        elapsed = clock() - start
        samples.append(elapsed)
        spent += elapsed
        if recheck is not None:
            rechecked += 1
            problem = recheck(outputs)
            if problem:
                failures.append(f"timed launch {len(samples)}: {problem}")
        if len(samples) >= policy.min_repeats:
            lo, hi = median_ci(samples)
            med = statistics.median(samples)
            if med > 0 and (hi - lo) / 2 <= policy.target_rel_ci * med:
                stopped = (f"converged: the 95% CI of the median is within ±{policy.target_rel_ci:.1%} "
                           f"after {len(samples)} launches")
                break
        if spent >= policy.max_time_s:
            stopped = f"time budget of {policy.max_time_s:g} s of timed launches used ({len(samples)} launches)"
            break
    return TimingStats(samples_s=samples, warmup=policy.warmup, stopped=stopped, rechecked=rechecked,
                       recheck_failures=failures)

"""The one timing helper the benchmark scripts share (each script puts this folder on sys.path
by being run from it: `python benchmarks/NAME.py`)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable


def best_of(fn: Callable[[], Any], repeat: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The shortest of `repeat` timings of `fn()` (the least disturbed by other processes)."""
    best = math.inf
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best

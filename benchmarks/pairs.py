"""Judging figures measured in alternated pairs against a baseline (benchmarks/emulator.py --baseline)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence


def compare_pairs(base: Sequence[dict[str, float]], this: Sequence[dict[str, float]],
                  not_judged: Collection[str] = ()) -> list[dict]:
    """Per figure (lower is better): both sides' medians, this/baseline, and in how many pairs this side
    was lower; `base[i]` and `this[i]` were measured back to back. A figure is worse when its median is
    higher and most pairs agree (a higher median that half the pairs contradict is the machine's noise).
    A figure the baseline lacks gets baseline None; those in `not_judged` are never worse."""
    rows: list[dict] = []
    for name in this[0] if this else {}:
        pairs = [(b[name], t[name]) for b, t in zip(base, this) if name in b and name in t]
        if not pairs:
            rows.append({"figure": name, "baseline": None, "this": statistics.median(t[name] for t in this if name in t),
                         "worse": False})
            continue
        mb = statistics.median(b for b, _ in pairs)
        mt = statistics.median(t for _, t in pairs)
        lower = sum(t < b for b, t in pairs)
        rows.append({"figure": name, "baseline": mb, "this": mt, "ratio": mt / mb if mb else math.nan,
                     "lower_in": lower, "pairs": len(pairs),
                     "worse": name not in not_judged and mt > mb and lower < len(pairs) / 2})
    return rows

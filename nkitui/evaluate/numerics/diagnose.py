"""Read a failing comparison: where the mismatches are and what they most likely mean.

NUM-NEARZERO-DRIFT  the failures sit at near-zero outputs and their absolute errors are no larger
                    than errors that pass elsewhere: accumulation-order drift, not a bug.
NUM-TILE-LOCALISED  the mismatches are confined to a few tiles (typically the last, partial tile):
                    an indexing or masking bug, not rounding.
NUM-NONFINITE       NaN/Inf in the result where the reference is finite, or the reverse.
"""

from __future__ import annotations

import numpy as np

from nkitui.common.findings import Finding
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import ToleranceAdvice
from nkitui.evaluate.numerics.metrics import OutputMetrics
from nkitui.evaluate.numerics.findings import g, numerics_finding
from nkitui.evaluate.numerics.tolerance import Comparison

NEAR_ZERO = 0.1  # |ref| below this fraction of the output's rms counts as near zero
NEAR_ZERO_SHARE = 0.8  # this share of the failures must be near zero


def diagnose_failures(
    metrics: OutputMetrics,
    actual: np.ndarray,
    reference: np.ndarray,
    advice: ToleranceAdvice | None = None,
    context: str = "",
    comparison: Comparison | None = None,
) -> list[Finding]:
    """Findings that explain the mismatches of one output (none when it passes cleanly).

    `context` names the run in the wording, e.g. "with seed 0". `comparison`: the Comparison the
    metrics were computed from, when the caller kept it (its mismatch mask is reused).
    """
    findings: list[Finding] = []
    name = metrics.name
    where = f" {context}" if context else ""
    nf = metrics.nonfinite
    if nf.mismatched:
        parts = []
        if nf.nan_where_finite:
            parts.append(f"{nf.nan_where_finite} NaN")
        if nf.inf_where_finite:
            parts.append(f"{nf.inf_where_finite} infinite value(s)")
        if nf.finite_where_nonfinite:
            parts.append(f"{nf.finite_where_nonfinite} finite value(s) where the reference is NaN or infinite")
        if nf.other_mismatch:
            parts.append(f"{nf.other_mismatch} NaN/infinity of the wrong kind or sign")
        findings.append(
            numerics_finding(
                rules.NONFINITE,
                "high",
                f"Non-finite values in `{name}` disagree with the reference",
                f"Output `{name}`{where} contains " + ", ".join(parts)
                + (" where the reference is finite" if nf.nan_where_finite + nf.inf_where_finite else "")
                + ". Overflow, a division by zero, uninitialised memory (the emulator fills new tiles with NaN) "
                "or a missing max-subtraction are the usual causes.",
                {"output": name, **nf.to_dict()},
            )
        )
    if metrics.passed:
        return findings

    loc = metrics.localisation
    if loc is not None and loc.concentrated:
        last_row = loc.row_tiles == (loc.n_row_tiles - 1,) and loc.n_row_tiles > 1
        last_col = loc.col_tiles == (loc.n_col_tiles - 1,) and loc.n_col_tiles > 1
        cause = ""
        if (last_row and loc.last_row_tile_partial) or (last_col and loc.last_col_tile_partial):
            cause = (" The last tile is a partial one, so the likely cause is its bounds: an off-by-one in the "
                     "trip count, the mask or the slice of the remainder tile.")
        elif last_row or last_col:
            cause = " Only the last tile is wrong: check the loop bound and the index of the final tile."
        findings.append(
            numerics_finding(
                rules.TILE_LOCALISED,
                "high",
                f"Mismatches of `{name}` are concentrated in one region",
                f"The mismatches of output `{name}`{where} are not spread like rounding error: {loc.summary}.{cause}",
                {"output": name, **loc.to_dict()},
            )
        )

    if metrics.policy.kind in ("allclose", "ulp") and metrics.ref_rms > 0:
        cmp = comparison if comparison is not None else Comparison(actual, reference, metrics.dtype)
        a, b = cmp.a, cmp.b
        bad = cmp.mismatches(metrics.policy)
        finite = cmp.both_finite
        bad_finite = bad & finite
        n_bad = int(bad_finite.sum())
        if n_bad:
            near = np.abs(b) < NEAR_ZERO * metrics.ref_rms
            share = float((bad_finite & near).sum()) / n_bad
            err = np.abs(a - b)
            good = finite & ~bad & ~near
            worst_bad = float(err[bad_finite].max())
            worst_good = float(err[good].max()) if good.any() else 0.0
            if share >= NEAR_ZERO_SHARE and worst_good > 0 and worst_bad <= 2.0 * worst_good and not (
                loc is not None and loc.concentrated
            ):
                suggest = 2.0 * worst_bad
                advice_txt = f" (the advisor's model: {advice.policy.describe()})" if advice is not None else ""
                findings.append(
                    numerics_finding(
                        rules.NEARZERO_DRIFT,
                        "medium",
                        f"Failures of `{name}` are accumulation-order drift at near-zero outputs",
                        f"{share:.0%} of the {n_bad} failures of output `{name}`{where} are at elements whose reference is "
                        f"near zero (|ref| < {NEAR_ZERO:g} x rms = {g(NEAR_ZERO * metrics.ref_rms)}), and their absolute "
                        f"errors (largest {g(worst_bad)}) are no larger than errors that pass at larger outputs "
                        f"(largest {g(worst_good)}). This is accumulation-order drift: the error follows the partial "
                        "sums, not the result, so a relative tolerance cannot absorb it near zero. The port is not "
                        f"wrong; the tolerance needs an absolute term of about {g(suggest)}, or a range-relative or "
                        f"relative-L2 criterion{advice_txt}.",
                        {"output": name, "failures": n_bad, "near_zero_share": share, "worst_failing_abs": worst_bad,
                         "worst_passing_abs": worst_good, "suggested_atol": suggest},
                    )
                )
    return findings

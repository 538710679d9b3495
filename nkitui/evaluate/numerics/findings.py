"""Rule ids of the numerics checks and one way to build their findings.

Every warning is a `Finding` with source="numerics", category="numerics", a `message` an
auditor can paste into feedback as it is, and the numbers behind it in `data`.
docs/numerics.md describes each rule.
"""

from __future__ import annotations

from typing import Any

from nkitui.common import units
from nkitui.common.findings import Finding, Severity
from nkitui.common.codec import encode as jsonable

ZEROS_PASS = "NUM-ZEROS-PASS"  # an all-zeros output passes the task's tolerance
ECHO_PASS = "NUM-ECHO-PASS"  # returning an input unchanged passes
CONST_PASS = "NUM-CONST-PASS"  # some constant output passes
TOL_TIGHT = "NUM-TOL-TIGHT"  # a correct (correctly rounded / normally accumulated) result fails
NEARZERO_DRIFT = "NUM-NEARZERO-DRIFT"  # failures sit at near-zero outputs: accumulation-order drift
TILE_LOCALISED = "NUM-TILE-LOCALISED"  # mismatches concentrated in one tile (e.g. the last, partial one)
NONFINITE = "NUM-NONFINITE"  # NaN/Inf where the reference is finite (or the reverse)
DTYPE_ERROR_DOMINATES = "NUM-DTYPE-ERROR-DOMINATES"  # low-precision error far above the dtype model
ALGO_ERROR = "NUM-ALGO-ERROR"  # the port is wrong even with all arithmetic in fp32
TRIAL_FAILED = "NUM-TRIAL-FAILED"  # a seed other than the first fails
ADVERSARIAL_FAILED = "NUM-ADVERSARIAL-FAILED"  # an adversarial input breaks the port
MUTANT_SURVIVED = "NUM-MUTANT-SURVIVED"  # a deliberately broken port still passes the tolerance
GOLDEN_DIVERGES = "NUM-GOLDEN-DIVERGES"  # port, reference and recorded GPU output disagree
GOLDEN_INVALID = "NUM-GOLDEN-INVALID"  # the goldens file does not match the task
OUTPUT_DTYPE = "NUM-OUTPUT-DTYPE"  # the kernel returned an output in another dtype than the manifest's
K_EXCEEDS_BOUND = "NUM-K-EXCEEDS-BOUND"  # task.toml's reduction_length is more than an element can sum
K_ABOVE_INFERRED = "NUM-K-ABOVE-INFERRED"  # reduction_length within the bound but far above the shapes' K
TOL_LOOSE = "NUM-TOL-LOOSE"  # the task's tolerance is far looser than the advisor's

ALL_RULES = (
    ZEROS_PASS, ECHO_PASS, CONST_PASS, TOL_TIGHT, NEARZERO_DRIFT, TILE_LOCALISED, NONFINITE,
    DTYPE_ERROR_DOMINATES, ALGO_ERROR, TRIAL_FAILED, ADVERSARIAL_FAILED, MUTANT_SURVIVED,
    GOLDEN_DIVERGES, GOLDEN_INVALID, OUTPUT_DTYPE, K_EXCEEDS_BOUND, K_ABOVE_INFERRED, TOL_LOOSE,
)


def numerics_finding(
    rule: str,
    severity: Severity,
    title: str,
    message: str,
    data: dict[str, Any] | None = None,
    file: str | None = None,
    line: int | None = None,
) -> Finding:
    return Finding(
        rule=rule,
        severity=severity,
        title=title,
        message=message,
        category="numerics",
        source="numerics",
        file=file,
        line=line,
        data=jsonable(data or {}),
    )


def g(x: float | None, digits: int = 3) -> str:
    """A number as auditors read it: `digits` significant digits, e.g. 0.0123, 4.1e-6, 1.5e+04."""
    return "n/a" if x is None else units.error(float(x), digits)  # the one formatter (nkitui.common.units)

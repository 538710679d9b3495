"""How far an estimate can be from the hardware: the band every estimated record carries.

The band is the spread of the calibration suite's **leave-one-family-out** errors (benchmarks/calibration.py,
docs/costmodel.md "Uncertainty"): for every published latency, the constants were fitted without the kernel
family it belongs to, the family was predicted, and published / estimated - 1 was taken. On the four families
measured (matmul, Mamba, LayerNorm, the trn2 walkthrough) the truth fell within the band; for other kernels
the error is unknown, and every rendering says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CALIBRATED_FAMILIES = ("matmul tutorial (trn1)", "fused Mamba (trn1)", "LayerNorm (trn1)",
                       "kernel-optimization walkthrough (trn2)")


@dataclass(frozen=True)
class Uncertainty:
    low: float  # the truth may be this much below the estimate (a fraction, negative)
    high: float  # ... or this much above it (a fraction, positive)
    basis: str
    families: tuple[str, ...] = CALIBRATED_FAMILIES

    def bounds(self, seconds: float) -> tuple[float, float]:
        return seconds * (1.0 + self.low), seconds * (1.0 + self.high)

    def band_text(self) -> str:
        """"-20%..+25%" """
        return f"{100 * self.low:+.0f}%..{100 * self.high:+.0f}%"

    def describe(self, seconds: float, fmt: Callable[[float], str] | None = None) -> str:
        """"estimated 27.1 ms, -20%..+25% on calibrated kernel families; outside them the error is unknown" """
        shown = fmt(seconds) if fmt is not None else _fmt(seconds)
        return (f"estimated {shown}, {self.band_text()} on calibrated kernel families; "
                "outside them the error is unknown")

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "basis": self.basis, "families": list(self.families),
                "text": self.band_text()}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "Uncertainty | None":
        if not isinstance(d, dict):
            return None
        try:
            return cls(float(d["low"]), float(d["high"]), str(d.get("basis", "")),
                       tuple(str(f) for f in d.get("families", CALIBRATED_FAMILIES)))
        except (KeyError, TypeError, ValueError):
            return None


# From `benchmarks/calibration.py` (reduced level), "Uncertainty band from the leave-one-family-out errors";
# docs/costmodel.md lists every error behind it. Re-run the suite after any model change and update both.
CALIBRATED = Uncertainty(
    low=-0.42, high=0.79,
    basis="leave-one-family-out errors of nkitui's calibration suite (benchmarks/calibration.py) against the "
          "AWS tutorials' published latencies",
)


def describe_record(record_json: dict[str, Any] | None, fmt: Callable[[float], str] | None = None) -> str | None:
    """The band sentence for a stored record (PerfRecord.to_json()), or None when it has none (measured)."""
    if not isinstance(record_json, dict) or record_json.get("source") != "estimated":
        return None
    band = Uncertainty.from_json(record_json.get("uncertainty"))
    total = record_json.get("total_time")
    if band is None or not isinstance(total, (int, float)):
        return None
    return band.describe(float(total), fmt)


def _fmt(seconds: float) -> str:
    from nkitui.common import units

    return units.time_s(seconds)

"""A/B comparison of two PerfRecords (two runs, two kernels, or an estimate against a measurement)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from nkitui.perf.summary import LANES, PerfRecord

# Metrics compared, with the direction that counts as an improvement ("lower", "higher" or None
# when neither is better in itself, e.g. how busy one engine is) and the unit shown.
METRICS: tuple[tuple[str, str | None, str], ...] = (
    ("total_time", "lower", "s"),
    ("mfu_estimated_percent", "higher", "%"),
    ("hfu_estimated_percent", "higher", "%"),
    ("mbu_estimated_percent", None, "%"),
    ("tensor_engine_active_time_percent", None, "%"),
    ("vector_engine_active_time_percent", None, "%"),
    ("scalar_engine_active_time_percent", None, "%"),
    ("gpsimd_engine_active_time_percent", None, "%"),
    ("sync_engine_active_time_percent", None, "%"),
    ("dma_active_time_percent", None, "%"),
    ("hbm_read_bytes", "lower", "B"),
    ("hbm_write_bytes", "lower", "B"),
    ("dma_transfer_count", "lower", ""),
    ("dma_transfer_average_bytes", "higher", "B"),
    ("matmul_instruction_count", None, ""),
    ("spill_save_bytes", "lower", "B"),
    ("spill_reload_bytes", "lower", "B"),
)


@dataclass
class MetricDelta:
    key: str
    a: float | None
    b: float | None
    delta: float | None  # b - a
    percent_change: float | None  # (b - a) / a x 100
    better: str | None  # "a", "b", "same", or None (no direction / a value missing)
    unit: str = ""


@dataclass
class LineDelta:
    location: str
    a_time: float
    b_time: float
    delta: float


@dataclass
class Comparison:
    a_label: str  # e.g. "A explorer_view (measured, trn1)": the source exactly as each record says
    b_label: str
    speedup: float | None  # a.total_time / b.total_time (> 1: B is faster)
    metrics: list[MetricDelta]
    lines: list[LineDelta]  # source lines whose engine time changed most
    warnings: list[str] = field(default_factory=list)
    a_source: str = ""  # "estimated" | "measured", as recorded
    b_source: str = ""
    a_band: str = ""  # the uncertainty sentence of an estimated side ("" for a measurement)
    b_band: str = ""

    def metric(self, key: str) -> MetricDelta:
        for m in self.metrics:
            if m.key == key:
                return m
        raise KeyError(f"metric {key!r} was not compared")

    def headline(self) -> str:
        if self.speedup is None:
            return f"{self.b_label} vs {self.a_label}: no comparable total time"
        if abs(self.speedup - 1.0) < 0.005:  # "1.00x faster" reads as a change
            return f"{self.b_label} and {self.a_label} take the same time"
        verb = "faster" if self.speedup >= 1 else "slower"
        factor = self.speedup if self.speedup >= 1 else 1 / self.speedup
        return f"{self.b_label} is {factor:.2f}x {verb} than {self.a_label}"

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a_label,
            "b": self.b_label,
            "speedup": self.speedup,
            "headline": self.headline(),
            "metrics": [asdict(m) for m in self.metrics],
            "lines": [asdict(x) for x in self.lines],
            "warnings": list(self.warnings),
            "a_source": self.a_source,
            "b_source": self.b_source,
            "a_uncertainty": self.a_band or None,
            "b_uncertainty": self.b_band or None,
        }


def _label(name: str, r: PerfRecord, task: str = "") -> str:
    kernel = f" {r.kernel}" if r.kernel else ""
    of = f" of task {task}" if task else ""
    return f"{name}{kernel}{of} ({r.source}, {r.target})"


def _band(r: PerfRecord) -> str:
    if r.source != "estimated":
        return ""
    from nkitui.perf.uncertainty import Uncertainty

    band = Uncertainty.from_json(r.uncertainty)
    return band.describe(r.total_time) if band is not None else "estimated; no uncertainty band recorded"


def compare(a: PerfRecord, b: PerfRecord, *, rel_tol: float = 0.01, lines: int = 10, a_task: str = "",
            b_task: str = "") -> Comparison:
    """Per-metric deltas from A to B; changes within `rel_tol` (relative) count as "same". `a_task` and
    `b_task` are the runs' task ids when known (a warning says when they differ)."""
    warnings: list[str] = []
    if a.source != b.source:
        warnings.append(f"A is {a.source} and B is {b.source}: the differences include the cost model's "
                        "error, not only the kernels'")
    if a_task and b_task and a_task != b_task:
        warnings.append(f"the runs are of different tasks ({a_task} vs {b_task}): the kernels solve different "
                        "problems")
    elif a.kernel and b.kernel and a.kernel != b.kernel and not (a_task and a_task == b_task):
        warnings.append(f"the records are of different kernels ({a.kernel} vs {b.kernel}); compare runs of one task "
                        "to compare ports")
    if a.target != b.target:
        warnings.append(f"the runs are on different targets ({a.target} vs {b.target}): the hardware differs, "
                        "not only the kernels")
    metrics = []
    for key, direction, unit in METRICS:
        va, vb = _value(a, key), _value(b, key)
        if va is None and vb is None:
            continue
        delta = vb - va if va is not None and vb is not None else None
        pct = 100.0 * delta / va if delta is not None and va else None
        better = None
        if delta is not None and direction is not None and va is not None and vb is not None:
            scale = max(abs(va), abs(vb), 1e-300)
            if abs(delta) <= rel_tol * scale:
                better = "same"
            elif (delta < 0) == (direction == "lower"):
                better = "b"
            else:
                better = "a"
        metrics.append(MetricDelta(key, va, vb, delta, pct, better, unit))
    speedup = a.total_time / b.total_time if a.total_time > 0 and b.total_time > 0 else None
    return Comparison(_label("A", a, a_task), _label("B", b, b_task), speedup, metrics, _line_deltas(a, b, lines),
                      warnings, a.source, b.source, _band(a), _band(b))


def _value(r: PerfRecord, key: str) -> float | None:
    if key == "total_time":
        return r.total_time
    v = r.summary.get(key)
    if v is None:
        lane = key.removesuffix("_engine_active_time_percent").removesuffix("_active_time_percent")
        if lane in LANES and lane in r.engines:
            return r.engines[lane].active_time_percent
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _line_deltas(a: PerfRecord, b: PerfRecord, top: int) -> list[LineDelta]:
    ta = {h.location: h.time for h in a.hotspots}
    tb = {h.location: h.time for h in b.hotspots}
    out = [LineDelta(loc, ta.get(loc, 0.0), tb.get(loc, 0.0), tb.get(loc, 0.0) - ta.get(loc, 0.0))
           for loc in set(ta) | set(tb)]
    out.sort(key=lambda d: (-abs(d.delta), d.location))
    return out[:top]

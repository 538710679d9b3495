"""`PerfRecord`: one run's performance, estimated by the cost model or measured by the profiler.

The record carries the Neuron profiler's summary keys (Neuron Explorer `Summary` table, spec §8.3)
under their own names and units, so estimates and hardware profiles read the same; `source` says
which it is and every consumer must show it. Units: seconds for times, bytes, FLOPs, and percent
values in 0-100 (the parser converts profiles that store fractions).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from nkitui.perf.roofline import RooflinePoint, SpeedOfLight

Source = Literal["estimated", "measured"]
SOURCES = ("estimated", "measured")

# Engines of the profiler summary, in its order; "dma" is the union over the DMA engines.
SUMMARY_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
LANES = (*SUMMARY_ENGINES, "dma")

# Profiler summary keys the cost model fills in (same names and units as [NX-SCHEMA] Summary).
SUMMARY_KEYS = (
    "total_time", "neuroncore_cycle_count", "model_flops", "hardware_flops", "transpose_flops",
    "adjusted_hardware_flops", "adjusted_transpose_flops", "mm_arithmetic_intensity",
    "peak_flops_bandwidth_ratio", "mfu_estimated_percent", "mfu_max_achievable_estimated_percent",
    "hfu_estimated_percent", "mbu_estimated_percent", "mbu_min_read_util_percent",
    *(f"{e}_engine_{k}" for e in SUMMARY_ENGINES
      for k in ("instruction_time", "active_time", "active_time_percent", "instruction_count")),
    "matmul_instruction_count", "activate_instruction_time", "activate_instruction_count",
    "dma_active_time", "dma_active_time_percent", "dma_active_cycles", "dma_transfer_count",
    "dma_transfer_total_bytes", "dma_transfer_average_bytes", "dma_packet_time", "dma_transfer_time",
    "dma_queue_count", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
    "psum_read_bytes", "psum_write_bytes", "psum_read_sbuf_write_bytes", "psum_read_sbuf_write_count",
    "spill_save_bytes", "spill_reload_bytes", "inputs_and_weights_size_bytes",
    "total_active_time", "total_active_time_percent",
)


@dataclass
class EngineStats:
    """One lane's activity. `active_time` is the profiler's notion: an instruction counts from the moment
    it is in flight, waiting included (a DMA from being queued, a compute instruction with its exposed
    start-up and throttled cycles); `execution_time` only the time it executes (a DMA moving data, a
    compute instruction's own cycles). Percentages are of the kernel's core time (launch overhead
    excluded, as the profiler's selection of the core execution period shows them)."""

    active_time: float  # s, union of in-flight intervals
    active_time_percent: float  # of the core time, 0-100
    instruction_time: float  # s, sum of instruction durations
    instruction_count: int
    execution_time: float | None = None  # s, execution only (None in measured records)
    execution_time_percent: float | None = None


@dataclass
class HotLine:
    """Engine time spent on one kernel source line."""

    location: str  # "file.py:42" (or "?" when the instruction had no source line)
    file: str
    line: int
    time: float  # s, sum of engine occupancy of its instructions (engines overlap: a ranking)
    percent: float  # share of all instruction time in the run, 0-100
    by_engine: dict[str, float]  # s per lane
    instructions: int
    flops: float = 0.0
    hbm_bytes: int = 0
    opcodes: dict[str, int] = field(default_factory=dict)


@dataclass
class PerfRecord:
    source: Source
    target: str
    kernel: str
    total_time: float  # s
    summary: dict[str, float | int]  # profiler-style keys (see SUMMARY_KEYS); may hold extra measured keys
    engines: dict[str, EngineStats]  # lanes: tensor, vector, scalar, gpsimd, sync, dma
    timeline: dict[str, list[list[float]]] = field(default_factory=dict)  # lane -> [[start_s, end_s], ...]
    hotspots: list[HotLine] = field(default_factory=list)
    roofline: RooflinePoint | None = None
    speed_of_light: SpeedOfLight | None = None
    notes: list[str] = field(default_factory=list)  # assumptions, warnings, parse conventions
    tool: str = ""  # "nkitui cost model v1", "neuron-explorer summary-json", ...
    extras: dict[str, Any] = field(default_factory=dict)  # model diagnostics, not profiler keys
    # the kernel's own time and the fixed per-launch overhead (start-up and tear-down): total_time = core_time
    # + launch_overhead; None when the source does not separate them
    core_time: float | None = None
    launch_overhead: float | None = None
    # how far off an estimate can be (nkitui.perf.uncertainty.Uncertainty.to_json()); None for measurements
    uncertainty: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"PerfRecord.source must be 'estimated' or 'measured', got {self.source!r}")

    @property
    def label(self) -> str:
        """What a UI shows next to every number: "estimated" or "measured"."""
        return self.source

    def engine_percent(self, lane: str) -> float:
        st = self.engines.get(lane)
        return st.active_time_percent if st else 0.0

    def utilisation_bins(self, bins: int = 60, lanes: tuple[str, ...] | None = None) -> dict[str, list[float]]:
        """Busy fraction (0-1) of each lane in `bins` equal slices of the core time (the timeline's span; the
        total time when the record does not separate a launch overhead), for a strip chart."""
        if bins <= 0:
            raise ValueError("bins must be positive")
        total = self.core_time if self.core_time else self.total_time
        out: dict[str, list[float]] = {}
        for lane in lanes or tuple(self.timeline):
            acc = [0.0] * bins
            if total > 0:
                width = total / bins
                for s, e in self.timeline.get(lane, []):
                    s, e = max(0.0, s), min(total, e)
                    if e <= s:
                        continue
                    first, last = int(s / width), min(int(e / width), bins - 1)
                    for b in range(first, last + 1):
                        lo, hi = b * width, (b + 1) * width
                        acc[b] += max(0.0, min(e, hi) - max(s, lo))
                acc = [min(1.0, a / width) for a in acc]
            out[lane] = acc
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "source": self.source,
            "target": self.target,
            "kernel": self.kernel,
            "tool": self.tool,
            "total_time": self.total_time,
            "summary": dict(self.summary),
            "engines": {k: asdict(v) for k, v in self.engines.items()},
            "timeline": {k: [list(iv) for iv in v] for k, v in self.timeline.items()},
            "hotspots": [asdict(h) for h in self.hotspots],
            "roofline": self.roofline.to_json() if self.roofline else None,
            "speed_of_light": self.speed_of_light.to_json() if self.speed_of_light else None,
            "notes": list(self.notes),
            "extras": dict(self.extras),
            "core_time": self.core_time,
            "launch_overhead": self.launch_overhead,
            "uncertainty": dict(self.uncertainty) if self.uncertainty else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PerfRecord":
        """Read a record back, checked: it may come from a file or, on hardware, from the kernel's process,
        so every number must be finite, times and counts non-negative and percentages within 0-100. Any
        defect is a ValueError that names the field."""
        from nkitui.common.codec import CodecError, decode

        if not isinstance(d, dict):
            raise ValueError(f"a PerfRecord is a JSON object, got {type(d).__name__}")
        if d.get("version") != 1:
            raise ValueError(f"unsupported PerfRecord version {d.get('version')!r} (expected 1)")
        for key in ("source", "target", "total_time", "summary", "engines"):
            if key not in d:
                raise ValueError(f"PerfRecord JSON lacks the field {key!r}")
        try:
            record = cls(
                source=decode(Source, d["source"], "source"),
                target=decode(str, d["target"], "target"),
                kernel=decode(str, d.get("kernel", ""), "kernel"),
                total_time=decode(float, d["total_time"], "total_time"),
                summary=_summary(d["summary"]),
                engines=decode(dict[str, EngineStats], d["engines"], "engines"),
                timeline=decode(dict[str, list[tuple[float, float]]], d.get("timeline", {}), "timeline"),
                hotspots=decode(list[HotLine], d.get("hotspots", []), "hotspots"),
                roofline=decode(RooflinePoint | None, d.get("roofline") or None, "roofline"),
                speed_of_light=decode(SpeedOfLight | None, d.get("speed_of_light") or None, "speed_of_light"),
                notes=decode(list[str], d.get("notes", []), "notes"),
                tool=decode(str, d.get("tool", ""), "tool"),
                extras=decode(dict[str, Any], d.get("extras", {}), "extras"),
                core_time=_opt_float(d.get("core_time"), "core_time"),
                launch_overhead=_opt_float(d.get("launch_overhead"), "launch_overhead"),
                uncertainty=dict(d["uncertainty"]) if isinstance(d.get("uncertainty"), dict) else None,
            )
        except CodecError as exc:
            raise ValueError(f"PerfRecord field {exc}") from None
        # the decoded timeline holds tuples; the record's own are [start, end] lists
        record.timeline = {lane: [list(iv) for iv in ivs] for lane, ivs in record.timeline.items()}
        _check_numbers(record)
        return record


def _summary(value: Any) -> dict[str, float | int]:
    """The profiler-style summary as it was written (counts stay whole numbers)."""
    if not isinstance(value, dict):
        raise ValueError(f"PerfRecord field summary: expected a table of numbers, got {type(value).__name__}")
    out: dict[str, float | int] = {}
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"PerfRecord field summary.{key}: expected a number, got {type(number).__name__}")
        if isinstance(number, int) and number.bit_length() > 1023:
            raise ValueError(f"PerfRecord field summary.{key}: a number of {number.bit_length()} bits is too large")
        out[str(key)] = number
    return out


_PERCENT_SLACK = 101.0  # rounding in a profiler's export may show 100.4 %; beyond 101 the data is wrong


def _check_numbers(record: PerfRecord) -> None:
    """Refuse what no run can produce: NaN or infinite numbers, negative times or counts, percentages
    beyond 0-100, timeline intervals that end before they start."""

    def number(where: str, value: float | int | None, *, percent: bool = False) -> None:
        if value is None:
            return
        if not math.isfinite(value):
            raise ValueError(f"PerfRecord field {where}: {value} is not a finite number")
        if value < 0:
            raise ValueError(f"PerfRecord field {where}: {value} is negative (a time, count or percentage)")
        if percent and value > _PERCENT_SLACK:
            raise ValueError(f"PerfRecord field {where}: {value} is beyond 100 %")

    number("total_time", record.total_time)
    number("core_time", record.core_time)
    number("launch_overhead", record.launch_overhead)
    for key, value in record.summary.items():
        if not math.isfinite(value):
            raise ValueError(f"PerfRecord field summary.{key}: {value} is not a finite number")
        if key.endswith("_percent") or key.endswith("_time") or key.endswith("_count") or key.endswith("_bytes"):
            number(f"summary.{key}", value, percent=key.endswith("_percent"))
    for lane, st in record.engines.items():
        for name in ("active_time", "instruction_time", "instruction_count", "execution_time"):
            number(f"engines.{lane}.{name}", getattr(st, name))
        for name in ("active_time_percent", "execution_time_percent"):
            number(f"engines.{lane}.{name}", getattr(st, name), percent=True)
    for lane, intervals in record.timeline.items():
        for i, (start, end) in enumerate(intervals):
            number(f"timeline.{lane}[{i}][0]", start)
            number(f"timeline.{lane}[{i}][1]", end)
            if end < start:
                raise ValueError(f"PerfRecord field timeline.{lane}[{i}]: it ends ({end}) before it starts ({start})")
    for i, hot in enumerate(record.hotspots):
        number(f"hotspots[{i}].time", hot.time)
        number(f"hotspots[{i}].percent", hot.percent, percent=True)
        number(f"hotspots[{i}].instructions", hot.instructions)
        for lane, seconds in hot.by_engine.items():
            number(f"hotspots[{i}].by_engine.{lane}", seconds)


def _opt_float(v: Any, field_name: str) -> float | None:
    if isinstance(v, float):
        return v
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if v.bit_length() > 1023:  # float() would raise OverflowError
        raise ValueError(f"PerfRecord field {field_name}: a number of {v.bit_length()} bits is too large")
    return float(v)


def coarsen(intervals: list[list[float]], min_gap: float) -> list[list[float]]:
    """Merge intervals separated by less than `min_gap` (keeps strip-chart timelines small)."""
    out: list[list[float]] = []
    if not intervals:
        return out
    cur_s, cur_e = intervals[0]
    for s, e in intervals:
        if s - cur_e < min_gap:
            if e > cur_e:
                cur_e = e
        else:
            out.append([cur_s, cur_e])
            cur_s, cur_e = s, e
    out.append([cur_s, cur_e])
    return out


def union_length(intervals: list[list[float]]) -> float:
    """Length of the union of intervals in any order."""
    return union_length_sorted([intervals])


def union_length_sorted(lanes: list[list[list[float]]]) -> float:
    """Length of the union of several lists of sorted, disjoint intervals."""
    total = 0.0
    cur_s: float = 0.0  # read only once cur_e is set
    cur_e: float | None = None
    # one C-level sort of the concatenation (timsort merges the sorted runs) beats heapq.merge
    for s, e in sorted(itertools.chain.from_iterable(lanes)):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total

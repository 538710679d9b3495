"""Plain-text rendering of PerfRecords and comparisons (headless output; the UI draws its own)."""

from __future__ import annotations

from typing import Any

from nkitui.common import units
from nkitui.perf.compare import Comparison
from nkitui.perf.roofline import SpeedOfLight
from nkitui.perf.summary import LANES, PerfRecord
from nkitui.perf.uncertainty import Uncertainty


# The one formatter of quantities (nkitui.common.units), under the names this module always used.
fmt_time = units.time_s
fmt_bytes = units.bytes_


def bar(fraction: float, width: int = 30) -> str:
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(round(fraction * width))
    return "#" * full + "." * (width - full)


def _pct(summary: dict[str, Any], key: str) -> str:
    v = summary.get(key)
    return "n/a" if v is None else units.percent(float(v))


def _bytes(summary: dict[str, Any], key: str) -> str:
    v = summary.get(key)
    return "n/a" if v is None else fmt_bytes(float(v))


def render_record(r: PerfRecord, *, hot: int = 8) -> str:
    s = r.summary
    lines = [f"{r.kernel or 'kernel'} on {r.target}: {fmt_time(r.total_time)} ({r.label}, {r.tool})"]
    band = Uncertainty.from_json(r.uncertainty) if r.source == "estimated" else None
    if band is not None:
        lo, hi = band.bounds(r.total_time)
        lines.append(f"  {band.describe(r.total_time, fmt_time)} ({fmt_time(lo)} to {fmt_time(hi)})")
    if r.core_time is not None and r.launch_overhead:
        lines.append(f"  kernel core time {fmt_time(r.core_time)} + launch overhead {fmt_time(r.launch_overhead)}; "
                     "engine activity is of the core time")
    lines += [
        f"  MFU {_pct(s, 'mfu_estimated_percent')}  HFU {_pct(s, 'hfu_estimated_percent')}  "
        f"MBU {_pct(s, 'mbu_estimated_percent')}  HBM read {_bytes(s, 'hbm_read_bytes')}, "
        f"write {_bytes(s, 'hbm_write_bytes')}",
        "  engine activity:",
    ]
    for lane in LANES:
        st = r.engines.get(lane)
        if st is None:
            continue
        executing = "" if st.execution_time_percent is None else f"  (executing {st.execution_time_percent:5.1f}%)"
        lines.append(f"    {lane:7s} {bar(st.active_time_percent / 100)} {st.active_time_percent:5.1f}%  "
                     f"{st.instruction_count:7d} instr{executing}")
    if r.roofline is not None:
        p = r.roofline
        lines.append(f"  roofline: {p.arithmetic_intensity:.1f} FLOP/B (ridge {p.ridge:.0f}, DMA ridge "
                     f"{p.ridge_dma:.0f}) -> {p.bound}-bound; {p.achieved_percent_of_attainable:.1f}% of attainable")
    if r.speed_of_light is not None:
        lines.append("  " + render_sol(r.speed_of_light))
    if r.hotspots:
        lines.append("  hot lines:")
        for h in r.hotspots[:hot]:
            engines = ", ".join(f"{k} {fmt_time(v)}" for k, v in list(h.by_engine.items())[:3])
            lines.append(f"    {h.location:28s} {h.percent:5.1f}%  {h.instructions:6d} instr  {engines}")
    for note in r.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def render_sol(sol: SpeedOfLight) -> str:
    text = (f"speed of light on {sol.target}: {fmt_time(sol.bound_s)} ({sol.bound}-bound; compute "
            f"{fmt_time(sol.compute_s)}, vector {fmt_time(sol.vector_s)}, memory {fmt_time(sol.memory_s)})")
    if sol.achieved_percent is not None:
        text += f"; achieved {sol.achieved_percent:.1f}%"
    return text


def fmt_metric(key: str, value: float) -> str:
    """A summary value in the unit its key names (seconds, bytes, percent, counts)."""
    if float(value).is_integer() and not key.endswith(("_time", "_bytes", "_percent")):
        return units.count(value)
    return units.quantity(key, value)


def render_comparison(c: Comparison) -> str:
    lines = [c.headline(), f"  A: {c.a_label}", f"  B: {c.b_label}"]
    for side, band in (("A", c.a_band), ("B", c.b_band)):
        if band:
            lines.append(f"  {side} is an estimate: {band}")
    for m in c.metrics:
        if m.a is None or m.b is None:
            continue
        pct = f"{m.percent_change:+.1f}%" if m.percent_change is not None else "   n/a"
        mark = {"b": "better", "a": "worse", "same": "same"}.get(m.better or "", "")
        a, b = fmt_metric(m.key, m.a), fmt_metric(m.key, m.b)
        lines.append(f"  {m.key:36s} {a:>14s} -> {b:<14s} {pct:>8s} {mark}")
    if c.lines:
        lines.append("  source lines with the largest change in engine time:")
        for d in c.lines[:5]:
            lines.append(f"    {d.location:28s} {fmt_time(d.a_time)} -> {fmt_time(d.b_time)}")
    for w in c.warnings:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)

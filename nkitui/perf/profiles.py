"""Parse real profiler output into a measured `PerfRecord`.

Accepted inputs (spec §8.2, §8.3; field names from the Neuron Explorer schema [NX-SCHEMA]):

* Neuron Explorer `view --output-format summary-json`: one object of Summary fields, or an object
  of such objects keyed by NeuronCore / profile name (the first is used unless `core=` picks one);
* Neuron Explorer `view --output-format json` and legacy `neuron-profile view --output-format json`:
  `{"summary": [...], "instruction": [...]}`, instructions timed by `start_ts`/`end_ts`/
  `duration_ns` (Explorer) or `timestamp`/`duration` (legacy), both in nanoseconds;
* a directory holding one of those files (e.g. an `nki.profile` working directory).

Percent fields are stored 0-100 in the record. Some summary-json versions write fractions (0-1)
under `*_percent` names; the parser checks each engine's active_time/total_time against its
percent field to tell which convention the file uses and says so in the record's notes.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from nkitui.perf.hardware import get_target
from nkitui.perf.hotspots import collect_rows
from nkitui.perf.roofline import roofline_point
from nkitui.perf.summary import LANES, SUMMARY_ENGINES, EngineStats, PerfRecord, coarsen

_PROFILE_FILE_NAMES = ("profile.json", "summary.json", "profile_summary.json", "neuron_profile.json")


class ProfileError(ValueError):
    """A profile file that cannot be read; the message names the file and the problem."""


def load_profile(path: str | os.PathLike[str], *, target: str | None = None, kernel: str = "",
                 core: str | int | None = None) -> PerfRecord:
    """Read a profiler JSON file (or a directory containing one) into a measured PerfRecord."""
    p = Path(path)
    if p.is_dir():
        p = _find_profile_file(p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{p}: cannot read profile ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg}); export the profile with "
                           "`neuron-explorer view --output-format summary-json` or `json`") from exc
    return parse_profile(data, source_name=str(p), target=target, kernel=kernel or p.stem, core=core)


def _find_profile_file(d: Path) -> Path:
    for name in _PROFILE_FILE_NAMES:
        if (d / name).is_file():
            return d / name
    candidates = sorted(d.glob("*.json"))
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ProfileError(f"{d}: no profile JSON found; expected one of {', '.join(_PROFILE_FILE_NAMES)}")
    raise ProfileError(f"{d}: several JSON files ({', '.join(c.name for c in candidates[:5])}); "
                       "pass the profile file itself")


def parse_profile(data: Any, *, source_name: str = "<profile>", target: str | None = None, kernel: str = "",
                  core: str | int | None = None) -> PerfRecord:
    """Turn decoded profiler JSON into a measured PerfRecord (see the module docstring)."""
    if isinstance(data, dict) and "storages" in data and isinstance(data.get("instructions"), list):
        raise ProfileError(f"{source_name}: an nkitui emulator trace, not a profiler export; estimate it with "
                           "`nkitui perf estimate`")
    summary, instructions, tool, metadata = _split(data, source_name, core)
    notes: list[str] = []
    summary = _normalise_percent(summary, source_name, notes)
    tgt = _target(target, metadata, summary, notes)
    spec = get_target(tgt)

    timeline: dict[str, list[list[float]]] = {}
    hot = []
    lane_busy: dict[str, float] = defaultdict(float)
    lane_count: dict[str, int] = defaultdict(int)
    t0 = t_end = None
    if instructions:
        rows = []
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for i, row in enumerate(instructions):
            if not isinstance(row, dict):
                raise ProfileError(f"{source_name}: instruction[{i}] is not an object")
            start, dur = _times(row, source_name, i)
            lane = _lane(row)
            spans[lane].append((start, start + dur))
            lane_busy[lane] += dur
            lane_count[lane] += 1
            rows.append((row.get("nki_source_location"), lane, dur, str(row.get("opcode", "")),
                         float(row.get("raw_flops") or 0.0),
                         int(row.get("hbm_read_bytes") or 0) + int(row.get("hbm_write_bytes") or 0)))
            t0 = start if t0 is None or start < t0 else t0
            t_end = start + dur if t_end is None or start + dur > t_end else t_end
        hot = collect_rows(rows)
        origin = t0 or 0.0
        for lane, ivs in spans.items():
            merged: list[list[float]] = []
            for s, e in sorted(ivs):
                s, e = s - origin, e - origin
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], e)
                else:
                    merged.append([s, e])
            timeline[lane] = merged

    total = _num(summary.get("total_time"))
    if total is None:
        if t0 is None:
            raise ProfileError(f"{source_name}: no total_time in the summary and no timed instructions; export "
                               "the profile with `neuron-explorer view --output-format summary-json` or `json`")
        total = t_end - t0
        notes.append("total_time taken from the span of the instruction trace (the summary had none)")
    if total <= 0:
        raise ProfileError(f"{source_name}: total_time is {total}; expected a positive duration in seconds")
    if timeline:
        res = total / 4000
        timeline = {k: coarsen(v, res) for k, v in sorted(timeline.items())}

    engines: dict[str, EngineStats] = {}
    for lane in LANES:
        prefix = "dma" if lane == "dma" else f"{lane}_engine"
        active = _num(summary.get(f"{prefix}_active_time"))
        pct = _num(summary.get(f"{prefix}_active_time_percent"))
        if active is None and pct is not None:
            active = pct / 100.0 * total
        if active is None and lane in timeline:
            active = sum(e - s for s, e in timeline[lane])
        if active is None:
            continue
        if pct is None:
            pct = 100.0 * active / total
        itime = _num(summary.get(f"{prefix}_instruction_time"))
        if lane == "dma":
            itime = _num(summary.get("dma_transfer_time"))
        count = summary.get(f"{prefix}_instruction_count") if lane != "dma" else summary.get("dma_transfer_count")
        engines[lane] = EngineStats(
            active_time=active,
            active_time_percent=pct,
            instruction_time=itime if itime is not None else lane_busy.get(lane, active),
            instruction_count=int(count) if count is not None else lane_count.get(lane, 0),
        )
        summary.setdefault(f"{prefix}_active_time", active)
        summary.setdefault(f"{prefix}_active_time_percent", pct)
    summary["total_time"] = total

    flops = _num(summary.get("model_flops")) or _num(summary.get("hardware_flops"))
    hbm = (_num(summary.get("hbm_read_bytes")) or 0.0) + (_num(summary.get("hbm_write_bytes")) or 0.0)
    _derive_utilisation(summary, spec, total, hbm, notes)
    roof = roofline_point(flops, hbm, total, "bfloat16", spec) if flops and hbm else None
    notes.append(f"measured by {tool}; engine times are the profiler's")
    return PerfRecord(
        source="measured",
        target=spec.name,
        kernel=kernel,
        total_time=total,
        summary=summary,
        engines=engines,
        timeline=timeline,
        hotspots=hot,
        roofline=roof,
        notes=notes,
        tool=tool,
        extras={"profile": source_name, "metadata": metadata},
    )


# ---------------------------------------------------------------- helpers

def _derive_utilisation(summary: dict, spec, total: float, hbm: float, notes: list[str]) -> None:
    """Fill MFU / HFU / MBU the profile left out, from its own FLOP and byte counts (profiler formulas)."""
    derived = []
    peak = spec.tensor_peak_flops
    for key, source in (("mfu_estimated_percent", "model_flops"), ("hfu_estimated_percent", "hardware_flops")):
        flops = _num(summary.get(source))
        if key not in summary and flops is not None:
            summary[key] = 100.0 * flops / (peak * total)
            derived.append(key)
    if "mbu_estimated_percent" not in summary and hbm:
        summary["mbu_estimated_percent"] = 100.0 * hbm / total / spec.hbm_stack_bytes_per_s
        derived.append("mbu_estimated_percent")
    if derived:
        notes.append(f"{', '.join(derived)} computed from the profile's FLOP/byte counts and the {spec.name} peaks")


def _split(data: Any, name: str, core: str | int | None) -> tuple[dict, list, str, dict]:
    """(summary fields, instruction rows, tool label, metadata) from any accepted layout."""
    if isinstance(data, list):
        if data and all(isinstance(x, dict) for x in data) and "total_time" in data[0]:
            return _pick(data, name, core), [], "neuron-profile summary-json", {}
        raise ProfileError(f"{name}: a JSON list, but not of summary objects with total_time")
    if not isinstance(data, dict):
        raise ProfileError(f"{name}: expected a JSON object from the profiler, got {type(data).__name__}")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    if "summary" in data or "instruction" in data or "instructions" in data:
        raw = data.get("summary", {})
        if isinstance(raw, list):
            summary = _pick(raw, name, core) if raw else {}
        elif isinstance(raw, dict):
            summary = dict(raw)
        else:
            raise ProfileError(f"{name}: field 'summary' must be an object or a list of objects")
        instr = data.get("instruction", data.get("instructions", []))
        if not isinstance(instr, list):
            raise ProfileError(f"{name}: field 'instruction' must be a list of instruction objects")
        explorer = bool(metadata.get("profile_schema_version")) or any(
            isinstance(r, dict) and "start_ts" in r for r in instr[:5]) or "hfu_estimated_percent" in summary
        tool = "neuron-explorer json" if explorer else "neuron-profile json"
        return summary, instr, tool, metadata
    if "total_time" in data:
        return dict(data), [], "neuron-explorer summary-json", metadata
    nested = {k: v for k, v in data.items() if isinstance(v, dict) and "total_time" in v}
    if nested:
        if core is not None:
            key = str(core)
            if key not in nested:
                raise ProfileError(f"{name}: no summary for core {key!r}; found {', '.join(nested)}")
            return dict(nested[key]), [], "neuron-explorer summary-json", metadata
        first = next(iter(nested))
        return dict(nested[first]), [], "neuron-explorer summary-json", {**metadata, "summary_key": first}
    raise ProfileError(f"{name}: no profiler summary found (expected 'total_time', a 'summary' field, "
                       "or summaries keyed by NeuronCore)")


def _pick(rows: list, name: str, core: str | int | None) -> dict:
    if core is None:
        return dict(rows[0])
    for r in rows:
        if str(r.get("nc_idx", r.get("pcore_idx", ""))) == str(core):
            return dict(r)
    raise ProfileError(f"{name}: no summary row with nc_idx {core}")


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _normalise_percent(summary: dict, name: str, notes: list[str]) -> dict:
    """Return a copy with every *_percent field in 0-100."""
    out = dict(summary)
    pct_keys = [k for k, v in out.items() if k.endswith("_percent") and _num(v) is not None]
    if not pct_keys:
        return out
    total = _num(out.get("total_time"))
    votes_fraction = votes_percent = 0
    if total and total > 0:
        for e in (*SUMMARY_ENGINES, "dma"):
            prefix = "dma" if e == "dma" else f"{e}_engine"
            act, pct = _num(out.get(f"{prefix}_active_time")), _num(out.get(f"{prefix}_active_time_percent"))
            if act is None or pct is None or act <= 0:
                continue
            ratio = act / total
            if abs(pct - ratio) < abs(pct - 100 * ratio):
                votes_fraction += 1
            else:
                votes_percent += 1
    if votes_fraction > votes_percent:
        fraction = True
    elif votes_percent > votes_fraction:
        fraction = False
    else:
        fraction = all(_num(out[k]) <= 1.0 for k in pct_keys)
        if fraction:
            notes.append(f"{name}: every *_percent field is <= 1 and no active times to check against; "
                         "read them as fractions")
    if fraction:
        for k in pct_keys:
            out[k] = 100.0 * _num(out[k])
        notes.append("percent fields in the file were fractions (0-1); converted to 0-100")
    return out


def _target(target: str | None, metadata: dict, summary: dict, notes: list[str]) -> str:
    if target:
        return get_target(target).name
    for key in ("target", "platform", "instance_type", "arch", "platform_target"):
        v = metadata.get(key) or summary.get(key)
        if isinstance(v, str):
            low = v.lower()
            for name in ("trn3", "trn2", "trn1", "inf2"):
                if name in low:
                    return get_target(name).name
    notes.append("the profile does not name its target; assumed trn2 (pass target= to set it)")
    return "trn2"


def _times(row: dict, name: str, i: int) -> tuple[float, float]:
    """(start, duration) in seconds from Explorer (start_ts/end_ts/duration_ns) or legacy fields (ns)."""
    if "start_ts" in row:
        start = _num(row.get("start_ts"))
        dur = _num(row.get("duration_ns"))
        if dur is None and _num(row.get("end_ts")) is not None and start is not None:
            dur = _num(row["end_ts"]) - start
    else:
        start = _num(row.get("timestamp"))
        dur = _num(row.get("duration"))
    if start is None or dur is None:
        raise ProfileError(f"{name}: instruction[{i}] lacks a start (start_ts/timestamp) or a duration "
                           "(duration_ns/end_ts/duration)")
    if dur < 0:
        raise ProfileError(f"{name}: instruction[{i}] has a negative duration {dur}")
    return start * 1e-9, dur * 1e-9


_LANE_WORDS = (
    ("dma", ("dma", "qsync", "qvector", "qscalar", "qgpsimd", "qpool", "qact")),
    ("tensor", ("tensor", "matrix", "pe")),
    ("vector", ("vector", "dve")),
    ("scalar", ("scalar", "act")),
    ("gpsimd", ("gpsimd", "pool")),
    ("sync", ("sync", "sp")),
)


def _lane(row: dict) -> str:
    for field_name in ("engine", "timeline_track", "label", "subgroup", "queue_name"):
        v = row.get(field_name)
        if not isinstance(v, str) or not v:
            continue
        low = v.lower()
        for lane, words in _LANE_WORDS:
            if any(low.startswith(w) for w in words):
                return lane
    return "other"

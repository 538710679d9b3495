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
import math
import os
import stat
from collections import defaultdict
from pathlib import Path
from typing import Any

from nkitui.perf.hardware import TargetSpec, get_target
from nkitui.perf.hotspots import collect_rows
from nkitui.perf.roofline import roofline_point
from nkitui.perf.summary import LANES, SUMMARY_ENGINES, EngineStats, HotLine, PerfRecord, coarsen

_PROFILE_FILE_NAMES = ("profile.json", "summary.json", "profile_summary.json", "neuron_profile.json")
MAX_PROFILE_BYTES = 1 << 30
MAX_DEPTH = 64
PERCENT_SLACK = 1.0  # profilers round: up to 101 % is read as 100 %, beyond that the file is wrong


class ProfileError(ValueError):
    """A profile file that cannot be read; the message names the file and the problem."""


def load_profile(path: str | os.PathLike[str], *, target: str | None = None, kernel: str = "",
                 core: str | int | None = None) -> PerfRecord:
    """Read a profiler JSON file (or a directory containing one) into a measured PerfRecord."""
    p = Path(path)
    if p.is_dir():
        p = _find_profile_file(p)
    try:
        st = p.stat()
    except OSError as exc:
        raise ProfileError(f"{p}: cannot read profile ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ProfileError(f"{p}: not a regular file; pass the profiler's JSON export")
    if st.st_size > MAX_PROFILE_BYTES:
        raise ProfileError(f"{p}: {st.st_size:,} bytes, over the {MAX_PROFILE_BYTES >> 20} MB a profile may have; "
                           "export the summary only (`--output-format summary-json`)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{p}: not UTF-8 text (byte {exc.start}); pass the profiler's JSON export") from None
    except OSError as exc:
        raise ProfileError(f"{p}: cannot read profile ({exc.strerror or exc})") from exc
    data = decode_json(text, str(p))
    return parse_profile(data, source_name=str(p), target=target, kernel=kernel or p.stem, core=core)


def _reject_constant(token: str) -> Any:
    raise ProfileError(f"{token} is not a JSON number")


def decode_json(text: str, name: str) -> Any:
    """json.loads with clear errors for what a hostile or broken export can hold: NaN/Infinity
    tokens, integers too long to convert, nesting deeper than MAX_DEPTH."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{name}:{exc.lineno}: not valid JSON ({exc.msg}); export the profile with "
                           "`neuron-explorer view --output-format summary-json` or `json`") from None
    except ProfileError as exc:
        raise ProfileError(f"{name}: {exc}; a profiler writes finite numbers only") from None
    except RecursionError:
        raise ProfileError(f"{name}: JSON nested too deeply to be a profiler export") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts (4300 digits)
        raise ProfileError(f"{name}: unreadable number in the JSON ({exc})") from None
    _check_depth(data, name)
    return data


def _check_depth(data: Any, name: str) -> None:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ProfileError(f"{name}: JSON nested more than {MAX_DEPTH} levels deep; not a profiler export")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


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
    if not isinstance(data, (dict, list)) or isinstance(data, bool):
        raise ProfileError(f"{source_name}: expected a JSON object from the profiler, got {type(data).__name__}")
    _check_depth(data, source_name)
    summary, instructions, tool, metadata = _split(data, source_name, core)
    notes: list[str] = []
    _check_numbers(summary, source_name)
    summary = _normalise_percent(summary, source_name, notes)
    _check_percents(summary, source_name, notes)
    tgt = _target(target, metadata, summary, notes)
    spec = get_target(tgt)

    timeline: dict[str, list[list[float]]] = {}
    hot: list[HotLine] = []
    lane_busy: dict[str, float] = defaultdict(float)
    lane_count: dict[str, int] = defaultdict(int)
    t0: float | None = None
    t_end: float | None = None
    if instructions:
        rows: list[tuple[str | None, str, float, str, float, int]] = []
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
                         _amount(row, "raw_flops", source_name, i),
                         int(_amount(row, "hbm_read_bytes", source_name, i) + _amount(row, "hbm_write_bytes", source_name, i))))
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
        if t0 is None or t_end is None:  # both are set by the first timed instruction
            raise ProfileError(f"{source_name}: no total_time in the summary and no timed instructions; export "
                               "the profile with `neuron-explorer view --output-format summary-json` or `json`")
        total = t_end - t0
        notes.append("total_time taken from the span of the instruction trace (the summary had none)")
    if not math.isfinite(total) or total <= 0:
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
        if active > total * (1 + PERCENT_SLACK / 100):
            raise ProfileError(f"{source_name}: {prefix}_active_time {active:g} s exceeds total_time {total:g} s; "
                               "the profile is inconsistent — export it again")
        if pct is None:
            pct = 100.0 * active / total
        itime = _num(summary.get(f"{prefix}_instruction_time"))
        if lane == "dma":
            itime = _num(summary.get("dma_transfer_time"))
        count = _num(summary.get(f"{prefix}_instruction_count") if lane != "dma" else summary.get("dma_transfer_count"))
        engines[lane] = EngineStats(
            active_time=active,
            active_time_percent=min(pct, 100.0),
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

def _derive_utilisation(summary: dict[str, Any], spec: TargetSpec, total: float, hbm: float, notes: list[str]) -> None:
    """Fill MFU / HFU / MBU the profile left out, from its own FLOP and byte counts (profiler formulas)."""
    derived: list[str] = []
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


def _split(data: Any, name: str, core: str | int | None) -> tuple[dict[str, Any], list[Any], str, dict[str, Any]]:
    """(summary fields, instruction rows, tool label, metadata) from any accepted layout."""
    if isinstance(data, list):
        if data and all(isinstance(x, dict) for x in data) and "total_time" in data[0]:
            return _pick(data, name, core), [], "neuron-profile summary-json", {}
        raise ProfileError(f"{name}: a JSON list, but not of summary objects with total_time")
    if not isinstance(data, dict):
        raise ProfileError(f"{name}: expected a JSON object from the profiler, got {type(data).__name__}")
    metadata = data.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
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


def _pick(rows: list[Any], name: str, core: str | int | None) -> dict[str, Any]:
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
    except OverflowError:  # an integer beyond float range: _check_numbers names it first
        return math.inf


def _bad_number(v: Any) -> str | None:
    """Why a JSON value is not a usable profiler number (None when it is fine or not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int) and abs(v) > 2**63:
        return f"the integer {str(v)[:20]}... ({len(str(abs(v)))} digits) is beyond any counter a profiler writes"
    if not math.isfinite(float(v)):
        return f"{v} is not a finite number"
    return None


_NON_NEGATIVE = ("_time", "_percent", "_count", "_bytes", "flops")


def _check_numbers(summary: dict[str, Any], name: str) -> None:
    for key, value in summary.items():
        why = _bad_number(value)
        if why:
            raise ProfileError(f"{name}: field {key!r}: {why}; export the profile again")
        if (isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 and key != "total_time"
                and str(key).endswith(_NON_NEGATIVE)):  # total_time has its own message below
            raise ProfileError(f"{name}: field {key!r} is {value}, a negative duration, count or percentage; "
                               "export the profile again")


def _check_percents(summary: dict[str, Any], name: str, notes: list[str]) -> None:
    """After _normalise_percent every *_percent field is 0-100; beyond 101 the file is wrong."""
    clamped = []
    for key, value in list(summary.items()):
        if not str(key).endswith("_percent") or _num(value) is None:
            continue
        pct = float(_num(value) or 0.0)
        if pct > 100.0 + PERCENT_SLACK:
            raise ProfileError(f"{name}: field {key!r} is {pct:g} %, an impossible share of the run "
                               "(at most 100 %); export the profile again")
        if pct > 100.0:
            summary[key] = 100.0
            clamped.append(key)
    if clamped:
        notes.append(f"{', '.join(clamped)} slightly above 100 % (rounding) read as 100 %")


def _amount(row: dict[str, Any], key: str, name: str, i: int) -> float:
    """A non-negative count of an instruction row (0 when absent)."""
    value = row.get(key)
    if value is None or value == "":
        return 0.0
    v = _num(value)
    if v is None or not math.isfinite(v) or v < 0 or (isinstance(value, int) and abs(value) > 2**63):
        raise ProfileError(f"{name}: instruction[{i}] field {key!r} is {str(value)[:40]!r}; expected a "
                           "non-negative number")
    return v


def _normalise_percent(summary: dict[str, Any], name: str, notes: list[str]) -> dict[str, Any]:
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
        fraction = all((_num(out[k]) or 0.0) <= 1.0 for k in pct_keys)  # pct_keys: numbers only
        if fraction:
            notes.append(f"{name}: every *_percent field is <= 1 and no active times to check against; "
                         "read them as fractions")
    if fraction:
        for k in pct_keys:
            out[k] = 100.0 * (_num(out[k]) or 0.0)
        notes.append("percent fields in the file were fractions (0-1); converted to 0-100")
    return out


def _target(target: str | None, metadata: dict[str, Any], summary: dict[str, Any], notes: list[str]) -> str:
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


def _times(row: dict[str, Any], name: str, i: int) -> tuple[float, float]:
    """(start, duration) in seconds from Explorer (start_ts/end_ts/duration_ns) or legacy fields (ns)."""
    if "start_ts" in row:
        start = _num(row.get("start_ts"))
        dur = _num(row.get("duration_ns"))
        end = _num(row.get("end_ts"))
        if dur is None and end is not None and start is not None:
            dur = end - start
    else:
        start = _num(row.get("timestamp"))
        dur = _num(row.get("duration"))
    if start is None or dur is None:
        raise ProfileError(f"{name}: instruction[{i}] lacks a start (start_ts/timestamp) or a duration "
                           "(duration_ns/end_ts/duration)")
    if not (math.isfinite(start) and math.isfinite(dur)) or abs(start) > 1e21 or dur > 1e21:
        raise ProfileError(f"{name}: instruction[{i}] has an impossible time (start {start:g} ns, "
                           f"duration {dur:g} ns); export the profile again")
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


def _lane(row: dict[str, Any]) -> str:
    for field_name in ("engine", "timeline_track", "label", "subgroup", "queue_name"):
        v = row.get(field_name)
        if not isinstance(v, str) or not v:
            continue
        low = v.lower()
        for lane, words in _LANE_WORDS:
            if any(low.startswith(w) for w in words):
                return lane
    return "other"

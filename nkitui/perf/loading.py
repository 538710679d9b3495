"""Reading what the perf commands take: saved traces, saved records, profiler exports, run results, shapes.

Every problem is a `PerfInputError` whose message names the file (or the argument) and the field, and says
what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nkitui.emulator.trace import TRACE_VERSION, Instruction, Trace
from nkitui.perf.estimate import estimate
from nkitui.perf.hardware import itemsize
from nkitui.perf.profiles import load_profile, parse_profile
from nkitui.perf.summary import PerfRecord
from nkitui.task.dtypes import DTYPE_NAMES, canonical_dtype_name


class PerfInputError(ValueError):
    """Bad input to a perf command: the message names the file or argument and the fix."""


_ROW_FIELDS = len(Instruction(0, "", "", 0, 0, (), "", (), "").to_row())
_RECORD_HINT = "save one with `nkitui emu run ... --trace OUT.json` or Trace.to_json()"

def dtype_name(text: str, where: str) -> str:
    """The manifest dtype name for `bf16`, `fp32`, `bfloat16`, ... (the one vocabulary, nkitui.task.dtypes);
    PerfInputError naming `where`."""
    name = canonical_dtype_name(text.strip().lower())
    if name is None:
        raise PerfInputError(f"{where}: unknown dtype {text!r}; use one of {', '.join(DTYPE_NAMES)} "
                             "(or bf16, fp16, fp32)")
    return name


def read_json(path: str) -> Any:
    """Decoded JSON of `path` (gzip-compressed when it ends in .gz)."""
    p = Path(path)
    try:
        if p.suffix == ".gz":
            import gzip

            with gzip.open(p, "rt", encoding="utf-8") as fh:
                return json.loads(fh.read())
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PerfInputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise PerfInputError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    except UnicodeDecodeError as exc:
        raise PerfInputError(f"{p}: not a text file ({exc.reason})") from exc
    except (EOFError, ValueError) as exc:  # gzip.BadGzipFile is an OSError; a truncated stream an EOFError
        raise PerfInputError(f"{p}: not a readable gzip JSON file ({exc})") from exc


def trace_from_json(data: Any, path: str) -> Trace:
    """A Trace from decoded JSON; PerfInputError naming the file and the field when it is not one."""
    if not isinstance(data, dict) or "instructions" not in data:
        kind = "a JSON " + type(data).__name__ if not isinstance(data, dict) else "an object without 'instructions'"
        raise PerfInputError(f"{path}: not an emulator trace ({kind}); {_RECORD_HINT}; "
                             "for a profiler export use `nkitui perf profile`")
    version = data.get("version")
    if version not in (1, TRACE_VERSION):
        raise PerfInputError(f"{path}: field 'version' is {version!r}, this nkitui reads trace versions 1 and "
                             f"{TRACE_VERSION}; record the trace again with this nkitui")
    rows = data["instructions"]
    if not isinstance(rows, list):
        raise PerfInputError(f"{path}: field 'instructions' is a JSON {type(rows).__name__}, expected a list of rows")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != _ROW_FIELDS:
            got = f"{len(row)} fields" if isinstance(row, list) else f"a JSON {type(row).__name__}"
            raise PerfInputError(f"{path}: instructions[{i}] has {got}, expected a row of {_ROW_FIELDS} "
                                 f"(Instruction.to_row); {_RECORD_HINT}")
    try:
        return Trace.from_json(data)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PerfInputError(f"{path}: not a valid emulator trace ({type(exc).__name__}: {exc}); {_RECORD_HINT}") from exc


@dataclass
class Side:
    """One side of a comparison: the record and, when it came from a run result, the run's task."""

    record: PerfRecord
    origin: str  # "record", "trace", "profile", "run result"
    task: str = ""  # task id, when known
    run: str = ""  # run id, when known


def load_side(path: str, target: str | None = None) -> Side:
    """A PerfRecord from a saved record, a run result (its utilisation), a saved trace (estimated now) or a
    profiler export (measured)."""
    if Path(path).is_dir():
        return Side(load_profile(path, target=target), "profile")
    data = read_json(path)
    if isinstance(data, dict) and "run_id" in data and "task_id" in data:
        util = data.get("utilisation")
        if not isinstance(util, dict):
            raise PerfInputError(f"{path}: run {data.get('run_id')} has no engine utilisation record (field "
                                 "'utilisation'); the run did not reach its profile phase")
        try:
            rec = PerfRecord.from_json(util)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PerfInputError(f"{path}: field 'utilisation' is not a valid perf record ({exc})") from exc
        return Side(rec, "run result", str(data.get("task_id") or ""), str(data.get("run_id") or ""))
    if isinstance(data, dict) and "source" in data and "engines" in data:
        try:
            return Side(PerfRecord.from_json(data), "record")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PerfInputError(f"{path}: not a valid saved record ({exc}); save it again with this nkitui "
                                 "(`nkitui perf estimate ... --json` or PerfRecord.to_json())") from exc
    if isinstance(data, dict) and "instructions" in data and "storages" in data:
        return Side(estimate(trace_from_json(data, path), target), "trace")
    return Side(parse_profile(data, source_name=path, target=target, kernel=Path(path).stem), "profile")


def load_any(path: str, target: str | None = None) -> PerfRecord:
    return load_side(path, target).record


def tensor_spec(spec: str, flag: str) -> tuple[tuple[int, ...], str]:
    """`4096x8192:bf16` -> ((4096, 8192), "bfloat16") (dtype defaults to bfloat16)."""
    shape_text, _, dtype = spec.partition(":")
    try:
        shape = tuple(int(x) for x in shape_text.strip().lower().split("x"))
    except ValueError:
        raise PerfInputError(f"{flag} {spec!r}: write shapes as DIMxDIM[:dtype], e.g. 4096x8192:bfloat16") from None
    name = dtype_name(dtype, f"{flag} {spec!r}") if dtype else "bfloat16"
    try:
        itemsize(name)
    except ValueError as exc:
        raise PerfInputError(f"{flag} {spec!r}: {exc}") from None
    return shape, name


def parse_shape(text: str, where: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(x) for x in text.strip().lower().split("x"))
    except ValueError:
        raise PerfInputError(f"{where}: write shapes as DIMxDIM..., e.g. 4096x8192") from None
    if not shape or any(d <= 0 for d in shape):
        raise PerfInputError(f"{where}: dimensions must be positive integers, e.g. 4096x8192")
    return shape

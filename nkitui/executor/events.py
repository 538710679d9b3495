"""The worker-event protocol: one JSON object per line (CONTRACT in the architecture brief).

    {"event": "log", "stream": "stdout", "level": "info", "text": "..."}
    {"event": "phase", "name": "compile", "state": "start"}
    {"event": "phase", "name": "compile", "state": "end", "status": "ok", "duration_s": 0.12, "detail": ""}
    {"event": "progress", "done": 1, "total": 3, "label": "seed 0"}
    {"event": "error", "kind": "kernel-error", "message": "...", "file": "add_nki.py", "line": 12}
    {"event": "result", "result": {...RunResult...}}
    {"event": "backend", "name": "emulator", "requested": "auto", "reason": "auto: no Neuron device ..."}

Between the trusted evaluator and its untrusted children (processes that import task code) one more
kind travels, never on the worker's own stream:

    {"event": "data", "kind": "reply", "data": {...}}      # a child's answer to a request, as data

Both sides use this module: the child encodes, the parent decodes. Anything on the event stream
that is not such an object becomes a `log` event (stream "worker"), never an exception. Stdlib
only, because the worker imports it before anything else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

PHASES = ("static", "load", "compile", "run", "reference", "compare", "trials", "precision", "mutants", "profile")
"""Phase names in the order a run goes through them. The CONTRACT's six (load, compile, run,
reference, compare, profile) always appear; static/trials/precision/mutants only when enabled."""

LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One chunk of log text. `stream`: "stdout"/"stderr" (the kernel's own output), "worker"
    (the evaluation pipeline), or "executor" (the parent: truncation markers, exit reasons).
    `text` holds one line without its newline."""

    stream: str
    text: str
    level: str = "info"

    event: ClassVar[str] = "log"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "log", "stream": self.stream, "level": self.level, "text": self.text}


@dataclass(frozen=True, slots=True)
class PhaseEvent:
    """A phase starts (`state="start"`) or ends (`state="end"` with status and duration)."""

    name: str
    state: str  # "start" | "end"
    status: str = ""  # on end: "ok" | "failed" | "skipped"
    duration_s: float | None = None
    detail: str = ""

    event: ClassVar[str] = "phase"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"event": "phase", "name": self.name, "state": self.state}
        if self.state == "end":
            d.update(status=self.status, duration_s=self.duration_s, detail=self.detail)
        return d


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    done: int
    total: int
    label: str = ""

    event: ClassVar[str] = "progress"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "progress", "done": self.done, "total": self.total, "label": self.label}


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """Something went wrong, in words. `kind` is a stable slug (see ERROR_KINDS in docs/executor.md);
    `file`/`line` point into the task (task-relative path) when known."""

    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    traceback: str = ""

    event: ClassVar[str] = "error"

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "error", "kind": self.kind, "message": self.message, "file": self.file,
            "line": self.line, "traceback": self.traceback,
        }

    @property
    def location(self) -> str:
        if not self.file:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True, slots=True)
class ResultEvent:
    """The run's result as a plain dict (nkitui.evaluate.run.result.RunResult.to_dict())."""

    result: dict[str, Any] = field(default_factory=dict)

    event: ClassVar[str] = "result"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "result", "result": self.result}


@dataclass(frozen=True, slots=True)
class BackendEvent:
    """The backend a run uses and why (sent once, when it is chosen), so the parent knows it even
    when the worker dies before its result."""

    name: str  # emulator | simulator | neuron
    reason: str
    requested: str = "auto"

    event: ClassVar[str] = "backend"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "backend", "name": self.name, "reason": self.reason, "requested": self.requested}


@dataclass(frozen=True, slots=True)
class DataEvent:
    """Data from an untrusted child to the evaluator (a reply to a request, its confinement report,
    its sandbox record). Never a verdict: the evaluator validates it like any other input."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    event: ClassVar[str] = "data"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "data", "kind": self.kind, "data": self.data}


Event = Union[LogEvent, PhaseEvent, ProgressEvent, ErrorEvent, ResultEvent, BackendEvent, DataEvent]


def event_name(event: Event) -> str:
    """The wire name of an event ("log", "phase", "progress", "error", "result", "backend", "data")."""
    return event.event


def encode(event: Event) -> bytes:
    """One event as a JSON line (UTF-8, newline-terminated). NaN/inf are not valid JSON: callers
    put numbers through nkitui.common.codec.encode first; `allow_nan=False` makes a slip loud."""
    return (json.dumps(event.to_dict(), separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value == value and abs(value) != float("inf") else None  # NaN, ±inf: no line


def _s(value: Any, default: str) -> str:
    return value if type(value) is str else (default if value is None else str(value))


def from_dict(d: dict[str, Any]) -> Event | None:
    """The event a decoded JSON object describes, or None when it is not a well-formed event."""
    name = d.get("event")
    try:
        if name == "log":  # the hot path: most events are log lines
            return LogEvent(_s(d.get("stream"), "worker"), _s(d.get("text"), ""), _s(d.get("level"), "info"))
        if name == "phase":
            duration = d.get("duration_s")
            return PhaseEvent(
                name=str(d["name"]), state=str(d.get("state", "start")), status=str(d.get("status", "")),
                duration_s=float(duration) if isinstance(duration, (int, float)) else None,
                detail=str(d.get("detail", "")),
            )
        if name == "progress":
            return ProgressEvent(done=int(d["done"]), total=int(d["total"]), label=str(d.get("label", "")))
        if name == "error":
            return ErrorEvent(
                kind=str(d.get("kind", "error")), message=str(d.get("message", "")),
                file=str(d["file"]) if d.get("file") else None, line=_opt_int(d.get("line")),
                traceback=str(d.get("traceback", "")),
            )
        if name == "result" and isinstance(d.get("result"), dict):
            return ResultEvent(result=d["result"])
        if name == "backend":
            return BackendEvent(name=str(d["name"]), reason=_s(d.get("reason"), ""), requested=_s(d.get("requested"), "auto"))
        if name == "data" and isinstance(d.get("data"), dict):
            return DataEvent(kind=str(d.get("kind", "")), data=d["data"])
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: int(1e400) of a hostile child
        return None
    return None


def log_lines_of(event: PhaseEvent | ErrorEvent) -> list[LogEvent]:
    """How a phase or an error reads in the run's log: the parent keeps these lines in the log it
    stores with the result, and the app shows the same lines live, so a reopened run's log reads as
    it did while it ran. An error names its file:line and is followed by the traceback's frames in
    the task's own files (relative paths: nkitui's frames are left out), so each can be followed."""
    if isinstance(event, PhaseEvent):
        if event.state == "start":
            return [LogEvent("phase", f"── {event.name} ──")]
        took = f" in {event.duration_s:.2f} s" if event.duration_s is not None else ""
        detail = f": {event.detail}" if event.detail else ""
        level = "error" if event.status == "failed" else "warning" if event.status == "warning" else "info"
        return [LogEvent("phase", f"── {event.name} {event.status}{took}{detail}", level)]
    where = f" at {event.location}" if event.location else ""
    lines = [LogEvent("executor", f"error ({event.kind}){where}: {event.message}", "error")]
    frames = event.traceback.splitlines()
    for index, text in enumerate(frames):
        stripped = text.strip()
        if stripped.startswith('File "') and not stripped.startswith(('File "/', 'File "<')):
            lines.append(LogEvent("traceback", text.rstrip(), "error"))
            code = frames[index + 1] if index + 1 < len(frames) else ""
            if code.strip() and not code.strip().startswith(("File ", "^")):
                lines.append(LogEvent("traceback", code.rstrip(), "error"))
    return lines


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # nkitui's writers never send NaN/Infinity (allow_nan=False)


_raw_decode = json.JSONDecoder(parse_constant=_no_constant).raw_decode

MAX_DEPTH = 64
"""How deeply an event's JSON may nest. nkitui's own events nest a dozen levels at most; the parent walks
an event's values recursively (redaction, the result's decoding), so a line nested thousands deep would
raise RecursionError in the thread that reads it (a hostile child's cheapest way to crash that thread)."""


class EventTooDeep(ValueError):
    """A line that is a JSON object nested deeper than MAX_DEPTH (or than the JSON reader itself can read)."""


def _deeper_than(obj: Any, limit: int) -> bool:
    """Does `obj` (decoded JSON) nest containers more than `limit` deep? Iterative: never recurses."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        items = value.values() if type(value) is dict else value
        stack.extend((v, depth + 1) for v in items if type(v) is dict or type(v) is list)
    return False


def parse_line(line: str | bytes, *, strict: bool = False) -> Event | None:
    """The event on one line of the event stream, or None when the line is not an event. A JSON object
    nested deeper than MAX_DEPTH is not an event either; with `strict` (an untrusted child's stream) it
    raises EventTooDeep instead, so the reader can stop the child that sent it. Never RecursionError."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if line[:1] != "{":
        line = line.strip()
        if line[:1] != "{":
            return None
    try:
        obj, end = _raw_decode(line)
    except RecursionError:  # the C reader's own guard: far deeper than MAX_DEPTH
        if strict:
            raise EventTooDeep(f"an event line nested deeper than the JSON reader can read ({len(line):,} characters)") from None
        return None
    except ValueError:
        return None
    if end != len(line) and line[end:].strip():
        return None
    if type(obj) is not dict:
        return None
    # a flat event (the hot path: log lines) has few brackets; only a line with many is walked
    if line.count("{", 0, end) + line.count("[", 0, end) > MAX_DEPTH and _deeper_than(obj, MAX_DEPTH):
        if strict:
            raise EventTooDeep(f"an event nested more than {MAX_DEPTH} levels deep")
        return None
    if _SURROGATE_ESCAPE.search(line, 0, end):
        obj = _without_surrogates(obj)
    return from_dict(obj)


# JSON may escape a lone UTF-16 surrogate ("\ud800"); json.loads makes it a str no UTF-8 writer accepts, so a
# child's words holding one crashed whatever printed or stored them (the report, the run store)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) replaced by U+FFFD (depth already bounded)."""
    if type(value) is str:
        return _SURROGATE.sub("\ufffd", value)
    if type(value) is dict:
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if type(value) is list:
        return [_without_surrogates(v) for v in value]
    return value


def decode_line(line: str | bytes, stream: str = "worker") -> Event:
    """Parse one line from the event stream; anything that is not an event becomes a LogEvent."""
    event = parse_line(line)
    if event is not None:
        return event
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    return LogEvent(stream=stream, text=line.rstrip("\r\n"))

"""A run's log as the auditor reads it: one formatting for the live log and for a reopened run.

The worker's events become `LogLine`s here, and a stored run's log (`RunResult.log_excerpt`, lines
"[stream] text" or "[stream:level] text" written by the parent from the same events) is read back
through the same function, so a reopened run's log has the live log's format.

Lines can point into the task: an error "at file.py:12", an emulator message "... at file.py:31",
a traceback frame `File "file.py", line 12`. `line_location` finds that place, so the log can open
the Source area at it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, log_lines_of

LEVELS = ("debug", "info", "warning", "error")
LEVEL_INDEX = {name: i for i, name in enumerate(LEVELS)}
_ALIASES = {"warn": "warning", "err": "error", "critical": "error", "fatal": "error", "trace": "debug",
            "stderr": "warning", "stdout": "info"}
BARE_STREAMS = ("worker", "phase", "executor", "traceback")  # nkitui's own lines carry no stream tag


class LogLine(NamedTuple):
    """One line of a run's log as shown: its level (an index into LEVELS) and its text."""

    level: int
    text: str


def level_index(level: str | None) -> int:
    if level is None:
        return LEVEL_INDEX["info"]
    name = level.lower()
    return LEVEL_INDEX.get(_ALIASES.get(name, name), LEVEL_INDEX["info"])


def log_line(event: LogEvent) -> LogLine:
    """The kernel's own output is tagged with its stream ("[stdout] ..."); nkitui's lines are shown as they are."""
    text = event.text if event.stream in BARE_STREAMS else f"[{event.stream}] {event.text}"
    return LogLine(level_index(event.level), text)


def event_lines(event: LogEvent | PhaseEvent | ErrorEvent) -> list[LogLine]:
    """The lines one worker event adds to the log (a progress or result event adds none)."""
    if isinstance(event, LogEvent):
        return [log_line(event)]
    return [log_line(line) for line in log_lines_of(event)]


_EXCERPT_TAG = re.compile(r"^\[(?P<stream>[\w.-]+)(?::(?P<level>\w+))?\] ")


def stored_line(line: str) -> LogLine:
    """A line of a stored run's log excerpt, as the live log showed it."""
    m = _EXCERPT_TAG.match(line)
    if m is None:
        return LogLine(LEVEL_INDEX["info"], line)
    return log_line(LogEvent(m.group("stream"), line[m.end():], m.group("level") or "info"))


def stored_lines(excerpt: Iterable[str]) -> list[LogLine]:
    return [stored_line(line) for line in excerpt]


# --- places in the task that a line names -------------------------------------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_AT = re.compile(r"(?P<file>[\w./+-]+\.(?:py|cu|cuh|cpp|cc|h|hpp)):(?P<line>\d+)\b")


def line_location(text: str, task_files: Iterable[str]) -> tuple[str, int] | None:
    """(task-relative file, line) that a log line names, or None when it names no file of the task.

    `task_files` are the task's files relative to its root. A path from the worker's scratch copy
    (".../work/kernel.py") is matched to the task file it ends with.
    """
    files = list(task_files)
    candidates = [(m.group("file"), int(m.group("line"))) for m in _FRAME.finditer(text)]
    candidates += [(m.group("file"), int(m.group("line"))) for m in _AT.finditer(text)]
    for path, line in candidates:
        found = task_file(path, files)
        if found is not None and line > 0:
            return found, line
    return None


def task_file(path: str, files: list[str]) -> str | None:
    """The task file `path` names: itself, or the longest task path it ends with."""
    path = path.replace("\\", "/").removeprefix("./")
    if path in files:
        return path
    ends = [f for f in files if path.endswith("/" + f)]
    return max(ends, key=len) if ends else None

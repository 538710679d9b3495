"""Bounded logs: a kernel may print 50 MB in one burst; the parent keeps a head and a tail.

Policy (the same for the kernel's stdout and stderr, each on its own):
  * the first HEAD_LINES lines (at most HEAD_BYTES) become log events as they arrive;
  * lines longer than MAX_LINE characters are wrapped into pieces of MAX_LINE;
  * beyond the head, output is read as fast as the pipe delivers and *elided*: counted, not turned
    into events; only the last TAIL_LINES lines are kept;
  * one marker event says when eliding starts, and when the stream ends a second marker gives the
    count of elided lines and bytes, followed by the kept tail lines.
So the oldest lines are kept, then a gap with a truncation marker, then the newest lines.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from nkitui.common import units
from nkitui.common.redact import LineRedactor
from nkitui.executor.events import LogEvent

HEAD_LINES = 2000
HEAD_BYTES = 1024 * 1024
TAIL_LINES = 200
MAX_LINE = 4096


def human_bytes(n: int) -> str:
    return units.bytes_(n)  # the one formatter of quantities


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


@dataclass
class StreamLimiter:
    """Turns raw bytes from one pipe into bounded LogEvents (head, marker, tail)."""

    stream: str
    head_lines: int = HEAD_LINES
    head_bytes: int = HEAD_BYTES
    tail_lines: int = TAIL_LINES
    max_line: int = MAX_LINE
    total_bytes: int = 0
    shown_lines: int = 0
    shown_bytes: int = 0
    head_open: bool = True
    _partial: bytes = b""
    _after_bytes: int = 0  # bytes that arrived after the head closed
    _after_newlines: int = 0
    _recent: deque[bytes] = field(default_factory=deque)  # recent raw chunks after the head closed
    _recent_size: int = 0
    _redactor: LineRedactor = field(default_factory=LineRedactor)  # secrets never become log events

    def _line(self, raw: bytes) -> str:
        return self._redactor.line(_decode(raw))

    @property
    def elided(self) -> bool:
        return not self.head_open

    def _wrap(self, raw: bytes) -> list[bytes]:
        if len(raw) <= self.max_line:
            return [raw]
        return [raw[i:i + self.max_line] for i in range(0, len(raw), self.max_line)]

    def _close_head(self, rest: bytes) -> LogEvent:
        self.head_open = False
        self._after(rest)
        return LogEvent(
            stream="executor", level="warning",
            text=(f"[nkitui] {self.stream} passed {self.shown_lines:,} lines / {human_bytes(self.shown_bytes)}: "
                  f"further output is elided; its last {self.tail_lines} lines follow when it ends"),
        )

    def _after(self, data: bytes) -> None:
        if not data:
            return
        self._after_bytes += len(data)
        self._after_newlines += data.count(b"\n")
        self._recent.append(data)
        self._recent_size += len(data)
        keep = (self.tail_lines + 1) * (self.max_line + 1)
        while self._recent_size - len(self._recent[0]) >= keep:
            self._recent_size -= len(self._recent.popleft())

    def feed(self, data: bytes) -> list[LogEvent]:
        self.total_bytes += len(data)
        if not self.head_open:
            self._after(data)
            return []
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out: list[LogEvent] = []
        for i, raw in enumerate(lines):
            pieces = self._wrap(raw)
            for j, piece in enumerate(pieces):
                if self.shown_lines >= self.head_lines or self.shown_bytes + len(piece) > self.head_bytes:
                    # The rest of this line, then everything after it, exactly as it arrived.
                    rest = b"".join(pieces[j:]) + b"\n" + b"\n".join(lines[i + 1:] + [self._partial])
                    self._partial = b""
                    out.append(self._close_head(rest))
                    return out
                out.append(LogEvent(stream=self.stream, text=self._line(piece)))
                self.shown_lines += 1
                self.shown_bytes += len(piece) + 1
        # A line without a newline that is already too long: show its full-width pieces now.
        while len(self._partial) > self.max_line and self.head_open:
            piece, self._partial = self._partial[:self.max_line], self._partial[self.max_line:]
            if self.shown_lines >= self.head_lines or self.shown_bytes + len(piece) > self.head_bytes:
                rest, self._partial = piece + self._partial, b""
                out.append(self._close_head(rest))
                return out
            out.append(LogEvent(stream=self.stream, text=self._line(piece)))
            self.shown_lines += 1
            self.shown_bytes += len(piece) + 1
        return out

    def finish(self) -> list[LogEvent]:
        """The stream ended: flush the last partial line, or the elision marker and the tail."""
        if self.head_open:
            if not self._partial:
                return []
            out = [LogEvent(stream=self.stream, text=self._line(p)) for p in self._wrap(self._partial)]
            self.shown_lines += len(out)
            self.shown_bytes += len(self._partial)
            self._partial = b""
            return out
        blob = b"".join(self._recent)
        trimmed = self._recent_size < self._after_bytes  # older chunks were dropped
        lines = blob.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if trimmed and lines:
            lines = lines[1:]  # the first line may have lost its beginning
        tail_raw = lines[-self.tail_lines:] if self.tail_lines else []
        tail: list[bytes] = []
        for raw in tail_raw:
            tail.extend(self._wrap(raw))
        tail = tail[-self.tail_lines:] if self.tail_lines else []
        after_lines = self._after_newlines + (0 if self._after_bytes == 0 or blob.endswith(b"\n") else 1)
        elided_lines = max(0, after_lines - len(tail_raw))
        elided_bytes = max(0, self._after_bytes - sum(len(t) + 1 for t in tail_raw))
        marker = LogEvent(
            stream="executor", level="warning",
            text=f"[nkitui] … {elided_lines:,} line{'' if elided_lines == 1 else 's'} ({human_bytes(elided_bytes)}) "
                 f"of {self.stream} elided …",
        )
        self.shown_lines += len(tail)
        return [marker] + [LogEvent(stream=self.stream, text=self._line(t)) for t in tail]


class BoundedLog:
    """The log of one run as the parent keeps it: the first `head` entries, the last `tail` entries
    and a count of those dropped between them (a second line of defence behind StreamLimiter)."""

    def __init__(self, head: int = 5000, tail: int = 5000):
        self.head_limit = head
        self.head: list[LogEvent] = []
        self.tail: deque[LogEvent] = deque(maxlen=tail)
        self.dropped = 0
        self.total = 0

    def append(self, event: LogEvent) -> None:
        self.total += 1
        if len(self.head) < self.head_limit:
            self.head.append(event)
            return
        if len(self.tail) == self.tail.maxlen:
            self.dropped += 1
        self.tail.append(event)

    def entries(self) -> list[LogEvent]:
        if not self.dropped:
            return self.head + list(self.tail)
        marker = LogEvent(stream="executor", level="warning", text=f"[nkitui] … {self.dropped:,} log lines dropped …")
        return self.head + [marker] + list(self.tail)

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

"""Hot spots: engine time by kernel source line, from a schedule or from profiler instruction rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nkitui.perf.summary import HotLine


@dataclass
class _Acc:
    time: float = 0.0
    by_engine: dict[str, float] = field(default_factory=dict)
    count: int = 0
    flops: float = 0.0
    hbm: int = 0
    opcodes: dict[str, int] = field(default_factory=dict)


class HotLineCollector:
    """Accumulates (location, lane, seconds, opcode, flops, hbm bytes) rows into ranked `HotLine`s."""

    def __init__(self) -> None:
        self._acc: dict[tuple[str, int], _Acc] = {}
        self._total = 0.0

    def add(self, file: str, line: int, lane: str, seconds: float, opcode: str = "",
            flops: float = 0.0, hbm_bytes: int = 0, count: int = 1) -> None:
        acc = self._acc.get((file, line))
        if acc is None:
            acc = self._acc[(file, line)] = _Acc()
        acc.time += seconds
        acc.by_engine[lane] = acc.by_engine.get(lane, 0.0) + seconds
        acc.count += count
        acc.flops += flops
        acc.hbm += hbm_bytes
        if opcode:
            acc.opcodes[opcode] = acc.opcodes.get(opcode, 0) + count
        self._total += seconds

    def result(self, top: int | None = 20) -> list[HotLine]:
        total = self._total or 1.0
        lines = [
            HotLine(
                location=f"{f}:{ln}" if f else "?",
                file=f,
                line=ln,
                time=a.time,
                percent=100.0 * a.time / total,
                by_engine=dict(sorted(a.by_engine.items(), key=lambda kv: -kv[1])),
                instructions=a.count,
                flops=a.flops,
                hbm_bytes=a.hbm,
                opcodes=dict(sorted(a.opcodes.items(), key=lambda kv: -kv[1])),
            )
            for (f, ln), a in self._acc.items()
        ]
        lines.sort(key=lambda h: (-h.time, h.file, h.line))
        return lines if top is None else lines[:top]


def hot_lines(by_line: dict[tuple[str, int, str, str], list[Any]], top: int | None = 20) -> list[HotLine]:
    """Rank source lines by engine time from a schedule's (file, line, lane, opcode) totals."""
    col = HotLineCollector()
    for (f, ln, lane, opcode), (secs, count, flops, hbm) in by_line.items():
        col.add(f, ln, lane, secs, opcode, flops, hbm, count)
    return col.result(top)


def parse_location(text: str | None) -> tuple[str, int]:
    """Split a profiler `nki_source_location` ("file.py:42", possibly a list of them) into (file, line)."""
    if not text:
        return "", 0
    s = str(text).strip().strip("[]").split(",")[0].strip().strip("'\"")
    if ":" not in s:
        return s, 0
    f, _, ln = s.rpartition(":")
    try:
        return f, int(ln)
    except ValueError:
        return s, 0


def collect_rows(rows: Iterable[tuple[str | None, str, float, str, float, int]], top: int | None = 20) -> list[HotLine]:
    """Hot lines from (nki_source_location, lane, seconds, opcode, flops, hbm bytes) rows."""
    col = HotLineCollector()
    for loc, lane, secs, opcode, flops, hbm in rows:
        f, ln = parse_location(loc)
        col.add(f, ln, lane, secs, opcode, flops, hbm)
    return col.result(top)

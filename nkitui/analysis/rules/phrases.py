"""Phrases findings use to describe code: loops, trip counts, tensors and sets of lines."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from nkitui.analysis.nki.model import Loop, Tensor
from nkitui.common.findings import Severity


def cap(text: str) -> str:
    """Upper-case the first letter only (str.capitalize would lower-case code such as `WARP`)."""
    return text[:1].upper() + text[1:]


def loop_phrase(loop: Loop) -> str:
    if loop.kind == "while":
        return f"the while loop at line {loop.line}"
    if loop.kind == "iter":
        return f"the `for {loop.var} in {loop.stop_text}` loop at line {loop.line}"
    api = loop.api if loop.api != "builtins.range" else "range"
    return f"the `for {loop.var} in {api}({loop.stop_text})` loop at line {loop.line}"


def trip_phrase(loop: Loop) -> str:
    return f"{loop.trip} iterations" if loop.trip is not None else f"{loop.stop_text} iterations"


def tensor_phrase(t: Tensor) -> str:
    return f"`{t.label()}`"


def lines_phrase(lines: Iterable[int]) -> str:
    """"line 12", "lines 12, 15", "lines 29-37", "lines 3, 7-9 and 12-20"."""
    unique = sorted(set(lines))
    if len(unique) == 1:
        return f"line {unique[0]}"
    spans: list[list[int]] = []
    for n in unique:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in spans]
    if len(parts) > 6:
        parts = parts[:5] + [f"{len(parts) - 5} more places"]
    if len(parts) == 1:
        return f"lines {parts[0]}"
    return "lines " + ", ".join(parts[:-1]) + " and " + parts[-1]


def severity_groups(hits: Iterable[tuple[int, str, str]]) -> Iterator[tuple[Severity, list[tuple[int, str]], list[int], str]]:
    """For each of high and medium with hits (line, why, severity): the group, its lines, and the first eight
    shown as "line N: why; ..." (and how many more)."""
    hits = list(hits)
    severity: Severity
    for severity in ("high", "medium"):
        group = [(line, why) for line, why, sev in hits if sev == severity]
        if not group:
            continue
        shown = "; ".join(f"line {line}: {why}" for line, why in group[:8]) + (
            f"; and {len(group) - 8} more" if len(group) > 8 else "")
        yield severity, group, [line for line, _ in group], shown

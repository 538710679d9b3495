"""Rows of the side-by-side CUDA | NKI view, aligned by role where alignment data exists.

Pure data (no Textual). The static analysis pairs CUDA constructs with the NKI code that plays the
same role (global memory and HBM tensors, thread indexing and tile loops, bounds checks and masks
...); each pair lists line ranges on both sides. The view turns pairs into anchors (a CUDA line and
an NKI line that should share a row), keeps the longest chain of anchors that never cross, and pads
the shorter side between anchors so each anchored pair of lines sits on one row.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Sequence

Span = tuple[int, int]  # 1-based inclusive line range


@dataclass(frozen=True)
class RolePair:
    role: str  # stable id, e.g. "global-memory"
    title: str  # e.g. "global memory → HBM"
    cuda: tuple[Span, ...]
    nki: tuple[Span, ...]
    cuda_label: str = ""
    nki_label: str = ""
    note: str = ""
    match: str = "role"  # "name" | "role" | "unmatched"

    def covers(self, side: str, line: int) -> bool:
        spans = self.cuda if side == "cuda" else self.nki
        return any(a <= line <= b for a, b in spans)

    @property
    def size(self) -> int:
        return sum(b - a + 1 for a, b in (*self.cuda, *self.nki))


@dataclass(frozen=True, slots=True)
class PairRow:
    left: int | None  # 1-based CUDA line shown on this row
    right: int | None  # 1-based NKI line
    anchor: bool = False  # the two lines were paired by the analysis
    part: int = 0  # soft wrap: 0 for the row that starts the line(s), k for their k-th continuation


# Characters after which a soft-wrapped line of code may break (besides spaces): argument lists and
# subscripts read well split after a comma or an opening bracket.
_BREAK_AFTER = frozenset(",([{")


def wrap_spans(text: str, width: int, indent: int = 0) -> list[tuple[int, int]]:
    """Character spans of `text` for soft wrap at `width` cells.

    Rows after the first are drawn behind `indent` spaces (a hanging indent), so they hold
    `width - indent` characters. A row breaks at the last space, or after the last comma or opening
    bracket, in its second half; failing that, at the width. A space at a break is dropped.
    """
    if width <= 0 or len(text) <= width:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    start, room = 0, width
    while len(text) - start > room:
        end = start + room
        cut = end
        for i in range(end, start + max(1, room // 2) - 1, -1):
            if text[i] == " " or text[i - 1] in _BREAK_AFTER:
                cut = i
                break
        spans.append((start, cut))
        start = cut + 1 if cut < len(text) and text[cut] == " " else cut
        room = max(8, width - indent)
    spans.append((start, len(text)))
    return spans


@dataclass
class Alignment:
    rows: list[PairRow]
    anchors: list[tuple[int, int]] = field(default_factory=list)  # (cuda line, nki line) laid out on one row


def candidate_anchors(pairs: Sequence[RolePair]) -> list[tuple[int, int, int]]:
    """(cuda line, nki line, weight) from each pair: its ranges matched in order, start to start.

    Pairs matched by name (a CUDA pointer and the HBM tensor of the same name) weigh more than pairs
    matched by role only.
    """
    out: list[tuple[int, int, int]] = []
    for p in pairs:
        if not p.cuda or not p.nki:
            continue
        weight = 2 if p.match == "name" else 1
        for (cs, _), (ns, _) in zip(sorted(p.cuda), sorted(p.nki)):
            out.append((cs, ns, weight))
    return out


def monotone_chain(points: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The heaviest chain of points increasing strictly in both coordinates (anchors that never cross)."""
    pts = sorted(set(points), key=lambda p: (p[0], -p[1]))
    n = len(pts)
    best = [0] * n
    prev = [-1] * n
    for i, (c, k, w) in enumerate(pts):
        best[i] = w
        for j in range(i):
            cj, kj, _ = pts[j]
            if cj < c and kj < k and best[j] + w > best[i]:
                best[i] = best[j] + w
                prev[i] = j
    if not n:
        return []
    i = max(range(n), key=lambda x: (best[x], -x))
    chain: list[tuple[int, int]] = []
    while i != -1:
        chain.append((pts[i][0], pts[i][1]))
        i = prev[i]
    return chain[::-1]


def align_rows(n_left: int, n_right: int, pairs: Sequence[RolePair]) -> Alignment:
    """Rows for a CUDA file of n_left lines beside an NKI file of n_right lines."""
    points = [(c, k, w) for c, k, w in candidate_anchors(pairs) if 1 <= c <= n_left and 1 <= k <= n_right]
    anchors = monotone_chain(points)
    rows: list[PairRow] = []
    left, right = 1, 1
    for c, k in anchors:
        rows += [PairRow(a, b) for a, b in zip_longest(range(left, c), range(right, k))]
        rows.append(PairRow(c, k, anchor=True))
        left, right = c + 1, k + 1
    rows += [PairRow(a, b) for a, b in zip_longest(range(left, n_left + 1), range(right, n_right + 1))]
    return Alignment(rows, anchors)


def single_rows(n_lines: int) -> list[PairRow]:
    """Rows for one file shown alone (a task without CUDA source)."""
    return [PairRow(None, line) for line in range(1, n_lines + 1)]


def pairs_at(pairs: Sequence[RolePair], side: str, line: int) -> list[int]:
    """Indices of the pairs covering `line` of `side` ("cuda" or "nki"), most specific (smallest) first."""
    found = [i for i, p in enumerate(pairs) if p.covers(side, line)]
    return sorted(found, key=lambda i: (pairs[i].match == "unmatched", pairs[i].size))


def row_index(rows: Sequence[PairRow], side: str, line: int) -> int | None:
    """The row showing `line` of `side` (or the first row after it)."""
    attr = "left" if side == "cuda" else "right"
    numbers = [(getattr(r, attr), i) for i, r in enumerate(rows) if getattr(r, attr) is not None]
    pos = bisect_left(numbers, (line, -1))
    return numbers[pos][1] if pos < len(numbers) else None

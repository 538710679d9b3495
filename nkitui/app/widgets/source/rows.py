"""Rows of the side-by-side CUDA | NKI view, aligned by role where alignment data exists.

Pure data (no Textual): the widget only draws these rows. An alignment pair says "CUDA lines a..b
play the same role as NKI lines c..d". Pairs are laid out in order; a pair that would cross an
earlier one (its CUDA lines come before lines already shown) cannot be drawn side by side and is
left unaligned, but its role still labels its NKI lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Sequence


@dataclass(frozen=True, slots=True)
class RolePair:
    role: str  # e.g. "global memory -> HBM load"
    cuda: tuple[int, int]  # 1-based inclusive line range in the CUDA file
    nki: tuple[int, int]  # 1-based inclusive line range in the NKI file
    note: str = ""  # why they correspond, in words


@dataclass(frozen=True, slots=True)
class PairRow:
    left: int | None  # 1-based CUDA line shown on this row
    right: int | None  # 1-based NKI line
    pair: int | None = None  # index into the pairs list when the row belongs to an aligned pair
    header: bool = False  # a role header row (no code, the pair's role spans both sides)


def _zip_lines(left: range, right: range, pair: int | None) -> list[PairRow]:
    return [PairRow(a, b, pair) for a, b in zip_longest(left, right)]


def align_rows(n_left: int, n_right: int, pairs: Sequence[RolePair]) -> tuple[list[PairRow], list[int]]:
    """Rows for a CUDA file of n_left lines beside an NKI file of n_right lines.

    Returns (rows, drawn) where drawn lists the indices of pairs laid out side by side.
    """
    rows: list[PairRow] = []
    drawn: list[int] = []
    next_left, next_right = 1, 1
    order = sorted(range(len(pairs)), key=lambda i: (pairs[i].nki[0], pairs[i].cuda[0]))
    for index in order:
        p = pairs[index]
        (ls, le), (rs, re) = p.cuda, p.nki
        if not (1 <= ls <= le <= n_left and 1 <= rs <= re <= n_right):
            continue  # points outside the files shown: stale alignment data
        if ls < next_left or rs < next_right:
            continue  # would cross a pair already drawn
        rows += _zip_lines(range(next_left, ls), range(next_right, rs), None)
        rows.append(PairRow(None, None, index, header=True))
        rows += _zip_lines(range(ls, le + 1), range(rs, re + 1), index)
        drawn.append(index)
        next_left, next_right = le + 1, re + 1
    rows += _zip_lines(range(next_left, n_left + 1), range(next_right, n_right + 1), None)
    return rows, drawn


def single_rows(n_lines: int) -> list[PairRow]:
    """Rows for one file shown alone (a task without CUDA source)."""
    return [PairRow(None, line) for line in range(1, n_lines + 1)]


def roles_by_line(pairs: Sequence[RolePair]) -> tuple[dict[int, str], dict[int, str]]:
    """CUDA line -> role and NKI line -> role, for every pair (drawn or not)."""
    left: dict[int, str] = {}
    right: dict[int, str] = {}
    for p in pairs:
        for line in range(p.cuda[0], p.cuda[1] + 1):
            left.setdefault(line, p.role)
        for line in range(p.nki[0], p.nki[1] + 1):
            right.setdefault(line, p.role)
    return left, right

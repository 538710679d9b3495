"""Log lines in compact storage, with a level filter and search (no Textual here). Levels are the
session's (nkitui.session.runlog).

A million lines cost one Python string each plus one byte for the level. The filtered view is an
array of line indices, extended incrementally as lines arrive, so filtering never rescans the
whole log on append.
"""

from __future__ import annotations

from array import array
from typing import Iterable

from nkitui.session.runlog import LEVEL_INDEX, LEVELS, level_index

__all__ = ["LEVELS", "LEVEL_INDEX", "LogStore", "level_index", "smartcase"]


def smartcase(query: str) -> tuple[str, bool]:
    """(needle, fold): case-insensitive unless the query has a capital letter (less and vim's smartcase)."""
    fold = query == query.lower()
    return (query.lower() if fold else query), fold


class LogStore:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.levels = bytearray()
        self.min_level = 0
        self._view: array | None = None  # indices of lines passing the filter; None = every line
        self.longest = 0
        # view rows matching a query, scanned incrementally: (query, min_level, rows scanned, rows)
        self._matches: tuple[str, int, int, array] | None = None

    # --- writing -------------------------------------------------------------------------------

    def clear(self) -> None:
        self._matches = None
        self.texts = []
        self.levels = bytearray()
        self._view = None if self.min_level == 0 else array("I")
        self.longest = 0

    def extend(self, lines: Iterable[tuple[int, str]]) -> int:
        """Append (level index, text) pairs; returns how many of them pass the filter."""
        batch = lines if isinstance(lines, list) else list(lines)
        if not batch:
            return 0
        start = len(self.texts)
        new_levels, new_texts = zip(*batch)  # C loops: a 100k-line batch costs milliseconds
        texts = self.texts
        levels = self.levels
        texts.extend(new_texts)
        levels.extend(new_levels)
        self.longest = max(self.longest, max(map(len, new_texts)))
        if self._view is None:
            return len(texts) - start
        before = len(self._view)
        minimum = self.min_level
        self._view.extend(i for i in range(start, len(texts)) if levels[i] >= minimum)
        return len(self._view) - before

    # --- filtered view -------------------------------------------------------------------------

    def set_min_level(self, minimum: int) -> None:
        self.min_level = minimum
        if minimum == 0:
            self._view = None
        else:
            levels = self.levels
            self._view = array("I", (i for i in range(len(levels)) if levels[i] >= minimum))

    def __len__(self) -> int:
        return len(self.texts) if self._view is None else len(self._view)

    @property
    def total(self) -> int:
        return len(self.texts)

    def index(self, row: int) -> int:
        """Line index (in the whole log) of view row `row`."""
        return row if self._view is None else self._view[row]

    def row_of(self, index: int) -> int | None:
        """View row of line `index`, or None when the filter hides it."""
        if self._view is None:
            return index if 0 <= index < len(self.texts) else None
        from bisect import bisect_left

        pos = bisect_left(self._view, index)
        return pos if pos < len(self._view) and self._view[pos] == index else None

    def line(self, row: int) -> tuple[int, int, str]:
        """(line index, level, text) of view row `row`."""
        i = self.index(row)
        return i, self.levels[i], self.texts[i]

    def count_at_least(self, minimum: int) -> int:
        return sum(1 for level in self.levels if level >= minimum)

    # --- search --------------------------------------------------------------------------------

    def match_rows(self, query: str) -> array:
        """The view rows containing `query` (same case rule as find), in order.

        Kept between calls and extended over the rows added since, so a live log with an open
        search costs only its new lines."""
        cached = self._matches
        n = len(self)
        if cached is None or cached[0] != query or cached[1] != self.min_level or cached[2] > n:
            cached = (query, self.min_level, 0, array("I"))
        _, level, scanned, rows = cached
        if scanned < n and query:
            needle, fold = smartcase(query)
            texts, index = self.texts, self.index
            if fold:
                rows.extend(r for r in range(scanned, n) if needle in texts[index(r)].lower())
            else:
                rows.extend(r for r in range(scanned, n) if needle in texts[index(r)])
        self._matches = (query, level, n, rows)
        return rows

    def match_position(self, query: str, row: int) -> tuple[int | None, int]:
        """(1-based number of the match on `row`, or None when `row` holds none; how many matches)."""
        from bisect import bisect_left

        rows = self.match_rows(query)
        k = bisect_left(rows, row)
        return (k + 1 if k < len(rows) and rows[k] == row else None), len(rows)

    def find(self, query: str, start_row: int, step: int = 1) -> int | None:
        """Next view row after `start_row` (before, when step is -1) containing `query`, wrapping around.

        Case-insensitive unless the query has a capital letter (like less and vim's smartcase).
        """
        n = len(self)
        if not query or n == 0:
            return None
        rows = self.match_rows(query)
        if not rows:
            return None
        from bisect import bisect_left, bisect_right

        start = start_row % n
        if step > 0:
            return rows[bisect_right(rows, start) % len(rows)]
        return rows[bisect_left(rows, start) - 1]  # index -1 wraps to the last match

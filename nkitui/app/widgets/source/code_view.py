"""CUDA beside NKI, aligned by role, findings marked in the gutter (one virtualised widget, so both
sides always scroll together)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.content import Content
from textual.message import Message
from textual.strip import Strip
from textual.style import Style

from nkitui.app import keymap
from nkitui.app.evidence import Evidence, span_location
from nkitui.app.widgets.lineview import LineView
from nkitui.app.widgets.source.rows import (
    PairRow, RolePair, align_rows, pairs_at, row_index, single_rows, wrap_spans,
)
from nkitui.common.findings import SEVERITY_ORDER, Finding

# Glyphs differ by severity so colour is never the only signal (high-contrast, colour-blind users).
SEVERITY_GLYPH = {"high": "●", "medium": "◆", "low": "▲", "info": "·"}

# Panes: CUDA beside NKI ("both"), or one file across the whole width. "auto" shows both where each
# side gets at least SIDE_BY_SIDE_MIN columns of code, else the NKI port alone (at 80 columns each
# side of the aligned view would get about 35, too few to read a line of NKI).
PANES = ("nki", "cuda", "both")
SIDE_BY_SIDE_MIN = 48
PANE_TITLES = {"nki": "NKI", "cuda": "CUDA", "both": "CUDA ⇄ NKI"}
CONTINUATION = "↪"  # the gutter of a soft-wrapped line's continuation rows
CUT = "›"  # the last column of a line that goes on to the right (← → scroll sideways)


@dataclass
class SourceFile:
    path: str  # task-relative, as shown
    lines: list[Content]  # highlighted, one per line

    @property
    def width(self) -> int:
        return max((line.cell_length for line in self.lines), default=0)


@dataclass
class Marks:
    """Worst finding severity per line, and every finding per line, for one file."""

    worst: dict[int, str] = field(default_factory=dict)
    by_line: dict[int, list[Finding]] = field(default_factory=dict)

    @classmethod
    def of(cls, findings: list[Finding], path: str | None) -> "Marks":
        marks = cls()
        if path is None:
            return marks
        for f in findings:
            if f.file != path or f.line is None:
                continue
            for line in range(f.line, (f.end_line or f.line) + 1):
                marks.by_line.setdefault(line, []).append(f)
            current = marks.worst.get(f.line)
            if current is None or SEVERITY_ORDER[f.severity] < SEVERITY_ORDER[current]:
                marks.worst[f.line] = f.severity
        return marks


class CodePairView(LineView):
    """Rows of CUDA | NKI. Without CUDA source the NKI file fills the width."""

    HELP = """\
## Source: CUDA beside NKI

The CUDA kernel (left) and its NKI port (right), highlighted. The static analysis pairs CUDA constructs
with the NKI code that plays the same role (global memory and HBM tensors, thread indexing and tile
loops, bounds checks and masks, warp reductions and free-axis reductions ...). Paired lines are laid
out on the same row, marked ⇄ between the sides; the lines of the pair under the cursor are tinted on
both sides and the strip below names the role. Gutter marks show findings: ● high, ◆ medium, ▲ low,
· info.

**o** shows the NKI port alone, the CUDA source alone, or both side by side; where the area is too
narrow for both (80 columns), the NKI port is shown alone and the bar says so. Long lines are
soft-wrapped, their continuations marked ↪; **W** turns wrapping off: a line that goes on past the
edge then ends in ›, **←**/**→** scroll sideways and the view follows the cursor.

The line under the cursor is what **a** attaches as evidence: its finding if it has one, otherwise the
source line itself. **c** writes a review comment on that line. A syntax error's column is marked in
its line.

**V** starts a selection of lines at the cursor, on the side the cursor's line is on (NKI when the row
has an NKI line, else CUDA); moving the cursor extends it, and the selected lines are tinted and marked
┃. **c** then comments the whole range, **a** attaches it as evidence; **V** again or **Escape** drops
the selection.
"""

    BINDINGS = keymap.bindings("code")

    STYLES = {
        "": "$foreground on $surface",
        "gutter": "$nk-gutter",
        "cursor": "$foreground on $nk-cursor",
        "pair": "$foreground on $nk-align",
        "selection": "$foreground on $nk-selection",
        "selection-mark": "bold $text-secondary",
        "role": "bold $text-primary on $surface",
        "separator": "$nk-gutter on $surface",
        "sev-high": "bold $nk-sev-high",
        "sev-medium": "bold $nk-sev-medium",
        "sev-low": "$nk-sev-low",
        "sev-info": "$nk-sev-info",
    }

    DEFAULT_CSS = """
    CodePairView { background: $surface; }
    """

    class LayoutChanged(Message):
        """The pane shown, soft wrap or what fits changed (the area's bar says which view this is)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.left: SourceFile | None = None
        self.right: SourceFile | None = None
        self.pairs: list[RolePair] = []
        self.rows: list[PairRow] = []  # what is drawn: one per screen row (soft wrap adds continuations)
        self.logical_rows: list[PairRow] = []  # CUDA | NKI rows, aligned by role, before wrapping
        self.anchors: list[tuple[int, int]] = []
        self.pane_choice = "auto"  # "auto" or one of PANES (the auditor's choice, kept on resize)
        self.wrap = True  # soft wrap long lines (else ← → scroll sideways)
        self._laid_out_for: tuple = ()  # (pane, wrap, width) the rows were built for
        self._last_width = 0  # the view's width when last shown
        self._pane_origin: tuple[PairRow | None, int] | None = None  # (row before a pane switch, cursor after)
        self._segments: dict[tuple[str, int, int], list[Content]] = {}
        self._columns: dict[tuple[str, int], tuple[int, str]] = {}  # (side, line) -> (1-based column, severity)
        self.focus_pair: int | None = None
        self.findings: list[Finding] = []
        self.left_marks = Marks()
        self.right_marks = Marks()
        self.selection_side = "nki"  # which file a selection of rows covers: "nki" or "cuda"

    # --- data ----------------------------------------------------------------------------------

    def set_sources(self, left: SourceFile | None, right: SourceFile | None) -> None:
        self.left, self.right = left, right
        self._segments.clear()
        self._layout_rows()

    def set_alignment(self, pairs: list[RolePair]) -> None:
        self.pairs = list(pairs)
        self._layout_rows()

    def set_findings(self, findings: list[Finding]) -> None:
        self.findings = list(findings)
        self.left_marks = Marks.of(self.findings, self.left.path if self.left else None)
        self.right_marks = Marks.of(self.findings, self.right.path if self.right else None)
        # A finding at a column (a syntax error) marks that character too.
        self._columns = {}
        for f in self.findings:
            column = f.data.get("column") if isinstance(f.data, dict) else None
            side = "nki" if self.right and f.file == self.right.path else (
                "cuda" if self.left and f.file == self.left.path else None)
            if side and f.line and isinstance(column, int) and column > 0:
                self._columns[(side, f.line)] = (column, f.severity)
        self._segments.clear()
        self.data_changed()

    def _layout_rows(self) -> None:
        """Align the files anew (new sources or role pairs), then lay out the rows to draw."""
        current = self.row_at_cursor()
        if self.right is None:
            self.logical_rows, self.anchors = [], []
        elif self.left is None:
            self.logical_rows, self.anchors = single_rows(len(self.right.lines)), []
        else:
            alignment = align_rows(len(self.left.lines), len(self.right.lines), self.pairs)
            self.logical_rows, self.anchors = alignment.rows, alignment.anchors
        self.left_marks = Marks.of(self.findings, self.left.path if self.left else None)
        self.right_marks = Marks.of(self.findings, self.right.path if self.right else None)
        self._relayout(current, force=True)

    # --- panes and soft wrap -------------------------------------------------------------------

    @property
    def pane(self) -> str:
        """The pane shown now: "nki", "cuda" or "both" (the choice, or what fits when it is "auto")."""
        if self.left is None:
            return "nki"
        if self.pane_choice != "auto":
            return self.pane_choice
        return "both" if self.fits_side_by_side() else "nki"

    def fits_side_by_side(self, width: int | None = None) -> bool:
        """True when each side of CUDA | NKI gets at least SIDE_BY_SIDE_MIN columns of code."""
        width = self._view_width() if width is None else width
        if width <= 0:  # before the first layout: decide when the size is known
            return True
        return self._code_width(self.left, (width - 1) // 2) >= SIDE_BY_SIDE_MIN

    def _view_width(self) -> int:
        """The width the code is drawn at: while the area is hidden (another tab) its last width, so
        what fits does not flip while nobody looks."""
        width = self.scrollable_content_region.width if self.is_mounted else 0
        if width > 0:
            self._last_width = width
        return self._last_width

    @staticmethod
    def _digits(source: SourceFile | None) -> int:
        return len(str(max(1, len(source.lines)))) if source is not None else 1

    def _code_width(self, source: SourceFile | None, side_width: int) -> int:
        return max(0, side_width - self._digits(source) - 2)

    def _side_widths(self, width: int) -> tuple[int, int]:
        """(CUDA, NKI) widths of the sides for the pane shown."""
        pane = self.pane
        if pane == "nki":
            return 0, width
        if pane == "cuda":
            return width, 0
        left = (width - 1) // 2
        return left, width - 1 - left

    def set_pane(self, pane: str) -> None:
        """Show "nki", "cuda", "both" or "auto" (what fits the width)."""
        if pane not in (*PANES, "auto"):
            raise ValueError(f"unknown pane {pane!r}")
        if pane == self.pane_choice:
            return
        current = self.row_at_cursor()
        if self._pane_origin is not None and self._pane_origin[1] == self.cursor:
            # cycling through the panes without moving: come back to the line the cycle started on
            current = self._pane_origin[0]
        self.pane_choice = pane
        self._relayout(current)
        self._pane_origin = (current, self.cursor)

    def cycle_pane(self) -> str:
        """NKI alone, CUDA alone, then side by side (back to NKI). Returns the pane now shown."""
        if self.left is None:
            return "nki"
        order = ("nki", "cuda", "both")
        self.set_pane(order[(order.index(self.pane) + 1) % len(order)])
        return self.pane

    def set_wrap(self, wrap: bool) -> None:
        if wrap == self.wrap:
            return
        current = self.row_at_cursor()
        self.wrap = wrap
        self._relayout(current)

    def on_resize(self) -> None:
        # What fits (auto pane) and where lines wrap depend on the width.
        self._relayout(self.row_at_cursor())

    def _relayout(self, current: PairRow | None, force: bool = False) -> None:
        """Build the drawn rows for the pane, soft wrap and width; keep the cursor on its line."""
        width = self._view_width()
        key = (self.pane, self.wrap, width if self.wrap or self.pane_choice == "auto" else 0)
        if key == self._laid_out_for and not force:
            return
        self._laid_out_for = key
        self.clear_selection()  # the rows it covered are laid out anew
        pane = self.pane
        if pane == "nki":
            base = [PairRow(None, r.right, r.anchor) for r in self.logical_rows if r.right is not None]
        elif pane == "cuda":
            base = [PairRow(r.left, None, r.anchor) for r in self.logical_rows if r.left is not None]
        else:
            base = list(self.logical_rows)
        left_width, right_width = self._side_widths(width)
        if self.wrap and width > 0:
            rows: list[PairRow] = []
            for r in base:
                parts = max(self._part_count(self.left, "cuda", r.left, left_width),
                            self._part_count(self.right, "nki", r.right, right_width))
                rows.append(r)
                rows += [PairRow(r.left, r.right, r.anchor, k) for k in range(1, parts)]
            self.rows = rows
            content_width = 0  # nothing to scroll sideways
        else:
            self.rows = base
            longest = {"nki": self._longest(self.right), "cuda": self._longest(self.left)}
            content_width = (longest[pane] + self._digits(self.right if pane == "nki" else self.left) + 3
                             if pane != "both" else 2 * max(longest.values()) + 16)
        self.data_changed(content_width=content_width)
        if self.scroll_offset.x and content_width == 0:
            self.scroll_to(x=0, animate=False, immediate=True, force=True)
        self._restore_cursor(current)
        self._update_focus_pair()
        self.post_message(self.LayoutChanged())

    @staticmethod
    def _longest(source: SourceFile | None) -> int:
        return source.width if source is not None else 0

    def _restore_cursor(self, current: PairRow | None) -> None:
        """Put the cursor back on the line it was on (its NKI line first; across panes, the nearest
        line of the other file by the alignment)."""
        if current is None or not self.rows:
            return
        for side, line in (("nki", current.right), ("cuda", current.left)):
            if line is None:
                continue
            index = row_index(self.rows, side, line)
            if index is not None and self._row_side_line(self.rows[index], side) == line:
                self.move_cursor(index)
                return
        # the line is not shown (NKI line, CUDA pane): the nearest line of the shown file by the alignment
        side = "cuda" if self.pane == "cuda" else "nki"
        attr = "left" if side == "cuda" else "right"
        theirs = "right" if side == "cuda" else "left"
        anchor = getattr(current, theirs)
        best = None
        for r in self.logical_rows:
            if getattr(r, theirs) is not None and anchor is not None and getattr(r, theirs) > anchor:
                break
            if getattr(r, attr) is not None:
                best = getattr(r, attr)
        if best is not None:
            index = row_index(self.rows, side, best)
            if index is not None:
                self.move_cursor(index)

    @staticmethod
    def _row_side_line(row: PairRow, side: str) -> int | None:
        return row.right if side == "nki" else row.left

    def _part_count(self, source: SourceFile | None, side: str, line: int | None, side_width: int) -> int:
        if source is None or line is None or side_width <= 0:
            return 1
        return len(self.segments(source, side, line, self._code_width(source, side_width)))

    def segments(self, source: SourceFile, side: str, line: int, code_width: int) -> list[Content]:
        """Line `line` of `source` soft-wrapped to `code_width` columns: the first row, then each
        continuation behind a hanging indent (the line's own indent and four more)."""
        key = (side, line, code_width)
        found = self._segments.get(key)
        if found is not None:
            return found
        code = self._line(source, side, line)
        text = code.plain
        indent = min(len(text) - len(text.lstrip(" ")) + 4, code_width // 2)
        spans = wrap_spans(text, code_width, indent) if code_width > 0 else [(0, len(text))]
        parts = [code[a:b] if k == 0 else Content(" " * indent) + code[a:b] for k, (a, b) in enumerate(spans)]
        self._segments[key] = parts
        return parts

    def _line(self, source: SourceFile, side: str, line: int) -> Content:
        """Line `line` of `source`, with the character a finding points at (a syntax error's column)
        shown reversed."""
        code = source.lines[line - 1] if 0 < line <= len(source.lines) else Content("")
        marked = self._columns.get((side, line))
        if marked is not None:
            column, severity = marked
            start = min(column, max(1, len(code.plain))) - 1
            if len(code.plain) == 0:
                code = Content(" ")
            code = code.stylize(f"reverse $nk-sev-{severity}", start, start + 1)
        return code

    def cut_lines(self) -> bool:
        """True when lines go on past the right edge (no soft wrap): ← → scroll sideways."""
        if self.wrap:
            return False
        return self.virtual_size.width > self._view_width() or self.scroll_offset.x > 0

    def watch_scroll_x(self, old: float, new: float) -> None:
        super().watch_scroll_x(old, new)
        if (old == 0) != (new == 0):
            self.post_message(self.LayoutChanged())  # the bar's sideways hint changes

    def row_count(self) -> int:
        return len(self.rows)

    # --- queries -------------------------------------------------------------------------------

    def row_at_cursor(self) -> PairRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def findings_at_cursor(self) -> list[Finding]:
        row = self.row_at_cursor()
        if row is None:
            return []
        found: list[Finding] = []
        if row.right is not None:
            found += self.right_marks.by_line.get(row.right, [])
        if row.left is not None:
            found += self.left_marks.by_line.get(row.left, [])
        return sorted(found, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))

    def pairs_at_cursor(self) -> list[int]:
        """Alignment pairs covering the cursor's lines (NKI side first), most specific first."""
        row = self.row_at_cursor()
        if row is None:
            return []
        found: list[int] = []
        if row.right is not None:
            found += pairs_at(self.pairs, "nki", row.right)
        if row.left is not None:
            found += [i for i in pairs_at(self.pairs, "cuda", row.left) if i not in found]
        return found

    def _update_focus_pair(self) -> None:
        pairs = self.pairs_at_cursor()
        focus = pairs[0] if pairs else None
        if focus != self.focus_pair:
            self.focus_pair = focus
            self._generation += 1
            self._row_cache.clear()
            self.refresh()

    def watch_cursor(self, old: int, new: int) -> None:
        super().watch_cursor(old, new)
        self._update_focus_pair()
        self._scroll_to_cursor_line()

    def _scroll_to_cursor_line(self) -> None:
        """Without soft wrap, follow the cursor sideways: a line whose code is out of view (scrolled
        past, or starting beyond the right edge) scrolls so its first characters show."""
        row = self.row_at_cursor()
        if self.wrap or row is None:
            return
        side, line = ("cuda", row.left) if self.pane == "cuda" or row.right is None else ("nki", row.right)
        source = self.left if side == "cuda" else self.right
        if source is None or line is None or not 0 < line <= len(source.lines):
            return
        text = source.lines[line - 1].plain
        start = len(text) - len(text.lstrip())
        if not text.strip():
            return
        left_width, right_width = self._side_widths(self._view_width())
        code_width = self._code_width(source, left_width if side == "cuda" else right_width)
        x = self.scroll_offset.x
        if start < x or start >= x + max(1, code_width - 1):
            self.scroll_to(x=max(0, start - 4), animate=False, immediate=True, force=True)

    # --- selection of lines --------------------------------------------------------------------

    def start_selection(self) -> None:
        row = self.row_at_cursor()
        if row is None:
            return
        self.selection_side = "nki" if row.right is not None else "cuda"
        super().start_selection()

    def selected_lines(self) -> tuple[SourceFile, int, int] | None:
        """(file, first line, last line) of the selection, on the side it started on."""
        span = self.selection()
        source = self.right if self.selection_side == "nki" else self.left
        if span is None or source is None:
            return None
        attr = "right" if self.selection_side == "nki" else "left"
        lines = [n for r in self.rows[span[0]:span[1] + 1] if (n := getattr(r, attr)) is not None]
        return (source, min(lines), max(lines)) if lines else None

    def evidence_at_cursor(self) -> Evidence | None:
        chosen = self.selected_lines()
        if chosen is not None:
            source, start, end = chosen
            text = source.lines[start - 1].plain.strip() if start - 1 < len(source.lines) else ""
            count = end - start + 1
            return Evidence("source", f"{span_location(source.path, start, end)} ({count} line{'s' if count > 1 else ''})"
                            f" {text[:50]}", file=source.path, line=start, end_line=end)
        findings = self.findings_at_cursor()
        if findings:
            return finding_evidence(findings[0])
        row = self.row_at_cursor()
        if row is None:
            return None
        side, line = (self.right, row.right) if row.right is not None else (self.left, row.left)
        if side is None or line is None:
            return None
        text = side.lines[line - 1].plain.strip() if line - 1 < len(side.lines) else ""
        return Evidence("source", f"{side.path}:{line} {text[:60]}", file=side.path, line=line)

    def show_line(self, path: str, line: int, center: bool = True) -> bool:
        """Put the cursor on `line` of `path` (either side). Returns False if that file is not shown."""
        if self.right is not None and path == self.right.path:
            side = "nki"
        elif self.left is not None and path == self.left.path:
            side = "cuda"
        else:
            return False
        if self.pane not in (side, "both"):
            # the file is not in the pane shown: show it (beside the other where that fits)
            self.set_pane("both" if self.fits_side_by_side() else side)
        index = row_index(self.rows, side, line)
        if index is None:
            return False
        self.move_cursor(index, center=center)
        return True

    def action_comment_line(self) -> None:
        from nkitui.app.messages import CommentWanted

        chosen = self.selected_lines()
        if chosen is not None:
            source, start, end = chosen
            self.post_message(CommentWanted(source.path, start, end, view=self))
            return
        row = self.row_at_cursor()
        if row is None:
            return
        side, line = (self.right, row.right) if row.right is not None else (self.left, row.left)
        if side is not None and line is not None:
            self.post_message(CommentWanted(side.path, line))

    def action_next_finding(self) -> None:
        self._jump_finding(1)

    def action_prev_finding(self) -> None:
        self._jump_finding(-1)

    def _row_has_mark(self, row: PairRow) -> bool:
        return (row.right is not None and row.right in self.right_marks.worst) or (
            row.left is not None and row.left in self.left_marks.worst
        )

    def _jump_finding(self, step: int) -> None:
        index = self.cursor + step
        while 0 <= index < len(self.rows):
            if self._row_has_mark(self.rows[index]):
                self.move_cursor(index, center=True)
                return
            index += step
        self.notify("No more findings in this direction", timeout=2)

    # --- drawing -------------------------------------------------------------------------------

    def draw_row(self, row_index: int, width: int, scroll_x: int, selected: bool) -> Strip:
        row = self.rows[row_index]
        base = self.st()
        cursor = self.st("cursor")
        tint = self.st("pair")
        pair = self.pairs[self.focus_pair] if self.focus_pair is not None else None
        chosen = self.selection_side if self.in_selection(row_index) else None

        def background(side: str, line: int | None):
            if selected:
                return cursor
            if side == chosen and line is not None:
                return self.st("selection")
            if pair is not None and line is not None and pair.covers(side, line):
                return tint
            return base

        pane = self.pane
        if pane == "nki":
            return self._side(self.right, "nki", row.right, row.part, self.right_marks, width, scroll_x,
                              background("nki", row.right), chosen == "nki")
        if pane == "cuda":
            return self._side(self.left, "cuda", row.left, row.part, self.left_marks, width, scroll_x,
                              background("cuda", row.left), chosen == "cuda")
        left_width, right_width = self._side_widths(width)
        left = self._side(self.left, "cuda", row.left, row.part, self.left_marks, left_width, scroll_x,
                          background("cuda", row.left), chosen == "cuda")
        right = self._side(self.right, "nki", row.right, row.part, self.right_marks, right_width, scroll_x,
                           background("nki", row.right), chosen == "nki")
        anchored = row.anchor and row.part == 0
        glyph = "⇄" if anchored else "│"
        separator = self.strip_of([(glyph, self.st("role" if anchored else "separator"))],
                                  1, base)
        return Strip.join([left, separator, right])

    def _side(self, source: SourceFile | None, side: str, line: int | None, part: int, marks: Marks, width: int,
              scroll_x: int, background, in_selection: bool = False) -> Strip:
        if source is None or width <= 0:
            return Strip.blank(max(0, width), background.rich_style)
        digits = self._digits(source)
        gutter_style = self.st("gutter") + _bg(background)
        if line is None:
            return self.strip_of([(" " * (digits + 2), gutter_style)], width, background)
        edge = ("┃", self.st("selection-mark") + _bg(background)) if in_selection else (" ", gutter_style)
        code_width = max(0, width - digits - 2)
        if self.wrap:
            segments = self.segments(source, side, line, code_width)
            if part > 0:  # a continuation row of a wrapped line (or blank, beside a longer line)
                shown = segments[part] if part < len(segments) else Content("")
                mark = CONTINUATION.rjust(digits) if part < len(segments) else " " * digits
                return self.strip_of([(mark, gutter_style), (" ", gutter_style), edge, (shown, background)],
                                     width, background)
        severity = marks.worst.get(line)
        if severity is not None:
            glyph = SEVERITY_GLYPH.get(severity, "•")
            mark_style = self.st(f"sev-{severity}") + _bg(background)
        elif line in marks.by_line:
            glyph, mark_style = "▏", self.st("gutter") + _bg(background)
        else:
            glyph, mark_style = " ", gutter_style
        # Selected lines are marked ┃ as well as tinted: the tint alone is lost in some themes and terminals.
        parts: list[tuple[Content | str, Style]] = [(str(line).rjust(digits), gutter_style), (glyph, mark_style), edge]
        if self.wrap:
            parts.append((self.segments(source, side, line, code_width)[0], background))
        else:
            code = self._line(source, side, line)
            length = len(code.plain)
            if scroll_x + code_width < length and code_width > 1:
                # the line goes on to the right: say so in its last column (→ scrolls)
                parts += [(code[scroll_x: scroll_x + code_width - 1], background),
                          (CUT, self.st("separator") + _bg(background))]
            else:
                parts.append((code[scroll_x: scroll_x + code_width] if scroll_x < length else Content(""), background))
        return self.strip_of(parts, width, background)


def _bg(style):
    """Only the background of a visual style (to lay a foreground style over a tinted row)."""
    from textual.style import Style

    return Style(background=style.background)


def finding_evidence(f: Finding) -> Evidence:
    return Evidence(
        "finding", f"{f.rule} {f.title} ({f.location})", file=f.file, line=f.line, end_line=f.end_line,
        rule=f.rule, data={"severity": f.severity, "source": f.source},
    )

"""CUDA beside NKI, aligned by role, findings marked in the gutter (one virtualised widget, so both
sides always scroll together)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.content import Content
from textual.strip import Strip

from nkitui.app import keymap
from nkitui.app.evidence import Evidence, span_location
from nkitui.app.widgets.lineview import LineView
from nkitui.app.widgets.source.rows import PairRow, RolePair, align_rows, pairs_at, row_index, single_rows
from nkitui.common.findings import SEVERITY_ORDER, Finding

# Glyphs differ by severity so colour is never the only signal (high-contrast, colour-blind users).
SEVERITY_GLYPH = {"high": "●", "medium": "◆", "low": "▲", "info": "·"}


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

The line under the cursor is what **a** attaches as evidence: its finding if it has one, otherwise the
source line itself. **c** writes a review comment on that line.

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

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.left: SourceFile | None = None
        self.right: SourceFile | None = None
        self.pairs: list[RolePair] = []
        self.rows: list[PairRow] = []
        self.anchors: list[tuple[int, int]] = []
        self.focus_pair: int | None = None
        self.findings: list[Finding] = []
        self.left_marks = Marks()
        self.right_marks = Marks()
        self.selection_side = "nki"  # which file a selection of rows covers: "nki" or "cuda"

    # --- data ----------------------------------------------------------------------------------

    def set_sources(self, left: SourceFile | None, right: SourceFile | None) -> None:
        self.left, self.right = left, right
        self._layout_rows()

    def set_alignment(self, pairs: list[RolePair]) -> None:
        self.pairs = list(pairs)
        self._layout_rows()

    def set_findings(self, findings: list[Finding]) -> None:
        self.findings = list(findings)
        self.left_marks = Marks.of(self.findings, self.left.path if self.left else None)
        self.right_marks = Marks.of(self.findings, self.right.path if self.right else None)
        self.data_changed()

    def _layout_rows(self) -> None:
        self.clear_selection()  # the rows it covered are laid out anew
        current = self.rows[self.cursor] if self.rows and self.cursor < len(self.rows) else None
        if self.right is None:
            self.rows, self.anchors = [], []
        elif self.left is None:
            self.rows, self.anchors = single_rows(len(self.right.lines)), []
        else:
            alignment = align_rows(len(self.left.lines), len(self.right.lines), self.pairs)
            self.rows, self.anchors = alignment.rows, alignment.anchors
        self.left_marks = Marks.of(self.findings, self.left.path if self.left else None)
        self.right_marks = Marks.of(self.findings, self.right.path if self.right else None)
        width = (self.left.width if self.left else 0) + (self.right.width if self.right else 0) + 20
        self.data_changed(content_width=width)
        if current is not None and current.right is not None and self.right is not None:
            self.show_line(self.right.path, current.right, center=False)
        self._update_focus_pair()

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

        if self.left is None:
            return self._side(self.right, row.right, self.right_marks, width, scroll_x, background("nki", row.right),
                              chosen == "nki")
        left_width = (width - 1) // 2
        right_width = width - 1 - left_width
        left = self._side(self.left, row.left, self.left_marks, left_width, scroll_x, background("cuda", row.left),
                          chosen == "cuda")
        right = self._side(self.right, row.right, self.right_marks, right_width, scroll_x,
                           background("nki", row.right), chosen == "nki")
        glyph = "⇄" if row.anchor else "│"
        separator = self.strip_of([(glyph, self.st("role" if row.anchor else "separator"))],
                                  1, base)
        return Strip.join([left, separator, right])

    def _side(self, source: SourceFile | None, line: int | None, marks: Marks, width: int, scroll_x: int,
              background, in_selection: bool = False) -> Strip:
        if source is None or width <= 0:
            return Strip.blank(max(0, width), background.rich_style)
        digits = len(str(max(1, len(source.lines))))
        gutter_style = self.st("gutter") + _bg(background)
        if line is None:
            return self.strip_of([(" " * (digits + 2), gutter_style)], width, background)
        severity = marks.worst.get(line)
        if severity is not None:
            glyph = SEVERITY_GLYPH.get(severity, "•")
            mark_style = self.st(f"sev-{severity}") + _bg(background)
        elif line in marks.by_line:
            glyph, mark_style = "▏", self.st("gutter") + _bg(background)
        else:
            glyph, mark_style = " ", gutter_style
        code = source.lines[line - 1] if line - 1 < len(source.lines) else Content("")
        code_width = max(0, width - digits - 2)
        visible = code[scroll_x: scroll_x + code_width] if scroll_x < len(code.plain) else Content("")
        # Selected lines are marked ┃ as well as tinted: the tint alone is lost in some themes and terminals.
        edge = ("┃", self.st("selection-mark") + _bg(background)) if in_selection else (" ", gutter_style)
        return self.strip_of(
            [(str(line).rjust(digits), gutter_style), (glyph, mark_style), edge, (visible, background)],
            width, background,
        )


def _bg(style):
    """Only the background of a visual style (to lay a foreground style over a tinted row)."""
    from textual.style import Style

    return Style(background=style.background)


def finding_evidence(f: Finding) -> Evidence:
    return Evidence(
        "finding", f"{f.rule} {f.title} ({f.location})", file=f.file, line=f.line, end_line=f.end_line,
        rule=f.rule, data={"severity": f.severity, "source": f.source},
    )

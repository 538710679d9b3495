"""The task's git diff between two revisions, unified or split, highlighted (virtualised)."""

from __future__ import annotations

from textual.content import Content
from textual.strip import Strip
from textual.style import Style

from nkitui.app import keymap
from nkitui.app.evidence import Evidence, span_location
from nkitui.app.gitview import DiffLine, FileDiff, SplitRow, split_rows, unified_rows
from nkitui.app.widgets.lineview import LineView
from nkitui.app.widgets.source.highlight import highlight_lines, language_for

_SIGN = {"add": "+", "delete": "-", "context": " "}


class DiffView(LineView):
    HELP = """\
## Source: git diff

The task's own history: what changed between two revisions (pick them with **v**; "working tree" means
uncommitted changes). **s** switches between unified and split layouts, **n**/**p** jump between changes.
Added lines are marked **+** and tinted, deleted lines **-**, so the signs carry the meaning without colour.
**a** attaches the line under the cursor as evidence; **c** comments on it (lines that still exist only).

**V** starts a selection at the cursor; moving extends it (tinted, marked ┃). **c** comments on the
selected lines of the new revision, **a** attaches them as evidence; **V** again or **Escape** drops it.
A selection covers lines of one file.
"""

    BINDINGS = keymap.bindings("code")

    STYLES = {
        "": "$foreground on $surface",
        "gutter": "$nk-gutter",
        "cursor": "$foreground on $nk-cursor",
        "add": "$foreground on $nk-diff-add-bg",
        "delete": "$foreground on $nk-diff-del-bg",
        "add-sign": "bold $nk-diff-add",
        "delete-sign": "bold $nk-diff-del",
        "file": "bold $foreground on $panel",
        "hunk": "$text-secondary on $surface",
        "empty": "$foreground on $surface-darken-1",
        "selection": "$foreground on $nk-selection",
        "selection-mark": "bold $text-secondary",
    }

    DEFAULT_CSS = """
    DiffView { background: $surface; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.files: list[FileDiff] = []
        self.split = False
        self.revision_label = ""
        self._unified: list[DiffLine] = []
        self._split: list[SplitRow] = []
        self._highlight: dict[tuple[str, str], list[Content]] = {}
        self._digits = 4
        self._longest = 0

    @property
    def split_rows(self) -> list[SplitRow]:
        """The rows of the side-by-side view (CUDA-style left, NKI-style right), as drawn."""
        return self._split

    def set_diff(self, files: list[FileDiff], revision_label: str) -> None:
        self.files = files
        self.revision_label = revision_label
        self._unified = unified_rows(files)
        self._split = split_rows(files)
        self._highlight = {}
        for f in files:
            language = language_for(f.path)
            self._highlight[(f.path, "old")] = highlight_lines(f.old_text, language)
            self._highlight[(f.path, "new")] = highlight_lines(f.new_text, language)
        self._longest = max((len(line.text) for line in self._unified), default=0)
        numbers = [n for line in self._unified for n in (line.old, line.new) if n]
        self._digits = max(3, len(str(max(numbers, default=1))))
        self.clear_selection()
        self.set_reactive(DiffView.cursor, 0)
        self.scroll_to(0, 0, animate=False, immediate=True, force=True)
        self.data_changed(content_width=self._row_width())

    def _row_width(self) -> int:
        """How wide the rows are: one line beside its numbers, or (split) two sides of it, so → can
        scroll until the end of the longest line shows on each side."""
        if self.split:
            return 2 * (self._longest + self._digits + 4) + 1
        return self._longest + 2 * self._digits + 8

    def set_split(self, split: bool) -> None:
        current = self.line_at_cursor()
        self.clear_selection()  # rows differ between the layouts
        self.split = split
        self.data_changed(content_width=self._row_width())
        if current is not None:
            self._seek(current)

    def row_count(self) -> int:
        return len(self._split) if self.split else len(self._unified)

    # --- queries -------------------------------------------------------------------------------

    def line_at_cursor(self) -> DiffLine | None:
        if not 0 <= self.cursor < self.row_count():
            return None
        if self.split:
            row = self._split[self.cursor]
            return row.right or row.left
        return self._unified[self.cursor]

    def _seek(self, line: DiffLine) -> None:
        for index in range(self.row_count()):
            if self.split:
                row = self._split[index]
                if line in (row.left, row.right):
                    self.move_cursor(index, center=True)
                    return
            elif self._unified[index] == line:
                self.move_cursor(index, center=True)
                return

    # --- selection of lines --------------------------------------------------------------------

    def _lines_in(self, first: int, last: int) -> list[DiffLine]:
        if self.split:
            return [side for row in self._split[first:last + 1] for side in (row.right or row.left,) if side]
        return self._unified[first:last + 1]

    def selected_span(self) -> tuple[str, int, int] | str | None:
        """(file, first, last line in the new revision) of the selection; a str says why there is none;
        None when nothing is selected."""
        span = self.selection()
        if span is None:
            return None
        lines = [line for line in self._lines_in(*span) if line.kind in ("add", "context", "delete")]
        files = list(dict.fromkeys(line.path for line in lines))
        if len(files) > 1:
            return f"The selection spans {', '.join(files)}: a comment covers lines of one file."
        numbers = [line.new for line in lines if line.kind != "delete" and line.new is not None]
        if not numbers:
            return "The selected lines are not in the task any more (deleted): select lines that are."
        return files[0], min(numbers), max(numbers)

    def evidence_at_cursor(self) -> Evidence | None:
        chosen = self.selected_span()
        if isinstance(chosen, tuple):
            path, start, end = chosen
            first, last = self.selection()  # type: ignore[misc]  # a selected span implies a selection (never None here)
            text = "\n".join(f"{_SIGN[line.kind]}{line.text}" for line in self._lines_in(first, last)
                             if line.kind in _SIGN and line.path == path)
            count = end - start + 1
            return Evidence("diff", f"{span_location(path, start, end)} ({count} line{'s' if count > 1 else ''} "
                            f"in {self.revision_label})",
                            file=path, line=start, end_line=end, revision=self.revision_label, value=text,
                            data={"change": "range"})
        line = self.line_at_cursor()
        if line is None or line.kind not in ("add", "delete", "context"):
            return None
        number = line.new if line.new is not None else line.old
        sign = _SIGN[line.kind]
        return Evidence(
            "diff", f"{line.path}:{number} {sign}{line.text.strip()[:60]}", file=line.path, line=number,
            revision=self.revision_label, value=line.text, data={"change": line.kind},
        )

    def _row_kinds(self, index: int) -> set[str]:
        if self.split:
            row = self._split[index]
            return {side.kind for side in (row.left, row.right) if side is not None}
        return {self._unified[index].kind}

    def _jump(self, step: int) -> None:
        index = self.cursor + step
        while 0 <= index < self.row_count():
            kinds = self._row_kinds(index)
            previous = self._row_kinds(index - 1) if index > 0 else set()
            if kinds & {"add", "delete"} and not previous & {"add", "delete"}:
                self.move_cursor(index, center=True)
                return
            index += step
        self.notify("No more changes in this direction", timeout=2)

    def action_comment_line(self) -> None:
        from nkitui.app.messages import CommentWanted

        chosen = self.selected_span()
        if isinstance(chosen, str):
            self.notify(chosen, timeout=5)
            return
        if chosen is not None:
            self.post_message(CommentWanted(chosen[0], chosen[1], chosen[2], view=self))
            return
        line = self.line_at_cursor()
        if line is None or line.kind not in ("add", "context", "delete"):
            return
        if line.kind == "delete" or line.new is None:
            self.notify("A deleted line is not in the task any more: comment on a line that is.", timeout=4)
            return
        self.post_message(CommentWanted(line.path, line.new))

    def action_next_finding(self) -> None:
        self._jump(1)

    def action_prev_finding(self) -> None:
        self._jump(-1)

    # --- drawing -------------------------------------------------------------------------------

    def _code(self, line: DiffLine) -> Content:
        if line.kind == "delete" and line.old:
            lines = self._highlight.get((line.path, "old"), [])
            if line.old - 1 < len(lines):
                return lines[line.old - 1]
        elif line.new:
            lines = self._highlight.get((line.path, "new"), [])
            if line.new - 1 < len(lines):
                return lines[line.new - 1]
        return Content(line.text.expandtabs(4))

    def _line_style(self, kind: str, selected: bool, in_selection: bool = False) -> Style:
        if selected:
            return self.st("cursor")
        if in_selection:
            return self.st("selection")
        if kind == "add":
            return self.st("add")
        if kind == "delete":
            return self.st("delete")
        return self.st()

    def draw_row(self, row_index: int, width: int, scroll_x: int, selected: bool) -> Strip:
        chosen = self.in_selection(row_index)
        if self.split:
            return self._draw_split(self._split[row_index], width, scroll_x, selected, chosen)
        return self._draw_unified(self._unified[row_index], width, scroll_x, selected, chosen)

    def _banner(self, kind: str, text: str, width: int, selected: bool) -> Strip:
        style = self.st("cursor") if selected else self.st("file" if kind == "file" else "hunk")
        prefix = "▌ " if kind == "file" else "  "
        return self.strip_of([(prefix + text, style)], width, style)

    def _edge(self, chosen: bool, gutter: Style, style: Style) -> tuple[str, Style]:
        """The column before the sign: ┃ on selected lines (the tint alone is not enough), else blank."""
        return ("┃", self.st("selection-mark") + Style(background=style.background)) if chosen else (" ", gutter)

    def _draw_unified(self, line: DiffLine, width: int, scroll_x: int, selected: bool, chosen: bool = False) -> Strip:
        if line.kind in ("file", "hunk", "note"):
            return self._banner(line.kind, line.text, width, selected)
        style = self._line_style(line.kind, selected, chosen)
        gutter = self.st("gutter") + Style(background=style.background)
        d = self._digits
        old = str(line.old).rjust(d) if line.old else " " * d
        new = str(line.new).rjust(d) if line.new else " " * d
        sign_style = self._sign_style(line.kind, style)
        code = self._code(line)
        code_width = max(0, width - 2 * d - 4)
        visible = code[scroll_x: scroll_x + code_width]
        return self.strip_of(
            [(f"{old} {new}", gutter), self._edge(chosen, gutter, style), (_SIGN.get(line.kind, " "), sign_style),
             (" ", style), (visible, style)],
            width, style,
        )

    def _sign_style(self, kind: str, style: Style) -> Style:
        if kind in ("add", "delete"):
            return self.st(f"{kind}-sign") + Style(background=style.background)
        return style

    def _draw_split(self, row: SplitRow, width: int, scroll_x: int, selected: bool, chosen: bool = False) -> Strip:
        if row.kind in ("file", "hunk", "note"):
            text = row.left.text if row.left is not None else row.path
            if row.kind == "file":
                text = next((line.text for line in self._unified if line.kind == "file" and line.path == row.path),
                            row.path)
            return self._banner(row.kind, text, width, selected)
        half = (width - 1) // 2
        left = self._split_side(row.left, "old", half, scroll_x, selected)
        right = self._split_side(row.right, "new", width - 1 - half, scroll_x, selected, chosen)
        separator = self.strip_of([("│", self.st("gutter"))], 1, self.st())
        return Strip.join([left, separator, right])

    def _split_side(self, line: DiffLine | None, side: str, width: int, scroll_x: int, selected: bool,
                    chosen: bool = False) -> Strip:
        """One side of a split row; a selection covers the new side only (comments anchor there)."""
        if line is None:
            style = self.st("cursor" if selected else "selection" if chosen else "empty")
            return Strip.blank(width, style.rich_style)
        style = self._line_style(line.kind, selected, chosen)
        gutter = self.st("gutter") + Style(background=style.background)
        number = line.old if side == "old" else line.new
        d = self._digits
        code = self._code(line)
        visible = code[scroll_x: scroll_x + max(0, width - d - 3)]
        return self.strip_of(
            [((str(number).rjust(d) if number else " " * d), gutter), self._edge(chosen, gutter, style),
             (_SIGN.get(line.kind, " "), self._sign_style(line.kind, style)), (" ", style), (visible, style)],
            width, style,
        )

"""The Source area: CUDA beside NKI (aligned by role, findings in the gutter) or the task's git diff."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import ContentSwitcher, OptionList
from textual.widgets.option_list import Option

from nkitui.app import keymap
from nkitui.app.evidence import Evidence, span_location
from nkitui.app.gitview import FileDiff, Revision
from nkitui.app.messages import RevisionsWanted
from nkitui.app.widgets.source.code_view import (
    SEVERITY_GLYPH, SIDE_BY_SIDE_MIN, CodePairView, SourceFile, finding_evidence,
)
from nkitui.app.widgets.source.diff_view import DiffView
from nkitui.app.widgets.source.rows import RolePair
from nkitui.app.widgets.status import StatusLine
from nkitui.common.findings import Finding, sort_findings


class FindingsList(OptionList):
    """Every finding on the task (static analysis, numerics, performance), worst first."""

    HELP = """\
## Source: findings

Everything the analysis, the numerics checks and the cost model flagged, worst first. **Enter** shows
the finding's line in the code view; **a** attaches the highlighted finding to the current rubric
criterion as evidence.
"""

    BINDINGS = keymap.bindings("findings")

    class Open(Message):
        def __init__(self, finding: Finding) -> None:
            super().__init__()
            self.finding = finding

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.findings: list[Finding] = []

    def set_findings(self, findings: list[Finding]) -> None:
        self.findings = sort_findings(findings)
        highlighted = self.highlighted
        self.clear_options()
        self.add_options(Option(_finding_label(f)) for f in self.findings)
        if not self.findings:
            self.add_option(Option(Content.styled("No findings.", "$text-muted"), disabled=True))
        if self.findings:
            self.highlighted = min(highlighted or 0, len(self.findings) - 1)

    def current(self) -> Finding | None:
        if self.highlighted is None or not 0 <= self.highlighted < len(self.findings):
            return None
        return self.findings[self.highlighted]

    def evidence_at_cursor(self) -> Evidence | None:
        f = self.current()
        return finding_evidence(f) if f else None

    def action_open_finding(self) -> None:
        f = self.current()
        if f is not None:
            self.post_message(self.Open(f))

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_open_finding()


def _finding_label(f: Finding) -> Content:
    glyph = SEVERITY_GLYPH.get(f.severity, "•")
    return Content.assemble(
        (f"{glyph} {f.severity:<6} ", f"$nk-sev-{f.severity}" if f.severity in SEVERITY_GLYPH else ""),
        (f"{f.rule} ", "bold"),
        (f"{f.location}  ", "$text-muted"),
        f.title,
    )


class SourceArea(Vertical):
    ALLOW_MAXIMIZE = True  # z zooms the area to the whole screen

    """The code (NKI, CUDA, or CUDA | NKI aligned), or the diff between two revisions; findings strip
    and list below."""

    HELP = """\
## Source area

**o** shows the NKI port alone, the CUDA source alone, or both side by side, aligned by role. At
first the area shows both where each side gets 48 columns of code, else the NKI port alone (the bar
says so). Long lines are soft-wrapped (continuations marked ↪ in the gutter); **W** turns wrapping off,
and then a line that goes on past the edge ends in › and **←**/**→** scroll sideways.

**d** switches between the code and the task's git diff; **s** switches the diff
between unified and split; **v** picks the two revisions to compare; **f** shows or hides the findings
list (again: hide it); **n**/**p** jump to the next/previous finding (or change). The strip under the code explains the
finding and the alignment role at the cursor; **e** shows the finding's whole explanation.

**c** comments on the line under the cursor. For a range, **V** starts a selection, moving extends it,
**c** comments on the selected lines (**a** attaches them as evidence) and **Escape** drops it; the
strip says what is selected.
"""

    BINDINGS = keymap.bindings("source")

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "1 Source"
        self.mode = "aligned"  # or "diff"
        self.revisions: list[Revision] = []
        self.diff_pair: tuple[Revision, Revision] | None = None
        self.diff_files: list[FileDiff] = []
        self.diff_loaded = False
        self.analysis_state = "waiting for analysis"
        self.pairs: list[RolePair] = []
        self.findings: list[Finding] = []

    def compose(self) -> ComposeResult:
        yield StatusLine(id="source-bar", classes="bar")
        with ContentSwitcher(initial="code", id="source-switcher"):
            yield CodePairView(id="code")
            yield DiffView(id="diff")
        yield StatusLine(id="finding-strip", classes="strip")
        yield FindingsList(id="findings")

    def on_mount(self) -> None:
        self._update_bar()
        self._update_strip()

    # --- data from the app ---------------------------------------------------------------------

    @property
    def code(self) -> CodePairView:
        return self.query_one("#code", CodePairView)

    @property
    def diff(self) -> DiffView:
        return self.query_one("#diff", DiffView)

    def set_sources(self, left: SourceFile | None, right: SourceFile | None) -> None:
        self.code.set_sources(left, right)
        self._update_bar()

    def set_analysis(self, findings: list[Finding], pairs: list[RolePair], state: str) -> None:
        self.pairs = pairs
        self.analysis_state = state
        self.code.set_alignment(pairs)
        self.set_findings(findings)

    def set_findings(self, findings: list[Finding]) -> None:
        self.findings = findings
        self.code.set_findings(findings)
        self.query_one(FindingsList).set_findings(findings)
        self._update_bar()
        self._update_strip()

    def set_revisions(self, revisions: list[Revision], pair: tuple[Revision, Revision] | None) -> None:
        self.revisions = revisions
        self.diff_pair = pair
        self._update_bar()

    def set_diff(self, pair: tuple[Revision, Revision], files: list[FileDiff]) -> None:
        self.diff_pair = pair
        self.diff_files = files
        self.diff_loaded = True
        self.diff.set_diff(files, f"{pair[0].ref}..{pair[1].ref}")
        self.diff.empty_message = (f"No differences between {pair[0].short} and {pair[1].short} in the task folder. "
                                   f"Press {keymap.app_key(self, 'source.revisions')} to pick other revisions.")
        self._update_bar()
        self._update_strip()

    def show_line(self, path: str, line: int) -> bool:
        """Show `path:line` in the aligned view (switching to it). False when the file is not shown."""
        if self.mode != "aligned":
            self.action_toggle_mode()
        shown = self.code.show_line(path, line)
        if shown:
            self.code.focus()
        return shown

    def focus_primary(self) -> None:
        (self.diff if self.mode == "diff" else self.code).focus()

    # --- actions -------------------------------------------------------------------------------

    def action_cycle_pane(self) -> None:
        """NKI alone, CUDA alone, both side by side (from the diff: back to the code first)."""
        if self.mode != "aligned":
            self.action_toggle_mode()
            return
        if self.code.left is None:
            self.notify("This task has no CUDA source: the NKI port is the only file to show.", timeout=3)
            return
        self.code.cycle_pane()
        self.code.focus()
        self._update_bar()

    def action_toggle_wrap(self) -> None:
        if self.mode != "aligned":
            self.action_toggle_mode()
        self.code.set_wrap(not self.code.wrap)
        self._update_bar()

    def action_toggle_mode(self) -> None:
        self.mode = "diff" if self.mode == "aligned" else "aligned"
        switcher = self.query_one(ContentSwitcher)
        switcher.current = "diff" if self.mode == "diff" else "code"
        self.focus_primary()
        self._update_bar()
        self.call_after_refresh(self._update_bar)  # once laid out: what fits (pane, sideways hint)
        self._update_strip()

    def action_toggle_diff_layout(self) -> None:
        if self.mode != "diff":
            self.action_toggle_mode()
        self.diff.set_split(not self.diff.split)
        self._update_bar()
        self.call_after_refresh(self._update_bar)  # the sideways hint needs the diff's new width

    def action_pick_revisions(self) -> None:
        self.post_message(RevisionsWanted())

    def action_explain_finding(self) -> None:
        """The strip and the list cut a finding's explanation to one row: show it whole."""
        from nkitui.app.screens.finding import FindingScreen

        focused = self.screen.focused
        if isinstance(focused, FindingsList):
            found = [f] if (f := focused.current()) else []
        elif self.mode == "aligned":
            found = self.code.findings_at_cursor()
        else:
            found = []
        if not found:
            jump, listing = keymap.app_key(self, "code.next_finding"), keymap.app_key(self, "source.findings")
            self.notify(f"No finding on this line: {jump} jumps to the next one, {listing} lists them all.", timeout=3)
            return
        self.app.push_screen(FindingScreen(found))

    def action_toggle_findings(self) -> None:
        """Focus the findings list (showing it); from the list, hide it and go back to the code."""
        findings = self.query_one(FindingsList)
        if findings.has_focus:
            findings.display = False
            self.focus_primary()
        else:
            findings.display = True
            findings.focus()

    # --- status lines --------------------------------------------------------------------------

    @on(CodePairView.LayoutChanged)
    def _layout_changed(self) -> None:
        self._update_bar()
        self._update_strip()

    @on(CodePairView.CursorMoved)
    @on(DiffView.CursorMoved)
    @on(CodePairView.SelectionChanged)
    @on(DiffView.SelectionChanged)
    def _cursor_moved(self) -> None:
        self._update_strip()

    @on(FindingsList.Open)
    def _open_finding(self, event: FindingsList.Open) -> None:
        f = event.finding
        if f.file is None or f.line is None:
            # A run's finding (numerics, performance) has no line to show: its text is what there is to
            # read, too long for a toast that vanishes after a few seconds.
            from nkitui.app.screens.finding import FindingScreen

            self.app.push_screen(FindingScreen([f]))
            return
        if not self.show_line(f.file, f.line):
            self.notify(f"{f.location} is not one of the files shown side by side", title=f.rule, timeout=5)

    def _update_bar(self) -> None:
        if not self.is_mounted:
            return
        bar = self.query_one("#source-bar", StatusLine)
        counts = _severity_counts(self.findings)
        short_counts = _severity_counts(self.findings, short=True)
        dot = ("  ·  ", "$text-muted")
        if self.mode == "aligned":
            bar.update(*self._code_bar(counts, short_counts))
        else:
            if self.diff_pair is None:
                what = "no history (not a git repository?)" if not self.revisions else "pick revisions with v"
                bar.update(Content.assemble(("Diff ", "bold"), what))
                return
            old, new = self.diff_pair
            layout = "split" if self.diff.split else "unified"
            added = sum(f.added for f in self.diff_files)
            deleted = sum(f.deleted for f in self.diff_files)
            summary = (f"{len(self.diff_files)} file{'s' if len(self.diff_files) != 1 else ''} +{added} -{deleted}"
                       if self.diff_loaded else "loading")
            revisions = f"{old.short} → {new.short}"
            view_width = self.diff.scrollable_content_region.width
            wide = view_width > 0 and self.diff.virtual_size.width > view_width  # lines go on past the edge
            sideways = [(" · ", "$text-muted"), ("← → scroll sideways", "$text-warning")] if wide else []
            bar.update(Content.assemble(("Diff ", "bold"), revisions, dot, layout, dot, summary, *sideways),
                       Content.assemble(("Diff ", "bold"), revisions, (" · ", "$text-muted"), summary, *sideways),
                       Content.assemble(("Diff ", "bold"), revisions, (" · ", "$text-muted"), summary))

    def _code_bar(self, counts: Content, short_counts: Content) -> tuple[Content, ...]:
        """The bar over the code: which pane and files, the alignment, the findings, and the keys that
        change the view (longest first; the finding counts are the last thing to go)."""
        code = self.code
        left, right = code.left, code.right
        pane = code.pane
        dot = ("  ·  ", "$text-muted")
        small = (" · ", "$text-muted")
        key = keymap.app_key(self, "source.pane")
        if pane == "both" and left and right:
            title, files = "Aligned ", f"{left.path} ⇄ {right.path}"
            anchors = len(code.anchors)
            align = f"{len(self.pairs)} role pairs, {anchors} lines aligned" if self.pairs else self.analysis_state
            pairs = f"{len(self.pairs)} pairs" if self.pairs else ""
            switch = f"{key}: one file"
        else:
            shown = left if pane == "cuda" else right
            title = "CUDA " if pane == "cuda" else "NKI "
            files = shown.path if shown else "no NKI source"
            align = pairs = ""
            switch = (f"{key}: NKI" if pane == "cuda" else f"{key}: CUDA") if left else ""
        # Why one file (the auditor did not choose it): too narrow for both, and the way to both.
        narrow = bool(left) and code.pane_choice == "auto" and pane != "both"
        why = (f"too narrow for CUDA beside it ({2 * SIDE_BY_SIDE_MIN}+ columns of code); {key}: CUDA, both"
               if narrow else switch)
        short_why = f"narrow: NKI only; {key}: CUDA, both" if narrow else switch
        sideways = ("← → scroll sideways", "$text-warning") if code.cut_lines() else ("", "")
        head = Content.assemble((title, "bold"), files)
        extra = [dot, (why, "$text-muted")] if why else []
        short_extra = [dot, (short_why, "$text-muted")] if short_why else []
        side = [dot, sideways] if sideways[0] else []
        return (
            Content.assemble(head, *((dot, align) if align else ()), dot, counts, *extra, *side),
            Content.assemble(head, *((dot, pairs) if pairs else ()), dot, counts, *extra, *side),
            Content.assemble(head, dot, short_counts, *extra, *side),
            Content.assemble(head, dot, short_counts, *short_extra, *side),
            Content.assemble(head, small, short_counts, *((small, (short_why, "$text-muted")) if short_why else ()),
                             *((small, sideways) if sideways[0] else ())),
            Content.assemble(head, dot, short_counts, *side),
            Content.assemble(files, small, short_counts, *((small, sideways) if sideways[0] else ())),
            Content.assemble((title, "bold"), short_counts, *((small, sideways) if sideways[0] else ())),
            Content.assemble((title, "bold"), short_counts),
        )

    def _update_strip(self) -> None:
        if not self.is_mounted:
            return
        strip = self.query_one("#finding-strip", StatusLine)
        view = self.diff if self.mode == "diff" else self.code
        if view.selection_anchor is not None:
            strip.update(*_selection_strip(view))
            return
        if self.mode == "diff":
            if self.diff_loaded and not self.diff_files and self.diff_pair is not None:
                strip.update(f"No differences between these revisions; press "
                             f"{keymap.app_key(self, 'source.revisions')} to pick others.")
            else:
                ev = self.diff.evidence_at_cursor()
                if ev:
                    strip.update(ev.label)
                else:  # a file or hunk header: say how to get to the changes rather than nothing
                    nxt, prv, comment, attach = (keymap.app_key(self, i) for i in (
                        "code.next_finding", "code.prev_finding", "code.comment", "app.attach"))
                    strip.update(Content.styled(f"{nxt}/{prv} jump between changes; on a line, {comment} comments "
                                                f"and {attach} attaches it as evidence.", "$text-muted"),
                                 Content.styled(f"{nxt}/{prv} jump between changes.", "$text-muted"))
            return
        findings = self.code.findings_at_cursor()
        pairs = self.code.pairs_at_cursor()
        parts: list[Content | tuple[str, str] | str] = []
        if findings:
            f = findings[0]
            more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
            head = (f"{SEVERITY_GLYPH.get(f.severity, '•')} {f.rule} ", f"bold $nk-sev-{f.severity}")
            # An explanation cut mid-sentence helps nobody: when it does not fit, the strip shows the
            # title and names the key that shows it whole.
            key = keymap.app_key(self, "source.explain")
            strip.update(Content.assemble(head, f"{f.title}{more}: ", (f.message, "$text-muted")),
                         Content.assemble(head, f"{f.title}{more}", (f"  ·  {key} shows it in full", "$text-muted")),
                         Content.assemble(head, (f"({key}: in full) ", "$text-muted"), f"{f.title}{more}"))
            return
        if pairs:
            p = self.pairs[pairs[0]]
            others = f" (+{len(pairs) - 1} more roles)" if len(pairs) > 1 else ""
            cuda = p.cuda_label or "—"
            nki = p.nki_label or "—"
            parts += [(f"⇄ {p.title}: ", "bold $text-primary"), f"{cuda} ⇄ {nki}{others}  ", (p.note, "$text-muted")]
        else:
            parts.append(("No finding or role pairing on this line.", "$text-muted"))
        strip.update(Content.assemble(*parts))

    def evidence_at_cursor(self) -> Evidence | None:
        focused = self.screen.focused if self.is_attached else None
        if isinstance(focused, FindingsList):
            return focused.evidence_at_cursor()
        return (self.diff if self.mode == "diff" else self.code).evidence_at_cursor()


def _selection_strip(view: CodePairView | DiffView) -> tuple[Content, ...]:
    """What the strip says while lines are selected (longest first, the line picks what fits)."""
    mark = ("┃ ", "bold $text-secondary")
    if isinstance(view, DiffView):
        span = view.selected_span()
        if isinstance(span, str):
            return (Content.assemble(mark, (span, "$text-warning")),)
        path, start, end = span  # type: ignore[misc]  # a span that is not a str is the (path, start, end) tuple
    else:
        chosen = view.selected_lines()
        if chosen is None:
            return (Content.assemble(mark, "No lines selected"),)
        path, start, end = chosen[0].path, chosen[1], chosen[2]
    count = end - start + 1
    where = (span_location(path, start, end), "bold")
    lines = f" ({count} line{'s' if count != 1 else ''})"
    overrides = getattr(view.app, "keymap_overrides", None)
    comment, attach, select, cancel = (keymap.key_label(i, overrides) for i in
                                       ("code.comment", "app.attach", "code.select", "code.cancel_selection"))
    return (
        Content.assemble(mark, "Selected ", where, lines, (f"  ·  {comment} comments  ·  {attach} attaches  ·  "
                                                           f"{select} or {cancel} ends", "$text-muted")),
        Content.assemble(mark, "Selected ", where, lines, (f"  ·  {comment} comment  ·  {cancel} ends", "$text-muted")),
        Content.assemble(mark, where, lines, (f" {comment} comment", "$text-muted")),
        Content.assemble(mark, where),
    )


def _severity_counts(findings: list[Finding], short: bool = False) -> Content:
    """●2 high ◆1 medium (short: ●2 ◆1; the glyphs differ, so the words can go)."""
    if not findings:
        return Content("no findings")
    parts: list[tuple[str, str] | str] = []
    for severity in ("high", "medium", "low", "info"):
        n = sum(1 for f in findings if f.severity == severity)
        if n:
            if parts:
                parts.append(" ")
            label = f"{SEVERITY_GLYPH[severity]}{n}" + ("" if short else f" {severity}")
            parts.append((label, f"$nk-sev-{severity}"))
    return Content.assemble(*parts)

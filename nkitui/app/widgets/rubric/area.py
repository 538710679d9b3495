"""The Rubric area: criteria with guidance, a score selector, the comment editor and linked evidence."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, Static, TextArea

from nkitui.app import keymap
from nkitui.app.widgets.status import StatusLine
from nkitui.app.widgets.rubric.widgets import (
    VERDICT_PAGE, CommentEditor, CriteriaList, EvidenceList, LevelNote, ScoreSelector,
)


class RubricArea(Vertical):
    ALLOW_MAXIMIZE = True  # z zooms the area to the whole screen

    HELP = """\
## Rubric area

Score the port against the task's rubric. Pick a criterion on the left, read its guidance, choose a
score, justify it, and attach evidence: in any area press **a** on a finding, a source or diff line, a
log line or a metric to link it to the criterion shown here. The last page holds the verdict and the
summary and lists what still blocks submitting. **ctrl+s** or **F8** validates and commits the review
to the task's git repository; the draft is autosaved all along.

The rubric's verdict rules are checked as you go (an `accept` with numerical correctness 1 is not ready
to submit). Where the verdict breaks a rule the rubric lets you override, **O** on the verdict page asks
why; the override and its reason go into the review record.
"""

    BINDINGS = keymap.bindings("rubric")

    class DraftEdited(Message):
        """The draft changed (score, comment, verdict, evidence); the app autosaves it."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "4 Rubric"
        self.rubric: Any = None
        self.draft: Any = None
        self.problems: list = []
        self.last_commit: str = ""
        self._loading = False
        self._page: str | None = None  # the criterion id the page shows
        self.history: list = []  # earlier reviews (nkitui.review HistoryEntry), newest first

    def compose(self) -> ComposeResult:
        with Horizontal(id="rubric-main"):
            yield CriteriaList(id="criteria")
            with Vertical(id="criterion-pane"):
                yield StatusLine(id="criterion-title", classes="bar")
                yield ScoreSelector(id="score")
                yield LevelNote(id="level-text")
                yield CommentEditor(id="comment")
                yield Static("Evidence", classes="section", id="evidence-title")
                yield EvidenceList(id="evidence")
                with VerticalScroll(id="guidance-scroll"):
                    yield Static(id="guidance")
        yield StatusLine(id="rubric-status", classes="strip")

    def on_mount(self) -> None:
        self.query_one("#criterion-title", StatusLine).update(Content.styled("Loading the rubric…", "$text-muted"))
        self.query_one("#rubric-status", StatusLine).update("")

    def focus_primary(self) -> None:
        self.query_one(CriteriaList).focus()

    def action_external_editor(self) -> None:
        # ctrl+o/F7 from the criteria list or the score, not only from inside the comment editor.
        self.app.action_edit_in_editor()  # type: ignore[attr-defined]  # self.app is NkituiApp, typed as App here

    # --- data ----------------------------------------------------------------------------------

    def set_review(self, rubric: Any, draft: Any) -> None:
        self.rubric, self.draft = rubric, draft
        self.query_one(CriteriaList).show(rubric, draft)
        self._show_page(force=True)

    def set_history(self, entries: list) -> None:
        self.history = list(entries)
        if self.current_id == VERDICT_PAGE and self.rubric is not None:
            self.query_one("#guidance", Static).update(self._markdown(self.verdict_markdown()))

    def set_problems(self, problems: list) -> None:
        self.problems = problems
        self._update_status()
        if self.current_id == VERDICT_PAGE and self.rubric is not None:
            self.query_one("#guidance", Static).update(self._markdown(self.verdict_markdown()))
            self._update_level_text()  # an override may have lifted the rule the note names

    def set_last_commit(self, text: str) -> None:
        self.last_commit = text
        self._update_status()

    @property
    def current_id(self) -> str | None:
        return self.query_one(CriteriaList).current_id

    @property
    def current_criterion(self) -> Any:
        cid = self.current_id
        if self.rubric is None or cid in (None, VERDICT_PAGE):
            return None
        return self.rubric.criterion(cid)

    def show_verdict_page(self) -> None:
        criteria = self.query_one(CriteriaList)
        if criteria.ids:
            criteria.highlighted = len(criteria.ids) - 1
        self._show_page()

    def refresh_lists(self) -> None:
        if self.rubric is not None:
            self.query_one(CriteriaList).update_labels(self.rubric, self.draft)
            self._show_evidence()
            self._update_status()

    # --- page ----------------------------------------------------------------------------------

    @on(OptionList.OptionHighlighted, "#criteria")
    def _criterion_changed(self) -> None:
        self._show_page()

    def _markdown(self, text: str):
        from rich.markdown import Markdown  # markdown-it is slow to import: not at start-up

        return Markdown(text)

    def _show_page(self, force: bool = False) -> None:
        if self.rubric is None or (not force and self.current_id == self._page):
            return
        self._page = self.current_id
        self._loading = True
        try:
            title = self.query_one("#criterion-title", StatusLine)
            selector = self.query_one(ScoreSelector)
            comment = self.query_one(CommentEditor)
            guidance = self.query_one("#guidance", Static)
            crit = self.current_criterion
            if crit is None:  # the verdict page
                title.update(Content.assemble(("Verdict & summary ", "bold"),
                                              (f"{self.rubric.title} v{self.rubric.version}", "$text-muted")))
                selector.set_values(list(self.rubric.verdicts), self.draft.verdict, noun="verdict")
                comment.load_text(self.draft.summary)
                guidance.update(self._markdown(self.verdict_markdown()))
            else:
                entry = self.draft.scores.get(crit.id)
                need = "required" if crit.required else "optional"
                title.update(
                    Content.assemble((crit.title, "bold"), (f"  weight {crit.weight:g} · {need} · "
                                                            f"scale {crit.scale.describe()}", "$text-muted")),
                    Content.assemble((crit.title, "bold"), (f"  weight {crit.weight:g} · {need}", "$text-muted")),
                    Content.assemble((crit.title, "bold"), (f"  {need}", "$text-muted")),
                    Content.styled(crit.title, "bold"),
                )
                selector.set_values(list(crit.scale.values()), entry.value if entry else None)
                comment.load_text(entry.comment if entry else "")
                guidance.update(self._markdown(f"### Guidance\n\n{crit.guidance.strip()}\n\n{self._levels_markdown(crit)}"))
            self._update_level_text()
            self._show_evidence()
            self._update_status()
        finally:
            self._loading = False

    def _levels_markdown(self, crit: Any) -> str:
        if not crit.levels:
            return ""
        lines = ["### What each score means", ""]
        for value in crit.scale.values():
            text = crit.level_text(value)
            if text:
                lines.append(f"- **{value}**: {text}")
        return "\n".join(lines)

    def broken_rules(self) -> list:
        """The verdict rules (nkitui.review.RuleViolation) the draft's verdict breaks, blockers first."""
        if self.rubric is None or self.draft is None:
            return []
        broken = self.rubric.check_verdict(self.draft.verdict, self.draft.score_values)
        return sorted(broken, key=lambda v: v.rule.severity != "blocker")

    def action_override_rule(self) -> None:
        """Override (or withdraw the override of) the first rule the verdict breaks that allows it."""
        from nkitui.app.screens.override import OverrideScreen
        from nkitui.review.rubric import MIN_OVERRIDE_REASON

        if self.rubric is None or self.draft is None:
            return
        candidates = [v for v in self.broken_rules() if v.rule.severity == "blocker" and v.rule.overridable]
        # first a rule not overridden yet; else the first one (to change or withdraw its reason)
        pending = [v for v in candidates if self.draft.override_for(v.rule.id) is None]
        chosen = (pending or candidates or [None])[0]
        if chosen is None:
            withdrawn = [o.rule for o in self.draft.overrides]
            self.draft.overrides = []
            if withdrawn:
                self.notify(f"Withdrew the override of {', '.join(withdrawn)}: the verdict breaks no rule now.",
                            timeout=4)
                self.post_message(self.DraftEdited())
            else:
                self.notify("The verdict breaks no rule that needs an override.", timeout=3)
            return
        rule = chosen.rule
        current = self.draft.override_for(rule.id)
        what = f"Verdict {self.draft.verdict!r}: {chosen.describe()}"

        def done(reason: str | None) -> None:
            if reason is None or self.draft is None:
                return
            if reason and len(reason) < MIN_OVERRIDE_REASON:
                self.notify(f"An override needs a reason of at least {MIN_OVERRIDE_REASON} characters.",
                            severity="warning", timeout=5)
                return
            self.draft.set_override(rule.id, reason)
            self.post_message(self.DraftEdited())

        self.app.push_screen(OverrideScreen(rule.id, what, current.reason if current else "", MIN_OVERRIDE_REASON),
                             done)

    def verdict_markdown(self) -> str:
        lines = ["### Before submitting", ""]
        errors = [p for p in self.problems if p.severity == "error"]
        warnings = [p for p in self.problems if p.severity != "error"]
        if not errors:
            lines.append("Nothing blocks submitting. **ctrl+s** or **F8** commits the review.")
        override_key = keymap.app_key(self, "rubric.override")
        for p in errors:
            if "[rule " in p.message and "override the rule" in p.fix:  # in the app: the key, not the TOML
                lines.append(f"- ✘ **{p.field}**: {p.message} — change the scores or the verdict, or press "
                             f"**{override_key}** to override the rule with a reason")
            else:
                lines.append(f"- ✘ **{p.field or 'draft'}**: {p.message} — {p.fix}")
        for p in warnings:
            lines.append(f"- ⚠ **{p.field or 'draft'}**: {p.message} — {p.fix}")
        if self.rubric.verdict_rules:
            lines += ["", "### Verdict rules", ""]
            for rule in self.rubric.verdict_rules:
                kind = "warning" if rule.severity == "warning" else "blocker"
                needs = " and ".join(f"`{r.text}`" for r in rule.requires)
                override = self.draft.override_for(rule.id) if self.draft is not None else None
                note = f" — overridden: {override.reason}" if override else ""
                lines.append(f"- **{' / '.join(rule.verdicts)}** needs {needs} ({kind}): {rule.message}{note}")
        if self.history:
            lines += ["", "### Earlier reviews of this task", ""]
            for entry in self.history[:10]:
                r = entry.record
                when = r.submitted_at.strftime("%Y-%m-%d %H:%M")
                if entry.hidden:
                    lines.append(f"- {when} **{r.auditor}**: hidden until you submit your own review (blind mode)")
                    continue
                score = f", weighted {entry.weighted_score * 100:.0f}%" if entry.weighted_score is not None else ""
                stale = (" — **outdated**: " + ", ".join(str(c) for c in entry.changes)) if entry.outdated else ""
                lines.append(f"- {when} **{r.auditor}**: {r.verdict}{score} (`{entry.relpath}`){stale}")
        if self.rubric.verdict_guidance:
            lines += ["", "### Verdicts", ""]
            lines += [f"- **{v}**: {self.rubric.verdict_guidance.get(v, '')}" for v in self.rubric.verdicts]
        return "\n".join(lines)

    def _update_level_text(self) -> None:
        crit = self.current_criterion
        value = self.query_one(ScoreSelector).value
        if crit is None:
            text = self.rubric.verdict_guidance.get(value, "") if value else "Choose a verdict."
            blockers = [v for v in self.broken_rules() if v.rule.severity == "blocker"
                        and self.draft.override_for(v.rule.id) is None]
            if blockers:
                first = blockers[0]
                how = (f" — {keymap.app_key(self, 'rubric.override')} overrides it with a reason"
                       if first.rule.overridable else " — change the scores or the verdict")
                text = f"✘ {'; '.join(first.failures)} [{first.rule.id}]{how}"
        else:
            text = crit.level_text(value) if value is not None else "Not scored yet."
        note = self.query_one(LevelNote)
        note.max_lines = 3 if text and text.startswith("✘") else LevelNote.MAX_LINES  # a broken rule whole
        note.text = text or ""

    def action_show_levels(self) -> None:
        """Every value's meaning in full (the note under the score keeps to two rows)."""
        from nkitui.app.screens.levels import LevelsScreen

        if self.rubric is None:
            return
        crit = self.current_criterion
        current = self.query_one(ScoreSelector).value
        if crit is None:
            meanings = [(v, self.rubric.verdict_guidance.get(v, "")) for v in self.rubric.verdicts]
            self.app.push_screen(LevelsScreen(f"{self.rubric.title}: verdicts", meanings, current, "verdict"))
            return
        meanings = [(v, crit.level_text(v)) for v in crit.scale.values()]
        self.app.push_screen(LevelsScreen(f"{crit.title} ({crit.scale.describe()})", meanings, current))

    def _show_evidence(self) -> None:
        if self.draft is None:
            return
        cid = self.current_id
        evidence = self.draft.evidence
        comments = self.draft.comments
        if cid == VERDICT_PAGE:
            indices = list(range(len(evidence)))
            comment_indices = list(range(len(comments)))
        else:
            indices = [i for i, e in enumerate(evidence) if e.criterion == cid]
            comment_indices = [i for i, c in enumerate(comments) if c.criterion == cid]
        self.query_one(EvidenceList).show(evidence, indices, comments, comment_indices)

    def _update_status(self) -> None:
        if self.rubric is None or self.draft is None:
            return
        scored = sum(1 for c in self.rubric.criteria if (e := self.draft.scores.get(c.id)) and e.value is not None)
        total = len(self.rubric.criteria)
        errors = sum(1 for p in self.problems if p.severity == "error")
        weighted = self.rubric.weighted_score(self.draft.score_values)
        sep = ("  ·  ", "$text-muted")
        parts: list = [(f"{scored}/{total} scored", "bold"), sep, f"verdict {self.draft.verdict or '-'}"]
        if self.last_commit:
            parts += [sep, (self.last_commit, "bold $text-success")]
        parts += [sep, (f"{errors} to fix before submit", "$text-warning") if errors
                  else ("ready to submit", "$text-success")]
        comments = len(self.draft.comments)
        essential = list(parts)  # at 80 columns the counts below give way before the blockers do
        parts += [sep, f"{len(self.draft.evidence)} evidence, {comments} comment{'s' if comments != 1 else ''}"]
        if weighted is not None:
            parts += [sep, f"weighted {weighted * 100:.0f}%"]
        self.query_one("#rubric-status", StatusLine).update(Content.assemble(*parts), Content.assemble(*essential))

    # --- edits ---------------------------------------------------------------------------------

    @on(ScoreSelector.Changed)
    def _score_changed(self, event: ScoreSelector.Changed) -> None:
        if self.draft is None:
            return
        crit = self.current_criterion
        if crit is None:
            self.draft.verdict = event.value
        else:
            self.draft.set_score(crit.id, event.value)
        self._update_level_text()
        self.query_one(CriteriaList).update_labels(self.rubric, self.draft)
        self.post_message(self.DraftEdited())

    @on(TextArea.Changed, "#comment")
    def _comment_changed(self, event: TextArea.Changed) -> None:
        if self._loading or self.draft is None:
            return
        text = event.text_area.text
        crit = self.current_criterion
        if crit is None:
            if self.draft.summary == text:
                return
            self.draft.summary = text
        else:
            entry = self.draft.scores.get(crit.id)
            if entry is not None and entry.comment == text:
                return
            self.draft.set_comment(crit.id, text)
        self.post_message(self.DraftEdited())

    def set_comment_text(self, text: str) -> None:
        """Replace the current page's comment (after editing in $EDITOR)."""
        self.query_one(CommentEditor).load_text(text)
        crit = self.current_criterion
        if crit is None:
            self.draft.summary = text
        else:
            self.draft.set_comment(crit.id, text)
        self.post_message(self.DraftEdited())

    def current_comment(self) -> str:
        return self.query_one(CommentEditor).text

    @on(EvidenceList.Remove)
    def _remove_evidence(self, event: EvidenceList.Remove) -> None:
        if self.draft is None:
            return
        items = self.draft.evidence if event.kind == "evidence" else self.draft.comments
        if not 0 <= event.index < len(items):
            return
        removed = items.pop(event.index)
        self._show_evidence()
        self._update_status()
        what = f"{removed.kind} evidence {removed.ref}" if event.kind == "evidence" else f"comment on {removed.location}"
        self.notify(f"Removed {what}", timeout=3)
        self.post_message(self.DraftEdited())

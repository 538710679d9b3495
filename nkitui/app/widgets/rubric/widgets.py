"""Pieces of the rubric editor: criteria list, score selector, comment editor, evidence list."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from nkitui.app import keymap

VERDICT_PAGE = "__verdict__"


class CriteriaList(OptionList):
    """The rubric's criteria with their scores, then the verdict page."""

    HELP = """\
## Rubric: criteria

Each criterion of the task's rubric with its score so far (✔ scored, ○ not yet, * required). The last
entry holds the verdict and the summary, and lists what still blocks submitting.
"""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ids: list[str] = []
        self._shown: tuple[Any, Any] | None = None  # (rubric, draft), to fit the labels again on resize

    def on_resize(self) -> None:
        if self._shown is not None:
            self.update_labels(*self._shown)

    def show(self, rubric: Any, draft: Any) -> None:
        """(Re)build the list; keeps the highlighted row."""
        self._shown = (rubric, draft)
        highlighted = self.highlighted
        self.clear_options()
        self.ids = [c.id for c in rubric.criteria] + [VERDICT_PAGE]
        self.add_options(Option(label) for label in self._labels(rubric, draft, self._label_width()))
        self.highlighted = 0 if highlighted is None else min(highlighted, len(self.ids) - 1)

    def update_labels(self, rubric: Any, draft: Any) -> None:
        """Refresh the scores shown without rebuilding the list (no highlight events)."""
        self._shown = (rubric, draft)
        for index, label in enumerate(self._labels(rubric, draft, self._label_width())):
            self.replace_option_prompt_at_index(index, label)

    def _label_width(self) -> int:
        """Cells a label may take (the list is a fixed-width column; before layout, its CSS width)."""
        width = self.scrollable_content_region.width
        return width if width > 8 else 25  # before layout: 28 columns less the border and padding

    @staticmethod
    def _labels(rubric: Any, draft: Any, width: int = 26) -> list[Content]:
        """One line per criterion: mark, title, required star, score. A long title is cut (with …),
        never the score: the score is what the list is for."""

        def line(mark: tuple[str, str], title: tuple[str, str], star: str, score: str) -> Content:
            tail = Content.assemble((star, "$text-warning"), (f"  {score}", "$text-primary"))
            head = Content.assemble(mark, title)
            room = max(4, width - tail.cell_length)
            if head.cell_length > room:
                head = head.truncate(room, ellipsis=True)
            return Content.assemble(head, tail)

        labels = []
        for c in rubric.criteria:
            entry = draft.scores.get(c.id)
            value = entry.value if entry is not None else None
            mark = ("✔ " if value is not None else "○ ", "$text-success" if value is not None else "$text-muted")
            title = (c.title, "bold" if value is None and c.required else "")
            labels.append(line(mark, title, "*" if c.required else " ", "-" if value is None else str(value)))
        labels.append(line(("▶ ", "$text-accent"), ("Verdict & summary", "bold"), "", draft.verdict or "-"))
        return labels

    @property
    def current_id(self) -> str | None:
        if self.highlighted is None or not 0 <= self.highlighted < len(self.ids):
            return None
        return self.ids[self.highlighted]


class ScoreSelector(Widget, can_focus=True):
    """A row of the allowed values; ←/→ (or +/-) pick one, a digit picks it directly, Backspace clears."""

    HELP = """\
## Rubric: score

The values this criterion's scale allows, worst first. **Tab** from the criteria list reaches this row;
**←**/**→** (or **-**/**+**) change the score and a **digit** scores directly: `3` on a 1..5 scale is 3,
on a scale of labels (or the verdicts) `1` is the first value, `2` the second... While the score has the
focus, digits score: they do not switch areas (`[`/`]` still do). **Backspace** clears the score. The
line below says what the chosen value means in this rubric; **e** shows every level's meaning in full.
"""

    BINDINGS = keymap.bindings("score")

    DEFAULT_CSS = """
    ScoreSelector { height: 1; }
    ScoreSelector:focus { background: $boost; }
    """

    values: reactive[tuple] = reactive(tuple, layout=False)
    selected: reactive[int | None] = reactive(None)
    noun = "score"  # what is chosen: "verdict" on the verdict page

    class Changed(Message):
        def __init__(self, selector: "ScoreSelector", value: Any) -> None:
            super().__init__()
            self.selector = selector
            self.value = value

        @property
        def control(self) -> "ScoreSelector":
            return self.selector

    def set_values(self, values: list, current: Any, noun: str = "score") -> None:
        """`noun` names what is chosen: "score" for a criterion, "verdict" on the verdict page."""
        self.noun = noun
        self.set_reactive(ScoreSelector.values, tuple(values))
        index = None
        for i, v in enumerate(values):
            if v == current:
                index = i
        self.set_reactive(ScoreSelector.selected, index)
        self.refresh()

    @property
    def value(self) -> Any:
        return None if self.selected is None else self.values[self.selected]

    def digit_value(self, digit: str) -> Any:
        """The value a digit key picks: the value itself on a numeric scale (3 is 3 on 1..5, 0 is 0 on
        0..10); otherwise (labels, pass/fail, verdicts, a scale without that number) the digit-th value
        (1 is the first). None when the digit picks nothing."""
        number = int(digit)
        for v in self.values:
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == number:
                return v
        if not any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values):
            position = 10 if number == 0 else number
            if 1 <= position <= len(self.values):
                return self.values[position - 1]
        return None

    def digits_hint(self) -> str:
        """Which digits score here, e.g. "1-5" (for the hint on the row)."""
        numeric = [v for v in self.values if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 9]
        if numeric and len(numeric) == len(self.values):
            return f"{numeric[0]}-{numeric[-1]}"
        count = min(len(self.values), 9)
        return f"1-{count}" if count > 1 else "1"

    def on_key(self, event: events.Key) -> None:
        # Where a score has the focus, a digit scores (it would otherwise switch areas: 3 went to Engines).
        if event.character is None or not event.character.isdigit() or len(event.character) != 1:
            return
        event.stop()
        event.prevent_default()
        value = self.digit_value(event.character)
        if value is None:
            self.notify(f"{event.character} is not a value of this scale ({', '.join(map(str, self.values))})",
                        severity="warning", timeout=3)
            return
        self._choose(self.values.index(value))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def _hints(self) -> tuple[str, ...]:
        """What the row says about its keys, longest first: how to get here, or how to score here."""
        if self.has_focus:
            digits = self.digits_hint()
            verb = "score" if self.noun == "score" else "choose"
            return (f"← → or {digits} to {verb}", f"← → {digits}", "")
        return (f"Tab here to {'score' if self.noun == 'score' else 'choose'}", "Tab", "")

    def render(self) -> Content:
        noun = self.noun
        parts: list = [(f"{noun} ", "$text-muted")]
        for i, v in enumerate(self.values):
            label = f" {v} "
            parts.append((f"[{v}]" if i == self.selected else label,
                          "bold reverse $text-primary" if i == self.selected else ""))
            parts.append(" ")
        values = Content.assemble(*parts)
        body = values
        if self.selected is None:
            body = Content.assemble(values, ("(not scored)" if noun == "score" else "(not chosen)", "$text-warning"))
        width = self.content_region.width or self.size.width
        # Longest first: the key hint outlasts "(not scored)" (the note below says that too).
        for hint in self._hints()[:2]:
            for shown in (body, values):
                line = Content.assemble(shown, (" · ", "$text-muted"), (hint, "$text-muted italic"))
                if line.cell_length <= width:
                    return line
        return body

    def _choose(self, index: int | None) -> None:
        if index == self.selected:
            return
        self.selected = index
        self.post_message(self.Changed(self, self.value))

    def action_score_up(self) -> None:
        if self.values:
            self._choose(0 if self.selected is None else min(len(self.values) - 1, self.selected + 1))

    def action_score_down(self) -> None:
        if self.values:
            self._choose(len(self.values) - 1 if self.selected is None else max(0, self.selected - 1))

    def action_score_clear(self) -> None:
        self._choose(None)


class CommentEditor(TextArea):
    """The justification of the current criterion (or the review summary)."""

    HELP = """\
## Rubric: comment

Why this score, in words another auditor can check. Every keystroke is autosaved (outside the task
repository) so a dropped SSH session loses nothing. **ctrl+o** or **F7** opens the text in your
$VISUAL/$EDITOR for long comments. **Escape** (or Tab) leaves the editor for the criteria list.
"""

    # Only $EDITOR from the area's keys: a letter key (e) is text here.
    BINDINGS = [b for b in keymap.bindings("rubric") if b.id == "rubric.editor"] + keymap.bindings("comment")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")

    def action_done(self) -> None:
        # Typing keys go into the text, so Escape is the way out to the area's other keys.
        self.screen.query_one(CriteriaList).focus()

    def action_external_editor(self) -> None:
        self.app.action_edit_in_editor()  # type: ignore[attr-defined]  # self.app is NkituiApp, typed as App here


class LevelNote(Widget):
    """What the chosen value means, wrapped over at most MAX_LINES rows; a longer meaning ends with
    the key that shows it whole (never cut mid-word)."""

    DEFAULT_CSS = """
    LevelNote { height: auto; padding: 0 1; color: $text-muted; }
    """

    MAX_LINES = 2
    text: reactive[str] = reactive("", layout=True)
    max_lines: reactive[int] = reactive(MAX_LINES, layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.lines(width))

    def lines(self, width: int) -> list[str]:
        import textwrap

        width = max(10, width)
        lines = textwrap.wrap(self.text, width, break_on_hyphens=False) or [""]
        if len(lines) <= self.max_lines:
            return lines
        key = keymap.app_key(self, "rubric.levels")
        more = f" … {key}: in full"
        kept = lines[: self.max_lines]
        last = " ".join(" ".join(lines[self.max_lines - 1:]).split())
        room = width - len(more)
        cut = last[:room]
        if " " in cut and len(last) > room:
            cut = cut[: cut.rindex(" ")]  # whole words only
        kept[-1] = cut.rstrip(" ,;:") + more
        return kept

    @property
    def cut(self) -> bool:
        import textwrap

        return len(textwrap.wrap(self.text, max(10, self.content_region.width or 10), break_on_hyphens=False)) > self.max_lines

    def render(self) -> Content:
        return Content("\n".join(self.lines(self.content_region.width or self.size.width)))


class EvidenceList(OptionList):
    """Evidence linked to the current criterion (all evidence on the verdict page)."""

    HELP = """\
## Rubric: evidence

What backs this criterion's score: findings, source or diff lines, log lines, metrics and runs,
attached with **a** wherever they are shown. **Delete** (or **d**) removes the highlighted link.
"""

    BINDINGS = keymap.bindings("evidence")

    class Remove(Message):
        """Remove draft.evidence[index] (kind "evidence") or draft.comments[index] (kind "comment")."""

        def __init__(self, kind: str, index: int) -> None:
            super().__init__()
            self.kind = kind
            self.index = index

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.indices: list[tuple[str, int]] = []  # ("evidence" | "comment", index in the draft) per row

    def show(self, evidence: list, indices: list[int], comments: list | None = None,
             comment_indices: list[int] | None = None) -> None:
        self.clear_options()
        self.indices = [("evidence", i) for i in indices] + [("comment", i) for i in (comment_indices or [])]
        for i in indices:
            e = evidence[i]
            excerpt = f"  {e.excerpt}" if e.excerpt else ""
            self.add_option(Option(Content.assemble((f"{e.kind:<8}", "$text-accent"), (e.ref, "bold"),
                                                    (excerpt, "$text-muted"))))
        for i in comment_indices or []:
            c = comments[i]
            self.add_option(Option(Content.assemble(("comment ", "$text-secondary"), (c.location, "bold"),
                                                    (f"  {c.text}", ""))))
        if self.indices:
            self.highlighted = 0
        else:
            self.add_option(Option(Content.styled(
                f"None yet: press {keymap.app_key(self, 'app.attach')} on a finding, line or metric.",
                "$text-muted"),
                disabled=True))

    def action_remove_evidence(self) -> None:
        if self.highlighted is not None and 0 <= self.highlighted < len(self.indices):
            self.post_message(self.Remove(*self.indices[self.highlighted]))

    def action_open_evidence(self) -> None:
        if self.highlighted is not None and 0 <= self.highlighted < len(self.indices):
            self.app.open_evidence(*self.indices[self.highlighted])  # type: ignore[attr-defined]  # self.app is NkituiApp, typed as App here

"""Typed messages from the app's workers to the UI (workers never touch widgets)."""

from __future__ import annotations

from typing import Any

from textual.message import Message

from nkitui.common.findings import Finding


class ShowSource(Message):
    """Show file:line in the Source area (from a hot line, an evidence link ...)."""

    def __init__(self, file: str, line: int) -> None:
        super().__init__()
        self.file = file
        self.line = line


class CommentWanted(Message):
    """The auditor wants to comment on lines `line`..`end` of `file` (the app asks for the text).

    `view` is the code or diff view the lines were selected in: its selection ends once the comment
    is saved.
    """

    def __init__(self, file: str, line: int, end: int | None = None, view: Any = None) -> None:
        super().__init__()
        self.file = file
        self.line = line
        self.end = end if end is not None else line
        self.view = view

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.end == self.line else f"{self.file}:{self.line}-{self.end}"


class RevisionsWanted(Message):
    """The auditor asked to pick the revisions the diff compares (the app owns the picker screen)."""


class SourcesReady(Message):
    def __init__(self, left: Any, right: Any) -> None:  # SourceFile | None each
        super().__init__()
        self.left = left
        self.right = right


class AnalysisReady(Message):
    def __init__(self, findings: list[Finding], pairs: list, state: str, report: Any = None) -> None:
        super().__init__()
        self.findings = findings
        self.pairs = pairs
        self.state = state
        self.report = report


class SpeedOfLightReady(Message):
    """The task's speed of light on the target, known before any run (None, with the reason, when not)."""

    def __init__(self, sol: Any, reason: str = "") -> None:  # perf SpeedOfLight | None
        super().__init__()
        self.sol = sol
        self.reason = reason


class RevisionsReady(Message):
    def __init__(self, revisions: list, pair: tuple | None, error: str = "") -> None:
        super().__init__()
        self.revisions = revisions
        self.pair = pair
        self.error = error


class DiffReady(Message):
    def __init__(self, pair: tuple, files: list) -> None:
        super().__init__()
        self.pair = pair
        self.files = files


class RunStarted(Message):
    def __init__(self, run_id: str, backend: str, target: str, note: str = "") -> None:
        super().__init__()
        self.run_id = run_id
        self.backend = backend
        self.target = target
        self.note = note


class RunLogBatch(Message):
    """Coalesced log lines: (level index, text). The run worker sends at most ~20 of these a second."""

    def __init__(self, run_id: str, lines: list[tuple[int, str]]) -> None:
        super().__init__()
        self.run_id = run_id
        self.lines = lines


class RunProgress(Message):
    def __init__(self, run_id: str, phase: str | None, done: int, total: int, label: str = "") -> None:
        super().__init__()
        self.run_id = run_id
        self.phase = phase
        self.done = done
        self.total = total
        self.label = label


class RunFinished(Message):
    def __init__(self, run_id: str, result: Any, record: Any = None, error: str = "") -> None:
        super().__init__()
        self.run_id = run_id
        self.result = result
        self.record = record
        self.error = error


class RunsListed(Message):
    def __init__(self, runs: list) -> None:
        super().__init__()
        self.runs = runs


class ReviewReady(Message):
    """The rubric and the draft (restored or new) are loaded."""

    def __init__(self, rubric: Any, draft: Any, restored: str = "", history: list | None = None) -> None:
        super().__init__()
        self.rubric = rubric
        self.draft = draft
        self.restored = restored
        self.history = history or []


class ReviewHistory(Message):
    def __init__(self, entries: list) -> None:
        super().__init__()
        self.entries = entries


class ReviewSubmitted(Message):
    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result

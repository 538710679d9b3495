"""Typed messages from the app's workers and its audit sessions to the UI (workers never touch widgets)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from nkitui.app.screens.notices import Notice
    from nkitui.session import AuditSession
    from nkitui.session.events import SessionEvent


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


class SessionUpdate(Message):
    """An event of an audit session (nkitui.session.events), delivered on the UI thread.

    The session calls its observers from the worker thread that changed it; the app's observer posts
    this message, and the app shows the event if `session` is the one on screen.
    """

    def __init__(self, session: AuditSession, event: SessionEvent) -> None:
        super().__init__()
        self.session = session
        self.event = event


class NoticePosted(Message):
    """A notification to show in the footer's message line (posted from any thread)."""

    def __init__(self, notice: Notice, seconds: float) -> None:
        super().__init__()
        self.notice = notice
        self.seconds = seconds

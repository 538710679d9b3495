"""The sessions of one app: one per task, several alive at once.

An auditor's day is a queue of tasks. Opening a task from a queue opens (or finds) its session;
going back keeps it, with its draft, its shown run and even a run still going; opening it again
shows it as it was.

    sessions = SessionRegistry(SessionOptions(backend="auto"))
    session, new = sessions.open(task)      # the task's session, made on first open
    sessions.get(task.root)                 # or None
    sessions.close_all()                    # on quit: drafts flushed, live runs cancelled
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from nkitui.session.session import AuditSession, SessionOptions

if TYPE_CHECKING:
    from nkitui.task import Task


class SessionRegistry:
    def __init__(self, options: SessionOptions | None = None) -> None:
        self.options = options or SessionOptions()
        self._sessions: dict[Path, AuditSession] = {}

    @staticmethod
    def key(root: Path) -> Path:
        return Path(root).resolve()

    def open(self, task: Task) -> tuple[AuditSession, bool]:
        """The task's session and whether it was made now (a new session still has to be opened)."""
        key = self.key(task.root)
        session = self._sessions.get(key)
        if session is not None:
            return session, False
        session = self._sessions[key] = AuditSession(task, self.options)
        return session, True

    def get(self, root: Path) -> AuditSession | None:
        return self._sessions.get(self.key(root))

    def __iter__(self) -> Iterator[AuditSession]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def close(self, root: Path) -> None:
        session = self._sessions.pop(self.key(root), None)
        if session is not None:
            session.close()

    def close_all(self) -> None:
        for key in list(self._sessions):
            self.close(key)

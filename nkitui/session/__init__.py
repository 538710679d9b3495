"""The audit session: one task under audit, headless (no Textual) — task, analysis, runs, review, events.

    from nkitui.session import AuditSession, SessionOptions, SessionRegistry
    session = AuditSession(task, SessionOptions(backend="emulator"))
    session.subscribe(observer)       # observer(event) for every nkitui.session.events record
    session.open()                    # analysis, speed of light, latest run, review draft (blocking)
    session.runs.run()                # a run, its log streamed as RunLogged events (blocking)
    session.review.submit()           # commit the review (blocking)

The workstation (nkitui.app) drives sessions from its areas and shows their events; the tests drive
them directly. See docs/architecture.md, "The workstation".
"""

from __future__ import annotations

from nkitui.session.identity import AuditorIdentity, IdentityError
from nkitui.session.registry import SessionRegistry
from nkitui.session.repository import RepositoryState
from nkitui.session.session import AuditSession, Observer, SessionOptions, TaskVersion

__all__ = [
    "AuditSession", "AuditorIdentity", "IdentityError", "Observer", "RepositoryState", "SessionOptions",
    "SessionRegistry", "TaskVersion",
]

"""AuditSession: one task under audit, headless — its analysis, runs, review draft and auditor.

    session = AuditSession(task, SessionOptions(backend="emulator"))
    session.subscribe(print)            # every change of state is an event (nkitui.session.events)
    session.open()                      # blocking: all that opening a task does, in order
    result = session.runs.run()         # blocking: one run, its log streamed to the observers
    session.review.draft.set_score(...); session.review.edited()
    session.review.submit()

The workstation drives a session from its areas (each slow call in a worker the area owns) and shows
its events; the tests drive it directly, without Textual. One session per task: the app keeps them
in a SessionRegistry and switches between them, each keeping its state (a live run goes on).
Blocking methods may run in any thread; they change the session's state, then emit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nkitui.session.analysis import Analysis
from nkitui.session.events import AuditorResolved, FindingsChanged, RepositoryChecked, SessionEvent
from nkitui.session.imports import WORKER_IMPORTS
from nkitui.session.identity import AuditorIdentity, parse_auditor, resolve_identity
from nkitui.session.repository import RepositoryState, prepare_repository, repository_state
from nkitui.session.review import Review
from nkitui.session.runs import Runs

if TYPE_CHECKING:
    from nkitui.common.findings import Finding
    from nkitui.evaluate.run.result import RunResult
    from nkitui.task import Task

Observer = Callable[[SessionEvent], None]


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs and reviews; the same for every task of one app."""

    backend: str = "auto"  # auto | emulator | simulator | neuron
    target: str | None = None  # None: each task's own
    blind: bool = False  # hide other auditors' reviews until you have submitted yours
    auditor: str | None = None  # "Name <e-mail>" from nkitui's config; None: git's identity, else the OS user
    run_store: Path | None = None  # None: the XDG data folder
    draft_store: Path | None = None  # None: the XDG state folder


class TaskVersion:
    """The task's files as they are now: the runs of exactly these files are "current". The commit is
    read only when a run recorded no file hashes (reading it imports the evaluation's start-up code)."""

    def __init__(self, root: Path, hashes: dict[str, str]) -> None:
        self.root = root
        self.hashes = hashes
        self._commit: tuple[str | None] | None = None

    @property
    def commit(self) -> str | None:
        if self._commit is None:
            with WORKER_IMPORTS:
                from nkitui.evaluate.run import read_git_state
            self._commit = (read_git_state(self.root).commit,)
        return self._commit[0]

    def matches(self, result: RunResult) -> bool:
        """A run of these files: the same sha256 of every judged file (the same commit when the run
        recorded no hashes)."""
        if result.file_hashes:
            return dict(result.file_hashes) == self.hashes
        return self.commit is not None and result.task_commit == self.commit


class AuditSession:
    def __init__(self, task: Task, options: SessionOptions | None = None) -> None:
        self.task = task
        self.options = options or SessionOptions()
        self._observers: list[Observer] = []
        self._observers_lock = threading.Lock()
        self._identity: AuditorIdentity | None = None
        self.repository: RepositoryState | None = None
        self.analysis = Analysis(self)
        self.runs = Runs(self)
        self.review = Review(self)

    def __repr__(self) -> str:
        return f"AuditSession({self.task.id!r} at {self.task.root})"

    @property
    def target(self) -> str:
        return self.options.target or self.task.target

    # --- observers --------------------------------------------------------------------------------

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer` with every event from now on (from the thread that made the change); returns
        the function that unsubscribes it."""
        with self._observers_lock:
            self._observers.append(observer)

        def unsubscribe() -> None:
            with self._observers_lock:
                if observer in self._observers:
                    self._observers.remove(observer)

        return unsubscribe

    def emit(self, event: SessionEvent) -> None:
        with self._observers_lock:
            observers = list(self._observers)
        for observer in observers:
            observer(event)

    # --- what the session knows -------------------------------------------------------------------

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The analysis's findings, then the shown run's (its error at its line included)."""
        return self.analysis.findings + self.runs.findings

    def findings_changed(self) -> None:
        self.emit(FindingsChanged(self.findings))

    def current_version(self) -> TaskVersion:
        """The sha256 of the task's judged files now (blocking: reads the files)."""
        try:
            hashes = self.task.file_hashes()
        except OSError:
            hashes = {}
        return TaskVersion(self.task.root, hashes)

    def task_files(self) -> list[str]:
        """The task's files, relative to its root (for following a log line to its source)."""
        files = [self.task.rel(p) for p in self.task.judged_files()]
        return [f for f in files if f]

    # --- the auditor and the repository -----------------------------------------------------------

    @property
    def identity_known(self) -> AuditorIdentity | None:
        """The auditor if already resolved (never asks git: safe on the UI thread)."""
        return self._identity

    @property
    def identity(self) -> AuditorIdentity:
        """Who submits from this session (resolved on first use; identify() resolves it again)."""
        if self._identity is None:
            self._identity = resolve_identity(self.task.root, self.options.auditor)
        return self._identity

    def identify(self) -> AuditorIdentity:
        """Resolve the auditor again (blocking: asks git) and tell the observers."""
        self._identity = resolve_identity(self.task.root, self.options.auditor)
        self.emit(AuditorResolved(self._identity))
        return self._identity

    def set_auditor(self, text: str) -> AuditorIdentity:
        """The auditor as the person typed it ("Name <e-mail>"). IdentityError when unusable. The app
        remembers it in its config; here it holds for this session."""
        identity = parse_auditor(text, "config")
        self._identity = identity
        self.emit(AuditorResolved(identity))
        return identity

    def check_repository(self) -> RepositoryState:
        """Whether reviews can be committed from the task folder (blocking: asks git)."""
        self.repository = repository_state(self.task.root)
        self.emit(RepositoryChecked(self.repository))
        return self.repository

    def prepare_repository(self) -> RepositoryState:
        """Make the task folder a repository with a first commit (blocking). ReviewError with the way out."""
        self.repository = prepare_repository(self.task.root, self.identity.submit_as)
        self.emit(RepositoryChecked(self.repository))
        return self.repository

    # --- opening and closing ----------------------------------------------------------------------

    def open(self) -> None:
        """Everything opening a task does, one after another (blocking): the headless twin of the app's
        start-up, which runs the same calls in parallel workers."""
        self.identify()
        self.check_repository()
        self.analysis.run()
        self.analysis.speed_of_light()
        self.runs.restore()
        self.review.load()

    def close(self) -> None:
        """Flush the draft and stop a live run (the session is dropped, or the app quits)."""
        self.runs.cancel()
        self.review.close()

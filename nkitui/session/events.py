"""What an audit session tells its observers: one frozen record per change of its state.

The session calls each observer with these events from the thread that made the change (a worker
thread for slow work): an observer must not block. The app turns each event into a Textual
message (nkitui.app.messages.SessionUpdate) and shows it on the UI thread; a test simply collects
them. Every event is about the session that emitted it (the app knows which session is shown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Union

if TYPE_CHECKING:
    from nkitui.analysis import AlignmentPair
    from nkitui.common.findings import Finding
    from nkitui.evaluate.run.result import RunResult
    from nkitui.evaluate.run.store import RunSummary
    from nkitui.perf.roofline import SpeedOfLight
    from nkitui.review import Draft, HistoryEntry, ReviewError, Rubric, SubmitResult
    from nkitui.session.identity import AuditorIdentity
    from nkitui.session.repository import RepositoryState
    from nkitui.session.runlog import LogLine
    from nkitui.task import Problem

Severity = Literal["information", "warning", "error"]
ShownHow = Literal["finished", "reopened", "latest", "cited", "kept"]


# --- analysis and the task's facts ----------------------------------------------------------------

@dataclass(frozen=True)
class AnalysisDone:
    """The static analysis of the port: its findings and the CUDA<->NKI alignment."""

    findings: tuple[Finding, ...]
    alignment: tuple[AlignmentPair, ...]


@dataclass(frozen=True)
class FindingsChanged:
    """Every finding of the session now: the analysis's, then the shown run's (its error included)."""

    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class SpeedOfLightKnown:
    """The task's speed of light on its target before any run; None with the reason when there is none."""

    sol: SpeedOfLight | None
    reason: str = ""


@dataclass(frozen=True)
class BackendResolved:
    """Which backend a run will use (`auto` resolved by a probe in a child process), and why."""

    requested: str
    name: str
    reason: str
    available: bool

    @property
    def label(self) -> str:
        if not self.available:
            return f"{self.name} unavailable"
        return f"{self.name} (auto)" if self.requested == "auto" else self.name


# --- runs ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunStarting:
    """A run was asked for; its child process is being started."""

    backend: str
    target: str


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    backend: str
    target: str


@dataclass(frozen=True)
class RunLogged:
    """New lines of the live run's log (coalesced: a few batches a second however fast it prints)."""

    run_id: str
    lines: tuple[LogLine, ...]


@dataclass(frozen=True)
class RunProgressed:
    run_id: str
    phase: str | None
    done: int = 0
    total: int = 0
    label: str = ""


@dataclass(frozen=True)
class RunCancelling:
    run_id: str


@dataclass(frozen=True)
class RunEnded:
    """The live run is over. `result` is None only when it could not start (`error` says why).

    A cancelled run does not replace the run shown before it: `kept` is that run (RunShown follows
    with it), so the auditor keeps the last completed run's results until a new one completes.
    """

    run_id: str
    result: RunResult | None
    error: str = ""
    kept: RunResult | None = None


@dataclass(frozen=True)
class RunShown:
    """The run whose results, utilisation, findings and log the session shows now, and how it got there:
    finished (a run of this session), reopened (picked from the history), latest (the newest run of
    the task's current files, on opening), cited (a run the draft cites, when none matches the current
    files), kept (shown again after a newer run was cancelled). `log` is its log; None when the log
    on screen is already this run's (it was streamed live)."""

    result: RunResult
    how: ShownHow
    log: tuple[LogLine, ...] | None
    note: str = ""


@dataclass(frozen=True)
class RunsListed:
    """The task's stored runs, newest first (unreadable files left out)."""

    runs: tuple[RunSummary, ...]


# --- review ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReviewLoaded:
    """The rubric and the draft (restored from the autosave, or new) are loaded."""

    rubric: Rubric
    draft: Draft
    restored: str = ""  # what was restored, in words ("" for a new draft)


@dataclass(frozen=True)
class ReviewChecked:
    """The draft was validated against the rubric: what blocks submitting (errors) or deserves a look."""

    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class ReviewHistoryLoaded:
    entries: tuple[HistoryEntry, ...]


@dataclass(frozen=True)
class ReviewSubmitted:
    """The review was committed; the session's draft is a new, empty one."""

    result: SubmitResult
    draft: Draft


@dataclass(frozen=True)
class ReviewRefused:
    """The review was not committed (the draft, the repository or a cited run is not ready)."""

    error: ReviewError


@dataclass(frozen=True)
class AuditorResolved:
    """Who submits reviews from this session, and where that came from."""

    identity: AuditorIdentity


@dataclass(frozen=True)
class RepositoryChecked:
    """Whether the task folder is in a git repository with a commit (reviews are committed there)."""

    state: RepositoryState


@dataclass(frozen=True)
class Notice:
    """Something the auditor should read that is not a state change (a failed autosave, a probe that failed)."""

    message: str
    severity: Severity = "information"
    title: str = ""


SessionEvent = Union[
    AnalysisDone, FindingsChanged, SpeedOfLightKnown, BackendResolved,
    RunStarting, RunStarted, RunLogged, RunProgressed, RunCancelling, RunEnded, RunShown, RunsListed,
    ReviewLoaded, ReviewChecked, ReviewHistoryLoaded, ReviewSubmitted, ReviewRefused,
    AuditorResolved, RepositoryChecked, Notice,
]

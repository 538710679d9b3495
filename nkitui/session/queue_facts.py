"""What the audit queue knows about one task, read from disk (blocking, any thread, no Textual):

    verdict = read_verdict(batch_task)              # the last run for the task's current commit
    review = read_review(batch_task)                # its submitted reviews and my autosaved draft
    findings = read_findings(batch_task, cache)     # static findings by severity, cached by file hashes

Nothing here runs task code: the verdict comes from the run store (whoever ran it: the app,
`nkitui check`, a batch), the findings from static analysis (parsing only), the review state from
the review files and the draft store. Each reader turns its own failure into a note on its result,
so one broken task never stops the queue from filling in.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nkitui.session.imports import WORKER_IMPORTS

if TYPE_CHECKING:
    from nkitui.batch.tasks import BatchTask
    from nkitui.review import Draft

ReviewState = Literal["none", "draft", "mine", "others", "outdated"]
SEVERITIES = ("high", "medium", "low", "info")
FAILING = ("failed", "timeout", "crashed", "memory-limit", "cpu-limit", "killed", "internal-error")


# --- the last run ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """The last run of the task's current version (`status` "not run" when there is none)."""

    status: str  # not run | passed | failed | invalid | timeout | crashed | memory-limit | ...
    at: dt.datetime | None = None  # when that run finished (UTC)
    run_id: str | None = None
    backend: str | None = None
    checks_passed: int = 0
    checks_total: int = 0
    failed_checks: tuple[str, ...] = ()
    commit: str | None = None  # the task repository's HEAD now (None outside git)
    dirty: bool | None = None  # uncommitted changes in the task folder now
    note: str = ""  # why there is no verdict, why the commit is unknown, what the run saw

    @property
    def failing(self) -> bool:
        return self.status in FAILING


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def read_verdict(task: BatchTask, store_root: Path | None = None) -> Verdict:
    """The newest stored run of the task's current commit (for a task outside git: of its current
    files). A cancelled run judged nothing and is passed over; a task that cannot be loaded or
    cannot run is `invalid`, with its first problem as the note."""
    with WORKER_IMPORTS:
        from nkitui.batch.aggregate import latest_run_for
        from nkitui.batch.gitstate import read_git_state
    state = read_git_state(task.root)
    notes = [] if state.known else [state.note]
    result = latest_run_for(task, state, store_root, skip=("cancelled",)) if task.task is not None else None
    if task.problems or task.task is None:
        first = task.problems[0] if task.problems else "the task cannot be loaded"
        return Verdict("invalid", commit=state.commit, dirty=state.dirty, note="; ".join([first, *notes]))
    if result is None:
        notes.append("no run for the current commit" if state.known else "no run for the current files")
        return Verdict("not run", commit=state.commit, dirty=state.dirty, note="; ".join(n for n in notes if n))
    if result.task_dirty:
        notes.append("the run saw uncommitted changes")
    return Verdict(
        result.status, at=parse_time(result.finished_at) or parse_time(result.created_at), run_id=result.run_id,
        backend=result.backend, checks_passed=sum(1 for c in result.checks if c.passed),
        checks_total=sum(1 for c in result.checks if c.passed is not None),
        failed_checks=tuple(c.id for c in result.failed_checks()), commit=state.commit, dirty=state.dirty,
        note="; ".join(n for n in notes if n))


# --- the review -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReviewFacts:
    """The task's submitted reviews (auditor, outdated) newest first, and whether an unsubmitted
    draft of mine waits (autosaved, with something in it, newer than the last submission: the
    draft that opening the task restores)."""

    reviews: tuple[tuple[str, bool], ...] = ()
    draft: bool = False
    draft_saved_at: dt.datetime | None = None
    problems: tuple[str, ...] = ()  # corrupt review files, an unreadable draft

    def state(self, me: str | None) -> ReviewState:
        """Where the review stands for auditor `me` (a reviews/ folder name):

        mine      I submitted a review of the task as it is now
        draft     I have an unsubmitted draft (and no current review)
        outdated  my review, or every review, judged files that have changed since
        others    others reviewed the task as it is now, I did not
        none      nobody reviewed it
        """
        if any(who == me and not outdated for who, outdated in self.reviews):
            return "mine"
        if self.draft:
            return "draft"
        if any(who == me for who, _ in self.reviews):
            return "outdated"
        if any(not outdated for _, outdated in self.reviews):
            return "others"
        return "outdated" if self.reviews else "none"

    def auditors(self, *, current: bool = True) -> tuple[str, ...]:
        return tuple(dict.fromkeys(who for who, outdated in self.reviews if outdated != current))


def draft_has_content(draft: Draft) -> bool:
    """Anything an auditor wrote: a score, a comment, a verdict, a summary, evidence, an override."""
    return bool(
        draft.verdict or draft.summary.strip() or draft.comments or draft.evidence or draft.overrides
        or any(s.value is not None or s.comment.strip() for s in draft.scores.values()))


def read_review(task: BatchTask, draft_store: Path | None = None) -> ReviewFacts:
    """The task's reviews (outdated when a judged file changed since) and my waiting draft."""
    with WORKER_IMPORTS:
        from nkitui.review import DraftStore, RecordError, offer_restore, task_history
    history = task_history(task.root, task=task.task)
    problems = [str(p) for p in history.problems if p.severity == "warning" and "corrupt" in p.message]
    reviews = tuple((e.record.auditor, e.outdated) for e in history.entries)
    draft, saved_at = False, None
    try:
        offer = offer_restore(DraftStore(draft_store), task.root, task.task_id)
    except RecordError as exc:
        draft = True  # an unreadable draft is still mine, and opening the task says what is wrong with it
        problems.append(str(exc.problems[0]) if exc.problems else str(exc))
    else:
        if offer is not None and draft_has_content(offer.draft):
            draft, saved_at = True, offer.saved_at
    return ReviewFacts(reviews, draft, saved_at, tuple(problems))


# --- static findings, cached ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FindingCounts:
    high: int = 0
    medium: int = 0
    low: int = 0
    info: int = 0
    error: str = ""  # the analysis could not run (no NKI source): the counts mean nothing
    cached: bool = False  # read from the cache, not analysed now

    @property
    def total(self) -> int:
        return self.high + self.medium + self.low + self.info

    def to_dict(self) -> dict[str, object]:
        return {"high": self.high, "medium": self.medium, "low": self.low, "info": self.info, "error": self.error}


@cache
def rules_fingerprint() -> str:
    """Changes when nkitui's version or any file of its analysis package changes (a cached count
    made by other rules must not be shown)."""
    from nkitui import __version__

    root = Path(__file__).resolve().parent.parent / "analysis"
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(root.rglob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


class FindingsCache:
    """Finding counts by the sha256 of the task's judged files (and the rules' fingerprint): one
    small JSON file per version of a task, in the XDG cache folder. A queue of 40 tasks seen before
    opens without analysing anything; a changed file is analysed again."""

    def __init__(self, root: Path | None = None) -> None:
        if root is None:
            with WORKER_IMPORTS:
                from nkitui.common.paths import cache_dir
            root = cache_dir() / "queue-findings"
        self.root = Path(root)

    @staticmethod
    def key(task_id: str, hashes: dict[str, str]) -> str:
        text = json.dumps({"task": task_id, "files": hashes, "rules": rules_fingerprint()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> FindingCounts | None:
        try:
            data = json.loads(self.path(key).read_text(encoding="utf-8"))
            counts = {s: int(data[s]) for s in SEVERITIES}
            return FindingCounts(**counts, error=str(data.get("error", "")), cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: analysed again

    def put(self, key: str, counts: FindingCounts) -> None:
        with WORKER_IMPORTS:
            from nkitui.common.atomic import atomic_write_text
        try:
            atomic_write_text(self.path(key), json.dumps(counts.to_dict()))
        except OSError:
            pass  # a cache that cannot be written only costs time


def read_findings(task: BatchTask, cache: FindingsCache | None = None) -> FindingCounts | None:
    """Static findings of the task's port by severity (None for a task that cannot be loaded)."""
    if task.task is None:
        return None
    try:
        hashes = task.task.file_hashes()
    except OSError as exc:
        return FindingCounts(error=f"the task's files cannot be read: {exc.strerror or exc}")
    key = FindingsCache.key(task.task_id, hashes)
    if cache is not None and (known := cache.get(key)) is not None:
        return known
    with WORKER_IMPORTS:
        from nkitui.analysis import analyze_task
    try:
        report = analyze_task(task.task)
    except Exception as exc:  # noqa: BLE001 - a port the analysis cannot read is this task's note, not a crash
        counts = FindingCounts(error=f"{type(exc).__name__}: {exc}")
    else:
        by = dict.fromkeys(SEVERITIES, 0)
        for finding in report.findings:
            if finding.severity in by:
                by[finding.severity] += 1
        counts = FindingCounts(by["high"], by["medium"], by["low"], by["info"])
    if cache is not None:
        cache.put(key, counts)
    return counts


def age_text(at: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """How long ago, in one short word: 40s, 12m, 3h, 5d, 7w, 2y."""
    if at is None:
        return ""
    now = now or dt.datetime.now(dt.timezone.utc)
    seconds = max(0.0, (now - at).total_seconds())
    for unit, size in (("y", 365 * 86400), ("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


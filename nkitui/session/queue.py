"""The audit queue: every task under a folder, one row each, with what an auditor needs to pick the
next one — its last verdict for the current commit, its static findings, where its review stands —
and a batch of evaluations running in the background that fills the rows in (headless, no Textual).

    queue = TaskQueue(Path("tasks"), me="ada")    # me: the auditor's reviews/ folder name
    queue.discover()                              # blocking: the tasks, rows without facts yet
    for row in queue.read_all(): queue.update(row)  # blocking: verdicts, reviews, findings (cached)
    rows = queue.view(state="to-review", text="matmul", sort="findings")
    queue.summary().text()                        # "3 of 12 reviewed, 2 failing, 1 outdated"
    queue.next_needing_review([r.key for r in rows], after="rmsnorm")
    handle = queue.start_batch(BatchOptions(backend="emulator"), on_event=...)  # nkitui.batch
    queue.apply_batch(event)                      # each batch event: rows go queued, running, done

The workstation's queue screen (nkitui.app.screens.queue) draws this and runs the blocking calls in
workers; the tests drive it directly. Rows are frozen records replaced whole; every change of the
queue's state happens under one lock, so batch threads and the UI thread may both call it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nkitui.session.imports import WORKER_IMPORTS
from nkitui.session.queue_facts import (
    FindingCounts,
    FindingsCache,
    ReviewFacts,
    ReviewState,
    Verdict,
    age_text,
    parse_time,
    read_findings,
    read_review,
    read_verdict,
)

if TYPE_CHECKING:
    from nkitui.batch import BatchHandle, BatchOptions, BatchTask
    from nkitui.batch.events import BatchEvent
    from nkitui.batch.executor import Executor
    from nkitui.batch.record import TaskRecord

REVIEW_LABELS: dict[str, str] = {
    "none": "none", "draft": "my draft", "mine": "submitted by me", "others": "submitted by others",
    "outdated": "outdated",
}
REVIEW_SHORT: dict[str, str] = {"none": "—", "draft": "my draft", "mine": "✓ by me", "others": "by others",
                                "outdated": "outdated"}


@dataclass(frozen=True)
class QueueRow:
    key: str  # the task folder relative to the queue's folder (the batch's key too)
    root: Path
    task_id: str
    title: str = ""
    op: str | None = None
    namespace: str | None = None
    target: str | None = None
    problems: tuple[str, ...] = ()  # why the task cannot be loaded or run
    loadable: bool = True  # False: the task cannot be opened for review (its manifest is broken)
    verdict: Verdict | None = None  # None until read
    findings: FindingCounts | None = None  # None until analysed (or for a task that cannot be loaded)
    review: ReviewFacts | None = None  # None until read
    batch: str = ""  # "" | queued | running: where the task stands in the batch running now
    phase: str = ""  # the running evaluation's phase (batch), e.g. compile
    session_running: bool = False  # a run of the task's open audit session is going

    @property
    def read(self) -> bool:
        """The verdict and the review are known (the findings may still be coming)."""
        return self.verdict is not None and self.review is not None

    @property
    def status(self) -> str:
        """What the "last run" column says: running / queued while they last, else the verdict."""
        if self.session_running or self.batch == "running":
            return "running"
        if self.batch == "queued":
            return "queued"
        return self.verdict.status if self.verdict is not None else "…"

    @property
    def failing(self) -> bool:
        return self.verdict is not None and self.verdict.failing

    def review_state(self, me: str | None) -> ReviewState | None:
        return self.review.state(me) if self.review is not None else None

    def needs_review(self, me: str | None) -> bool:
        """Mine to do: the task opens, and I have no review of it as it is now."""
        state = self.review_state(me)
        return self.loadable and state is not None and state != "mine"

    def age(self, now: Any = None) -> str:
        return age_text(self.verdict.at if self.verdict is not None else None, now)

    def words(self, me: str | None) -> str:
        """Everything the text filter matches, lower case."""
        state = self.review_state(me)
        return " ".join(str(x) for x in (self.key, self.task_id, self.title, self.op or "", self.namespace or "",
                                         self.target or "", self.status, REVIEW_LABELS.get(state or "", ""))).lower()


# --- filters and sorts ----------------------------------------------------------------------------------

def _is(state: str) -> Callable[[QueueRow, str | None], bool]:
    return lambda row, me: row.review_state(me) == state


STATE_FILTERS: dict[str, tuple[str, Callable[[QueueRow, str | None], bool]]] = {
    "all": ("all tasks", lambda row, me: True),
    "to-review": ("to review (mine to do)", lambda row, me: row.needs_review(me)),
    "draft": ("my drafts", _is("draft")),
    "mine": ("submitted by me", _is("mine")),
    "others": ("submitted by others only", _is("others")),
    "outdated": ("outdated reviews", _is("outdated")),
    "unreviewed": ("not reviewed by anyone", _is("none")),
    "not-run": ("not run", lambda row, me: row.status == "not run"),
    "running": ("running or queued", lambda row, me: row.status in ("running", "queued")),
    "passed": ("passed", lambda row, me: row.status == "passed"),
    "failing": ("failing (failed, timeout, crash)", lambda row, me: row.failing),
    "invalid": ("invalid", lambda row, me: row.status == "invalid"),
}

_VERDICT_RANK = {"failed": 0, "timeout": 1, "crashed": 1, "memory-limit": 1, "cpu-limit": 1, "killed": 1,
                 "internal-error": 1, "invalid": 2, "running": 3, "queued": 4, "not run": 5, "passed": 6}
_REVIEW_RANK = {"draft": 0, "outdated": 1, "none": 2, "others": 3, "mine": 4, None: 5}


def _findings_rank(row: QueueRow) -> tuple[Any, ...]:
    f = row.findings
    if f is None or f.error:
        return (1, 0, 0, 0)
    return (0, -f.high, -f.medium, -f.low)


SORTS: dict[str, tuple[str, Callable[[QueueRow, str | None], Any]]] = {
    "folder": ("folder", lambda row, me: row.key),
    "id": ("task id", lambda row, me: (row.task_id.lower(), row.key)),
    "verdict": ("last run, failing first", lambda row, me: (_VERDICT_RANK.get(row.status, 1), row.key)),
    "findings": ("findings, most severe first", lambda row, me: (_findings_rank(row), row.key)),
    "review": ("review, mine to do first", lambda row, me: (_REVIEW_RANK.get(row.review_state(me), 5), row.key)),
    "age": ("last run, oldest first", lambda row, me: (
        row.verdict.at.timestamp() if row.verdict is not None and row.verdict.at is not None else float("-inf"),
        row.key)),
}


@dataclass(frozen=True)
class QueueSummary:
    total: int = 0
    reviewed: int = 0  # submitted by me, current
    failing: int = 0
    outdated: int = 0
    invalid: int = 0
    drafts: int = 0
    running: int = 0
    unread: int = 0  # rows whose facts are still being read

    def text(self) -> str:
        """The header's summary: "14 of 40 reviewed, 3 failing, 2 outdated"."""
        parts = [f"{self.reviewed} of {self.total} reviewed", f"{self.failing} failing", f"{self.outdated} outdated"]
        if self.invalid:
            parts.append(f"{self.invalid} invalid")
        if self.running:
            parts.append(f"{self.running} running")
        return ", ".join(parts)


# --- a batch seen from the queue ------------------------------------------------------------------------

@dataclass
class BatchProgress:
    """Counts, elapsed time and ETA of the batch the queue started (made from its events)."""

    total: int = 0  # tasks in the batch
    to_run: int = 0  # of those, evaluated now (not resumed, not invalid)
    started: set[str] = field(default_factory=set)
    running: dict[str, str] = field(default_factory=dict)  # key -> phase
    finished: dict[str, str] = field(default_factory=dict)  # key -> status
    resumed: int = 0
    workers: int = 0
    began: float = field(default_factory=time.monotonic)
    first_start: float | None = None
    ended: float | None = None
    cancelling: bool = False
    summary: Any = None  # nkitui.batch.BatchSummary once finished

    @property
    def done(self) -> bool:
        return self.ended is not None

    @property
    def counts(self) -> Counter[str]:
        return Counter(self.finished.values())

    @property
    def evaluated(self) -> int:
        """Tasks evaluated so far by this batch (resumed and invalid ones came at once)."""
        return sum(1 for key in self.finished if key in self.started)

    def elapsed_s(self, now: float | None = None) -> float:
        return ((self.ended if self.ended is not None else now if now is not None else time.monotonic())
                - self.began)

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left: the time per evaluated task so far (with the pool's parallelism in it) times
        the tasks left; None until one has finished."""
        if self.done or self.first_start is None:
            return None
        done = self.evaluated
        if done == 0:
            return None
        now = time.monotonic() if now is None else now
        per_task = (now - self.first_start) / done
        return max(0.0, per_task * (self.to_run - done))

    def apply(self, event: BatchEvent) -> None:
        with WORKER_IMPORTS:
            from nkitui.batch.events import BatchFinished, BatchStarted, TaskFinished, TaskPhase, TaskStarted
        match event:
            case BatchStarted():
                self.total, self.to_run, self.workers = len(event.tasks), event.to_run, event.workers
            case TaskStarted(key=key):
                self.started.add(key)
                self.running[key] = ""
                if self.first_start is None:
                    self.first_start = time.monotonic()
            case TaskPhase(key=key, phase=phase):
                if key in self.running:
                    self.running[key] = phase
            case TaskFinished(record=record):
                self.running.pop(record.key, None)
                self.finished[record.key] = record.status
                self.resumed += int(record.resumed)
            case BatchFinished(summary=summary):
                self.ended, self.summary, self.running = time.monotonic(), summary, {}


def clock(seconds: float | None) -> str:
    """1:05, 12:40, 1:02:03."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def verdict_of_record(record: TaskRecord, before: Verdict | None) -> Verdict:
    """A batch's record as the row's verdict (the commit and dirty state as the batch saw them)."""
    note = "from an earlier batch (resumed)" if record.resumed else ""
    if record.status == "invalid" and record.problems:
        note = record.problems[0]
    elif record.error and record.status != "passed":
        note = str(record.error.get("message", ""))[:200]
    return Verdict(record.status, at=parse_time(record.finished_at), run_id=record.run_id, backend=record.backend,
                   checks_passed=record.checks_passed, checks_total=record.checks_total,
                   failed_checks=tuple(record.failed_checks), commit=record.commit or (before.commit if before else None),
                   dirty=record.dirty, note=note)


# --- the queue -------------------------------------------------------------------------------------------

class TaskQueue:
    def __init__(self, root: Path, *, me: str | None = None, store_root: Path | None = None,
                 draft_store: Path | None = None, findings_cache: FindingsCache | None = None) -> None:
        self.root = Path(root).expanduser().resolve()
        self.me = me  # the auditor's reviews/ folder name (AuditorIdentity.slug)
        self.store_root = store_root
        self.draft_store = draft_store
        self.findings_cache = findings_cache
        self.tasks: dict[str, BatchTask] = {}
        self._rows: dict[str, QueueRow] = {}
        self._by_root: dict[Path, str] = {}
        self._lock = threading.RLock()
        self.batch: BatchHandle | None = None
        self.progress: BatchProgress | None = None
        self.discovered = False

    # --- the tasks ----------------------------------------------------------------------------------

    def discover(self) -> list[QueueRow]:
        """Find the tasks under the folder again (blocking: walks it and loads each task.toml). Rows of
        tasks still there keep what is known of them; new tasks come without facts."""
        with WORKER_IMPORTS:
            from nkitui.batch.tasks import find_tasks
        found = find_tasks(self.root)
        with self._lock:
            old = self._rows
            self.tasks = {t.key: t for t in found}
            self._rows = {}
            for task in found:
                fresh = self._row_of(task)
                before = old.get(task.key)
                if before is not None:
                    fresh = replace(fresh, verdict=before.verdict, findings=before.findings, review=before.review,
                                    batch=before.batch, phase=before.phase, session_running=before.session_running)
                self._rows[task.key] = fresh
            self._by_root = {t.root.resolve(): t.key for t in found}
            self.discovered = True
            return list(self._rows.values())

    @staticmethod
    def _row_of(task: BatchTask) -> QueueRow:
        d = task.describe()
        return QueueRow(key=task.key, root=task.root, task_id=d["task_id"], title=d["title"] or "", op=d["op"],
                        namespace=d["namespace"], target=d["target"], problems=tuple(task.problems),
                        loadable=task.task is not None)

    @property
    def rows(self) -> list[QueueRow]:
        with self._lock:
            return list(self._rows.values())

    def row(self, key: str) -> QueueRow:
        with self._lock:
            return self._rows[key]

    def __len__(self) -> int:
        return len(self._rows)

    def key_for(self, root: Path) -> str | None:
        """The row of the task in folder `root` (an open session's task), if it is in the queue."""
        return self._by_root.get(Path(root).resolve())

    # --- reading the facts (blocking, any thread; nothing is stored until update) -----------------------

    def read(self, key: str, *, findings: bool = True) -> QueueRow:
        """The row with its verdict, review and (unless findings=False) finding counts read now."""
        task = self.tasks[key]
        row = self.row(key)
        verdict = read_verdict(task, self.store_root)
        review = read_review(task, self.draft_store) if task.root.is_dir() else ReviewFacts()
        counts = read_findings(task, self.findings_cache) if findings else row.findings
        return replace(row, verdict=verdict, review=review, findings=counts)

    def read_all(self, keys: Iterable[str] | None = None, *, workers: int = 4) -> Iterator[QueueRow]:
        """Read the rows (all, or `keys`) on a few threads, yielding each as it is ready: first the
        verdict and review of every row (with its findings when they are cached), in the order they
        come, then the findings that were not cached, in queue order (the analysis is the slow
        part). A row may so come twice. The caller stores them with update()."""
        from concurrent.futures import ThreadPoolExecutor, as_completed

        keys = list(self.tasks) if keys is None else [k for k in keys if k in self.tasks]
        cache = self.findings_cache

        def facts(key: str) -> QueueRow:
            row = self.read(key, findings=False)
            task = self.tasks[key]
            if cache is not None and task.task is not None:  # cached counts come with the facts
                try:
                    hashes = task.task.file_hashes()
                except OSError:
                    hashes = None
                if hashes is not None and (known := cache.get(cache.key(task.task_id, hashes))) is not None:
                    row = replace(row, findings=known)
            return row

        by_key: dict[str, QueueRow] = {}
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="nkitui-queue") as pool:
            for future in as_completed([pool.submit(facts, k) for k in keys]):  # each as soon as it is read
                row = future.result()
                by_key[row.key] = row
                yield row
        for key in keys:  # then the analysis of what was not cached, one task at a time, in queue order
            row = by_key[key]
            if row.findings is None and row.loadable:
                yield replace(row, findings=read_findings(self.tasks[key], cache))

    def update(self, row: QueueRow) -> QueueRow:
        """Store a row read by read()/read_all(); what changed while it was read (a batch's or a
        session's live state) is kept."""
        with self._lock:
            now = self._rows.get(row.key)
            if now is None:
                return row  # the task left the queue while it was read
            row = replace(row, batch=now.batch, phase=now.phase, session_running=now.session_running)
            if row.findings is None and now.findings is not None:
                row = replace(row, findings=now.findings)
            self._rows[row.key] = row
            return row

    # --- live state -------------------------------------------------------------------------------------

    def set_session_running(self, key: str, running: bool) -> None:
        with self._lock:
            if key in self._rows:
                self._rows[key] = replace(self._rows[key], session_running=running)

    def set_me(self, me: str | None) -> None:
        """Another auditor (the app asked who is reviewing): every review state reads differently."""
        self.me = me

    # --- views ------------------------------------------------------------------------------------------

    def view(self, *, state: str = "all", text: str = "", sort: str = "folder", reverse: bool = False) -> list[QueueRow]:
        """The rows that pass the state filter and contain every word of `text`, sorted."""
        keep = STATE_FILTERS[state][1]
        order = SORTS[sort][1]
        words = text.lower().split()
        me = self.me
        rows = [r for r in self.rows if keep(r, me) and all(w in r.words(me) for w in words)]
        return sorted(rows, key=lambda r: order(r, me), reverse=reverse)

    def counts(self) -> dict[str, int]:
        """How many rows each state filter keeps (the filter menu shows them)."""
        rows, me = self.rows, self.me
        return {name: sum(1 for r in rows if keep(r, me)) for name, (_, keep) in STATE_FILTERS.items()}

    def summary(self) -> QueueSummary:
        rows, me = self.rows, self.me
        states = [r.review_state(me) for r in rows]
        return QueueSummary(
            total=len(rows), reviewed=states.count("mine"), failing=sum(1 for r in rows if r.failing),
            outdated=states.count("outdated"), invalid=sum(1 for r in rows if r.status == "invalid"),
            drafts=states.count("draft"), running=sum(1 for r in rows if r.status == "running"),
            unread=sum(1 for r in rows if not r.read))

    def next_needing_review(self, order: list[str], after: str | None = None) -> str | None:
        """The first task after `after` in `order` (wrapping round; the start when `after` is None or
        not in it) that needs my review; None when none does."""
        if not order:
            return None
        start = order.index(after) + 1 if after in order else 0
        me = self.me
        with self._lock:
            for i in range(len(order)):
                key = order[(start + i) % len(order)]
                row = self._rows.get(key)
                if row is not None and row.needs_review(me) and key != after:
                    return key
        return None

    # --- the batch ------------------------------------------------------------------------------------

    @property
    def batch_running(self) -> bool:
        return self.batch is not None and not self.batch.done

    def start_batch(self, options: BatchOptions, *, keys: Iterable[str] | None = None, resume: bool = True,
                    executor: Executor | None = None,
                    on_event: Callable[[BatchEvent, set[str]], None] | None = None,
                    ledger_path: Path | None = None) -> BatchHandle:
        """Start `nkitui batch` on the queue's tasks (all, or `keys`) in the background, as the
        command line would: the same evaluation, the run store, the batch ledger (resume skips
        tasks with a finished result for their current commit, version and options). Each event is
        applied to the rows, then handed to `on_event` with the keys of the rows it changed (from
        the batch's threads). RuntimeError while another batch of this queue runs."""
        with WORKER_IMPORTS:
            from nkitui.batch import start_batch
        if self.batch_running:
            raise RuntimeError("a batch is running already: cancel it first")
        chosen = list(self.tasks) if keys is None else [k for k in keys if k in self.tasks]
        if not chosen:
            raise ValueError("no task to run")
        self.progress = BatchProgress()

        def deliver(event: BatchEvent) -> None:
            changed = self.apply_batch(event)
            if on_event is not None:
                on_event(event, changed)

        if options.store_root is None and self.store_root is not None:
            options = replace(options, store_root=self.store_root)
        self.batch = start_batch(self.root, options=options, executor=executor,
                                 tasks=[self.tasks[k] for k in chosen], resume=resume, ledger_path=ledger_path,
                                 on_event=deliver)
        return self.batch

    def cancel_batch(self) -> bool:
        """Cancel the running batch (finished results stay). False when none runs."""
        if not self.batch_running:
            return False
        assert self.batch is not None and self.progress is not None
        self.progress.cancelling = True
        self.batch.cancel()
        return True

    def apply_batch(self, event: BatchEvent) -> set[str]:
        """A batch event on the rows (the keys whose row changed): every task of the batch is queued,
        then running with its phase, then its verdict is the batch's; a task the batch cancelled keeps
        the verdict it had (a cancelled run judged nothing)."""
        with WORKER_IMPORTS:
            from nkitui.batch.events import BatchFinished, BatchStarted, TaskFinished, TaskPhase, TaskStarted
        changed: set[str] = set()
        with self._lock:
            if self.progress is not None:
                self.progress.apply(event)
            rows = self._rows

            def set_row(key: str, **changes: Any) -> None:
                if key in rows:
                    rows[key] = replace(rows[key], **changes)
                    changed.add(key)

            match event:
                case BatchStarted(tasks=tasks):
                    for key, _ in tasks:
                        set_row(key, batch="queued", phase="")
                case TaskStarted(key=key):
                    set_row(key, batch="running", phase="")
                case TaskPhase(key=key, phase=phase):
                    set_row(key, phase=phase)
                case TaskFinished(record=record) if record.key in rows:
                    before = rows[record.key].verdict
                    if record.status == "cancelled":
                        set_row(record.key, batch="", phase="")
                    else:
                        set_row(record.key, batch="", phase="", verdict=verdict_of_record(record, before))
                case BatchFinished():
                    for key, row in rows.items():
                        if row.batch:
                            set_row(key, batch="", phase="")
        return changed

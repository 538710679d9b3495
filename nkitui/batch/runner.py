"""Run a batch: find the tasks, skip what resume allows, run the rest on an executor, and turn what
it reports into records in the run store, the ledger, the JSONL and a stream of typed events.

    handle = start_batch(Path("tasks"), options=BatchOptions(seeds=1), executor=LocalExecutor(2))
    for event in handle.events():        # BatchStarted, TaskStarted, TaskPhase, TaskFinished, BatchFinished
        ...
    handle.cancel()                      # any thread: running tasks are stopped, finished ones kept
    summary = handle.wait()              # BatchSummary; handle.records: TaskRecord by task key

Or pass `on_event=` to receive the events in the batch's own threads instead (the queue screen
posts them as messages). A task that is invalid, crashes or times out is one record among the
others; nothing a task does stops the batch.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from nkitui import __version__
from nkitui.batch.events import (
    BatchEvent,
    BatchFinished,
    BatchStarted,
    BatchSummary,
    TaskFinished,
    TaskPhase,
    TaskStarted,
)
from nkitui.batch.executor import Executor, JobOutcome
from nkitui.batch.gitstate import read_git_state, same_task_content
from nkitui.batch.ledger import Ledger, default_ledger_path
from nkitui.batch.options import BatchOptions
from nkitui.batch.record import TaskRecord, record_from_result
from nkitui.batch.tasks import BatchTask, find_tasks

_END = object()


class BatchHandle:
    def __init__(self, root: Path, options: BatchOptions, executor: Executor, *, tasks: list[BatchTask] | None,
                 resume: bool, jsonl: Path | IO[str] | None, ledger_path: Path | None,
                 on_event: Callable[[BatchEvent], None] | None) -> None:
        self.root = root
        self.options = options
        self.executor = executor
        self.resume = resume
        self.options_key = options.key()
        self.tasks: list[BatchTask] = list(tasks) if tasks is not None else []
        self._given_tasks = tasks is not None
        self.records: dict[str, TaskRecord] = {}
        self.summary = BatchSummary(executor=executor.name, workers=executor.workers)
        self._jsonl_target = jsonl
        self._jsonl: IO[str] | None = None
        self._owns_jsonl = False
        self._ledger_path = ledger_path
        self._ledger: Ledger | None = None
        self._on_event = on_event
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._started_at = time.perf_counter()
        self._by_key: dict[str, BatchTask] = {}
        self._thread = threading.Thread(target=self._main, name="nkitui-batch", daemon=True)

    # -- control ---------------------------------------------------------------------------------
    def start(self) -> "BatchHandle":
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop the batch (returns at once): nothing new starts, running evaluations are stopped and
        reported as cancelled, finished results stay."""
        self._cancel.set()
        self.executor.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> BatchSummary:
        """Wait for the batch to end (consuming its events when no on_event was given) and return its
        summary. `timeout`: seconds at most, events included; past it the batch goes on (`done` is
        False) and the summary so far is returned."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._on_event is None:
            for _ in self._events(deadline):
                pass
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.summary

    def events(self) -> Iterator[BatchEvent]:
        """The events in order, ending with BatchFinished (only when no on_event was given)."""
        return self._events(None)

    def _events(self, deadline: float | None) -> Iterator[BatchEvent]:
        if self._on_event is not None:
            raise RuntimeError("this batch delivers its events to on_event")
        while deadline is None or time.monotonic() < deadline:
            try:
                item = self._queue.get(timeout=0.2)  # a timeout keeps Ctrl-C deliverable to the caller
            except queue.Empty:
                continue
            if item is _END:
                return
            yield item

    # -- the batch thread ------------------------------------------------------------------------
    def _emit(self, event: BatchEvent) -> None:
        with self._lock:
            if self._on_event is not None:
                try:
                    self._on_event(event)
                except Exception:  # noqa: BLE001 - a consumer's bug must not stop the batch
                    pass
            else:
                self._queue.put(event)

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - always end with BatchFinished
            self.summary.error = f"the batch stopped on an internal error: {type(exc).__name__}: {exc}"
            self.executor.cancel()
        finally:
            self._finish()

    def _run(self) -> None:
        if not self._given_tasks:
            self.tasks = find_tasks(self.root)
        self._by_key = {t.key: t for t in self.tasks}
        self.summary.total = len(self.tasks)
        if self.options.store:
            try:
                self._ledger = Ledger(self._ledger_path or default_ledger_path(self.options.store_root))
            except Exception as exc:  # noqa: BLE001 - the batch runs without resume rather than not at all
                self.summary.notes.append(f"the batch ledger could not be opened ({exc}); --resume has nothing to read")
        self._open_jsonl()
        invalid = [t for t in self.tasks if not t.valid]
        valid = [t for t in self.tasks if t.valid]
        resumed: list[TaskRecord] = self._resumable(valid) if self.resume else []
        resumed_keys = {r.key for r in resumed}
        to_run = self._schedule([t for t in valid if t.key not in resumed_keys])
        self._emit(BatchStarted(root=str(self.root), tasks=tuple((t.key, t.describe()) for t in self.tasks),
                                to_run=len(to_run), executor=self.executor.name, workers=self.executor.workers,
                                workers_reason=self.executor.workers_reason, options_key=self.options_key))
        for task in invalid:
            self._record(TaskRecord(**self._base(task), status="invalid", problems=list(task.problems),
                                    error={"kind": "invalid-task", "message": task.problems[0] if task.problems else ""}))
        for record in resumed:
            self.summary.resumed += 1
            self._record(record)
        if to_run and not self._cancel.is_set():
            self.executor.run(to_run, self.options, _Reporter(self))

    def _finish(self) -> None:
        with self._lock:
            self.summary.not_run = sum(1 for t in self.tasks if t.key not in self.records)
        self.summary.cancelled = self._cancel.is_set()
        self.summary.wall_s = time.perf_counter() - self._started_at
        if self._jsonl is not None and self._owns_jsonl:
            try:
                self._jsonl.close()
            except OSError:
                pass
        if self._ledger is not None:
            self._ledger.close()
        self._emit(BatchFinished(self.summary))
        self._done.set()  # after the last event: whoever sees `done` has had every event
        if self._on_event is None:
            self._queue.put(_END)

    # -- helpers ---------------------------------------------------------------------------------
    def _open_jsonl(self) -> None:
        target = self._jsonl_target
        if target is None:
            return
        if isinstance(target, (str, Path)):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._jsonl = path.open("w", encoding="utf-8")
            self._owns_jsonl = True
        else:
            self._jsonl = target

    def _base(self, task: BatchTask) -> dict[str, Any]:
        return {"key": task.key, "path": str(task.root), **task.describe()}

    def _schedule(self, tasks: list[BatchTask]) -> list[BatchTask]:
        """Longest first (by each task's last duration): the pool does not end on one long straggler.
        Tasks never timed count as the median of those that were."""
        if self._ledger is None or len(tasks) < 2:
            return tasks
        known = self._ledger.durations([str(t.root) for t in tasks])
        if not known:
            return tasks
        guess = statistics.median(known.values())
        return sorted(tasks, key=lambda t: -known.get(str(t.root), guess))

    def _resumable(self, tasks: list[BatchTask]) -> list[TaskRecord]:
        if self._ledger is None:
            return []
        from concurrent.futures import ThreadPoolExecutor

        ledger = self._ledger

        def check(task: BatchTask) -> TaskRecord | None:
            assert task.task is not None
            try:
                hashes = task.task.file_hashes()
            except OSError:
                return None
            state = read_git_state(task.root)
            found = ledger.find(str(task.root), self.options_key, __version__, state.commit, state.dirty, hashes,
                                      same_commit=lambda other: same_task_content(state, other))
            if found is None or (found.run_path and not Path(found.run_path).is_file()):
                return None
            # the record as this batch names the task (another batch may have had another root)
            found.key, found.path, found.resumed = task.key, str(task.root), True
            found.options_key = self.options_key
            return found

        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="nkitui-batch-resume") as pool:
            return [r for r in pool.map(check, tasks) if r is not None]

    def _record(self, record: TaskRecord) -> None:
        with self._lock:
            record.options_key = record.options_key or self.options_key
            self.records[record.key] = record
            self.summary.counts[record.status] += 1
            if self._jsonl is not None:
                try:
                    self._jsonl.write(record.to_json() + "\n")
                    self._jsonl.flush()
                except (OSError, ValueError) as exc:
                    self.summary.notes.append(f"the JSONL could not be written: {exc}")
                    self._jsonl = None
            if self._ledger is not None and not record.resumed:
                try:
                    self._ledger.remember(record)
                except Exception as exc:  # noqa: BLE001 - resume is a convenience; the result is stored
                    self.summary.notes.append(f"the batch ledger could not be written: {exc}")
        self._emit(TaskFinished(record))

    def _outcome_record(self, key: str, outcome: JobOutcome) -> TaskRecord:
        task = self._by_key[key]
        base = self._base(task)
        result = outcome.result
        if result is not None:
            result.task_path = str(task.root)
            result.notes.extend(outcome.notes)
            record = record_from_result(result, base)
            if self.options.store:
                record.run_path = self._store(result)
        else:
            record = TaskRecord(**base, status=outcome.status or "internal-error", error=outcome.error,
                                problems=list(outcome.problems))
        record.executor = self.executor.name
        record.node = outcome.node
        record.attempts = outcome.attempts
        record.options_key = self.options_key
        if record.commit is None:
            state = read_git_state(task.root)
            record.commit, record.dirty = state.commit, state.dirty if state.commit else record.dirty
            record.commit_note = state.note
        return record

    def _store(self, result: Any) -> str | None:
        from nkitui.evaluate.run.store import RunStore

        try:
            path = RunStore(self.options.store_root).save(result)
        except OSError as exc:
            with self._lock:
                self.summary.notes.append(f"a run result could not be saved: {exc}")
            return None
        return str(path)


class _Reporter:
    """What executors call (from their threads)."""

    def __init__(self, batch: BatchHandle) -> None:
        self.batch = batch

    def started(self, key: str, attempt: int, node: str) -> None:
        self.batch._emit(TaskStarted(key, attempt, node))

    def phase(self, key: str, phase: str) -> None:
        self.batch._emit(TaskPhase(key, phase))

    def finished(self, key: str, outcome: JobOutcome) -> None:
        try:
            record = self.batch._outcome_record(key, outcome)
        except Exception as exc:  # noqa: BLE001 - this task is reported as an internal error, the batch goes on
            task = self.batch._by_key[key]
            record = TaskRecord(**self.batch._base(task), status="internal-error",
                                error={"kind": "internal", "message": f"{type(exc).__name__}: {exc}"})
        self.batch._record(record)


def start_batch(root: Path, *, options: BatchOptions | None = None, executor: Executor | None = None,
                tasks: list[BatchTask] | None = None, resume: bool = False, jsonl: Path | IO[str] | None = None,
                ledger_path: Path | None = None, on_event: Callable[[BatchEvent], None] | None = None) -> BatchHandle:
    """Start a batch over the tasks under `root` (or the given `tasks`) and return at once.
    FileNotFoundError when `root` is not a folder."""
    from nkitui.batch.local import LocalExecutor

    base = Path(root).expanduser().resolve()
    if tasks is None and not base.is_dir():
        raise FileNotFoundError(f"{root}: not a folder; give the folder that holds the tasks")
    handle = BatchHandle(base, options or BatchOptions(), executor or LocalExecutor(), tasks=tasks, resume=resume,
                         jsonl=jsonl, ledger_path=ledger_path, on_event=on_event)
    return handle.start()


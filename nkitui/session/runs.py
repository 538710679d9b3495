"""The session's runs: the live one, the one shown, the task's stored runs, and the backend a run uses.

    runs = session.runs
    result = runs.run()              # blocking (a worker thread): start the evaluation, stream its log, end
    runs.cancel()                    # any thread
    runs.restore()                   # on opening: the newest stored run of the task's current files
    runs.reopen(run_id)              # show an earlier run (runs.list_stored(): the stored ones)
    comparison = runs.compare(a, b)

One run shown at a time: its results, utilisation, findings and log. A run that completes replaces
it; a cancelled run does not (the last completed run stays shown until a new one completes).
Every change is an event (nkitui.session.events) to the session's observers.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nkitui.session.events import (
    BackendResolved, Notice, RunCancelling, RunEnded, RunLogged, RunProgressed, RunShown, RunStarted,
    RunStarting, RunsListed, ShownHow,
)
from nkitui.session.imports import WORKER_IMPORTS
from nkitui.session.runlog import LogLine, event_lines, stored_lines

if TYPE_CHECKING:
    from nkitui.common.findings import Finding
    from nkitui.evaluate.run.result import RunResult
    from nkitui.evaluate.run import EvaluationRequest
    from nkitui.evaluate.run.store import RunComparison, RunStore, RunSummary
    from nkitui.executor.runner import RunHandle
    from nkitui.session.session import AuditSession

LOG_FLUSH_S = 0.05  # at most ~20 log batches a second reach the observers
LOG_BATCH_MAX = 20_000
RESTORE_SCAN = 50  # stored runs looked at for one of the current files, newest first

_PROBES: list[Any] = []  # the one backend probe of this process (executor.backends.detect.Probe)
_PROBE_LOCK = threading.Lock()


def backend_probe() -> Any:
    """What a run's environment offers, probed in a child process once per process: it cannot change
    while nkitui runs, and the child takes a few tenths of a second. A failed probe is not kept."""
    with _PROBE_LOCK:
        if not _PROBES:
            with WORKER_IMPORTS:
                from nkitui.executor.backends.detect import probe_isolated
            _PROBES.append(probe_isolated())
        return _PROBES[0]


@dataclass
class LiveRun:
    """The run in progress: from the key press until its result (or its failure to start)."""

    backend: str
    target: str
    run_id: str = ""
    handle: RunHandle | None = None
    lines: list[LogLine] = field(default_factory=list)
    phase: str | None = None
    progress: RunProgressed | None = None
    cancel_requested: bool = False


def run_findings(result: RunResult) -> tuple[Finding, ...]:
    """The findings a run adds to the analysis's: its own (numerics, performance), and its error when
    the error names a line of the task (so the Source area marks it in the gutter)."""
    with WORKER_IMPORTS:
        from nkitui.common.findings import Finding

    found = [f for f in result.findings if f.source != "analysis"]
    error = result.error
    if error is not None and error.file and isinstance(error.line, int):
        message = error.message or "the kernel failed"
        kind = error.kind or "error"
        first = message.splitlines()[0] if message else kind
        found.insert(0, Finding(
            rule=f"RUN-{kind.upper()}", severity="high", title=first[:160], category="integrity", source="executor",
            message=f"Run {result.short_id} ({kind}): {message}", file=error.file, line=error.line,
            data={"run_id": result.run_id},
        ))
    return tuple(found)


class Runs:
    def __init__(self, session: AuditSession) -> None:
        self._session = session
        self._lock = threading.RLock()
        self.live: LiveRun | None = None
        self.shown: RunResult | None = None
        self.shown_how: ShownHow | None = None
        self.shown_log: tuple[LogLine, ...] = ()
        self.findings: tuple[Finding, ...] = ()  # the shown run's
        self.summaries: tuple[RunSummary, ...] = ()
        self.backend: BackendResolved | None = None
        self.last_ended: RunEnded | None = None

    # --- state ------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.live is not None

    def store(self) -> RunStore:
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.store import RunStore
        return RunStore(self._session.options.run_store)

    def request(self) -> EvaluationRequest:
        """What a run of this session asks for: the session's backend and target, the task's defaults."""
        with WORKER_IMPORTS:
            from nkitui.evaluate.run import EvaluationRequest
        options = self._session.options
        return EvaluationRequest.of(self._session.task.root, backend=options.backend, target=self._session.target,
                                    store_root=options.run_store)

    # --- the backend --------------------------------------------------------------------------------

    def resolve_backend(self) -> BackendResolved | None:
        """Which backend a run will use, and why (blocking: a probe in a child process, once per process)."""
        with WORKER_IMPORTS:
            from nkitui.executor.backends.base import BackendUnavailable
            from nkitui.executor.backends.select import choose_backend
        task = self._session.task
        requested = self._session.options.backend
        namespace = task.kernel.namespace if task.kernel else None
        try:
            probe = backend_probe()  # in a child: the Neuron SDK (if any) is never imported here
        except (RuntimeError, OSError, ValueError) as exc:
            self._session.emit(Notice(f"Could not tell which backend a run will use: {exc}", "warning",
                                      "Backend probe"))
            return None
        try:
            choice = choose_backend(requested, probe, namespace)
            resolved = BackendResolved(requested, choice.name, choice.reason, True)
        except (BackendUnavailable, ValueError) as exc:
            resolved = BackendResolved(requested, requested, str(exc), False)
        self.backend = resolved
        self._session.emit(resolved)
        return resolved

    # --- a run ----------------------------------------------------------------------------------------

    def run(self, request: EvaluationRequest | None = None) -> RunResult | None:
        """Run the task (blocking, in a worker thread): start the evaluation in its child process, pass
        its log and progress to the observers as it streams, and end with its result. Returns None when a
        run is already in progress or this one could not start (RunEnded says why)."""
        task = self._session.task
        with self._lock:
            if self.live is not None:
                self._session.emit(Notice("A run is already in progress.", "information"))
                return None
            live = self.live = LiveRun(self._session.options.backend, self._session.target)
        self._session.emit(RunStarting(live.backend, live.target))
        try:
            with WORKER_IMPORTS:
                from nkitui.evaluate.run.result import RunResult
                from nkitui.evaluate.run import start_evaluation
            events: queue.Queue[Any] = queue.Queue()
            try:
                request = request or self.request()
                handle = start_evaluation(request, on_event=events.put, task=task)
            except Exception as exc:  # noqa: BLE001 - anything that stops a start is reported, never raised
                self._end(live, None, f"{type(exc).__name__}: {exc}")
                return None
            with self._lock:
                live.handle, live.run_id = handle, handle.run_id
                cancel = live.cancel_requested
            if cancel:
                handle.cancel()
            self._session.emit(RunStarted(handle.run_id, live.backend, live.target))
            result_dict = self._follow(live, handle, events)
            result = RunResult.from_dict(result_dict) if result_dict is not None else None
            self._end(live, result, "" if result is not None else "the run ended without a result")
        finally:
            if self.live is live:  # something above raised: no observer may wait for this run
                self._end(live, None, "the run stopped on nkitui's side")
        self.list_stored()
        return result

    def _follow(self, live: LiveRun, handle: RunHandle, events: queue.Queue[Any]) -> dict[str, Any] | None:
        """Read the run's events until its result: log lines in batches, progress as it comes."""
        with WORKER_IMPORTS:
            from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, ProgressEvent, ResultEvent
        from nkitui.common.redact import LineRedactor

        emit = self._session.emit
        run_id = handle.run_id
        batch: list[LogLine] = []
        last_flush = time.monotonic()
        redactor = LineRedactor()  # the stored log is redacted; the live one reads the same

        def flush() -> None:
            nonlocal batch, last_flush
            if batch:
                batch = [LogLine(line.level, redactor.line(line.text)) for line in batch]
                live.lines.extend(batch)
                emit(RunLogged(run_id, tuple(batch)))
                batch = []
            last_flush = time.monotonic()

        while True:
            try:
                ev = events.get(timeout=LOG_FLUSH_S)
            except queue.Empty:
                flush()
                if handle.done and events.empty() and not handle.running:
                    return None  # the dispatcher ended without a result event (should not happen)
                continue
            if isinstance(ev, LogEvent):
                batch.extend(event_lines(ev))
            elif isinstance(ev, PhaseEvent):
                flush()
                batch.extend(event_lines(ev))
                if ev.state == "start":
                    live.phase = ev.name
                live.progress = RunProgressed(run_id, live.phase)
                emit(live.progress)
            elif isinstance(ev, ProgressEvent):
                live.progress = RunProgressed(run_id, live.phase, ev.done, ev.total, ev.label)
                emit(live.progress)
            elif isinstance(ev, ErrorEvent):
                batch.extend(event_lines(ev))
            elif isinstance(ev, ResultEvent):
                flush()
                return ev.result
            if len(batch) >= LOG_BATCH_MAX or time.monotonic() - last_flush >= LOG_FLUSH_S:
                flush()

    def _end(self, live: LiveRun, result: RunResult | None, error: str) -> None:
        with self._lock:
            if self.live is live:
                self.live = None
            kept = None
            if result is not None and result.status == "cancelled" and self.shown is not None:
                kept = self.shown  # a cancelled run does not replace the last completed one
            elif result is not None:
                self._set_shown(result, "finished", tuple(live.lines))
        ended = RunEnded(live.run_id, result, error, kept)
        self.last_ended = ended
        self._session.emit(ended)
        if kept is not None:
            cancelled = result.short_id if result is not None else live.run_id
            self._session.emit(RunShown(kept, "kept", self.shown_log, f"{cancelled} cancelled"))
        elif result is not None:
            self._session.emit(RunShown(result, "finished", None))
        if result is not None and kept is None:
            self._session.findings_changed()

    def cancel(self) -> bool:
        """Ask the live run to stop (any thread). False when no run is in progress."""
        with self._lock:
            live = self.live
            if live is None:
                return False
            live.cancel_requested = True
            handle = live.handle
        if handle is not None:
            handle.cancel()
        self._session.emit(RunCancelling(live.run_id))
        return True

    # --- the shown run --------------------------------------------------------------------------------

    def _set_shown(self, result: RunResult, how: ShownHow, log: tuple[LogLine, ...]) -> None:
        self.shown, self.shown_how, self.shown_log = result, how, log
        self.findings = run_findings(result)

    def show(self, result: RunResult, how: ShownHow, note: str = "") -> None:
        """Show a stored run (its log is the stored excerpt, read as the live log reads)."""
        log = tuple(stored_lines(result.log_excerpt))
        with self._lock:
            self._set_shown(result, how, log)
        self._session.emit(RunShown(result, how, log, note))
        self._session.findings_changed()

    def reopen(self, run_id: str) -> RunResult:
        """Show an earlier run of the task (blocking: reads the run store). RunNotFound when there is none."""
        result = self.store().load(run_id, self._session.task.id)
        self.show(result, "reopened")
        return result

    def load(self, run_id: str) -> RunResult:
        return self.store().load(run_id, self._session.task.id)

    def compare(self, run_a: str, run_b: str) -> tuple[RunComparison, RunResult, RunResult]:
        """Two stored runs of the task side by side (A/B: metrics, checks, timing, utilisation)."""
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.store import compare_runs
        a, b = self.load(run_a), self.load(run_b)
        return compare_runs(a, b), a, b

    def list_stored(self) -> tuple[RunSummary, ...]:
        """The task's stored runs, newest first (blocking: reads the run store)."""
        summaries = tuple(s for s in self.store().list(self._session.task.id) if not s.error)
        self.summaries = summaries
        self._session.emit(RunsListed(summaries))
        return summaries

    def restore(self) -> RunResult | None:
        """On opening: list the stored runs and show the newest completed run of the task's current files
        (the same file hashes; a run that recorded none: the same commit). Blocking."""
        summaries = self.list_stored()
        current = self._session.current_version()
        store = self.store()
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.result import ResultVersionError
            from nkitui.evaluate.run.store import RunNotFound

        for summary in summaries[:RESTORE_SCAN]:
            if summary.status == "cancelled":
                continue
            try:
                result = store.load(summary.run_id, self._session.task.id)
            except (RunNotFound, ResultVersionError, OSError, ValueError):
                continue
            if current.matches(result):
                with self._lock:
                    if self.shown is not None and self.shown_how != "cited":
                        return None  # a run finished (or was reopened) meanwhile: it wins
                    if self.live is not None:
                        # A run started before this was read: it is the last completed run, shown
                        # should that run be cancelled, but it must not replace the live log now.
                        self._set_shown(result, "latest", tuple(stored_lines(result.log_excerpt)))
                        return result
                commit = f", commit {result.task_commit[:12]}" if result.task_commit else ""
                note = f"the newest run of the task's current files{commit}"
                self.show(result, "latest", note)
                return result
        return None

    def show_cited(self, run_ids: list[str]) -> RunResult | None:
        """When no run of the current files is shown: the newest run the draft cites, so a reopened
        review shows the evidence it relies on."""
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.result import ResultVersionError
            from nkitui.evaluate.run.store import RunNotFound
        store = self.store()
        for run_id in sorted(run_ids, reverse=True):  # run ids sort by time
            with self._lock:
                if self.shown is not None or self.live is not None:
                    return None
            try:
                result = store.load(run_id, self._session.task.id)
            except (RunNotFound, ResultVersionError, OSError, ValueError):
                continue
            current = self._session.current_version()
            note = "cited by your draft" + ("" if current.matches(result) else "; the task's files changed since")
            self.show(result, "cited", note)
            return result
        return None

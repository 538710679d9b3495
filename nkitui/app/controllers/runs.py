"""The app's side of runs: start and cancel evaluations, stream their log, show results and
utilisation, reopen earlier runs and compare two. A mixin of NkituiApp.

The evaluation runs in a child process (nkitui.evaluate.run.start_evaluation). A thread worker
receives its events, coalesces log lines into batches (at most one message every
LOG_FLUSH_S) and posts typed messages; the log view repaints at most 20 times a second.
"""

from __future__ import annotations

import queue
import re
import time
from typing import Any

from textual import work
from textual.content import Content

from nkitui.app import keymap
from nkitui.app.imports import WORKER_IMPORTS
from nkitui.app.messages import RunFinished, RunLogBatch, RunProgress, RunsListed, RunStarted
from nkitui.app.widgets.run.logstore import LEVEL_INDEX, level_index
from nkitui.common import units

LOG_FLUSH_S = 0.05
LOG_BATCH_MAX = 20_000
_STATUS_STATE = {"passed": "passed", "failed": "failed", "invalid": "error", "cancelled": "cancelled"}


def log_line(stream: str, text: str) -> str:
    """The kernel's own output is tagged with its stream; the pipeline's lines are shown as they are."""
    return text if stream == "worker" else f"[{stream}] {text}"


class RunController:
    run_handle: Any = None
    run_id: str = ""
    shown_result: Any = None
    run_summaries: list = []
    run_findings: list = []

    @property
    def run_area(self):
        return self.workstation.area("run")  # type: ignore[attr-defined]

    @property
    def engines_area(self):
        return self.workstation.area("engines")  # type: ignore[attr-defined]

    # --- start / cancel ------------------------------------------------------------------------

    def action_start_run(self) -> None:
        task = self.audit_task  # type: ignore[attr-defined]
        if task is None:
            self.notify("The task is still loading.", timeout=3)  # type: ignore[attr-defined]
            return
        if self.run_in_progress:  # type: ignore[attr-defined]
            self.notify("A run is already in progress (x cancels it).", timeout=3)  # type: ignore[attr-defined]
            return
        if not task.runnable:
            self.notify("This task declares no kernel entry, reference or tensors, so it cannot run. "
                        f"Write a task.toml (nkitui task init {task.root.name}).",
                        title="Cannot run", severity="error", timeout=10)  # type: ignore[attr-defined]
            return
        self.run_in_progress = True
        self.run_area.log.clear("starting")
        self.run_area.show_results(False)
        self.update_header(run="running", run_detail="starting")  # type: ignore[attr-defined]
        self.run_area.set_status(Content.styled("Starting a run…", "$text-primary"))
        self.run_evaluation()

    def action_cancel_run(self) -> None:
        if not self.run_in_progress or self.run_handle is None:  # type: ignore[attr-defined]
            self.notify("No run in progress.", timeout=3)  # type: ignore[attr-defined]
            return
        self.run_handle.cancel()
        self.update_header(run="running", run_detail="cancelling")  # type: ignore[attr-defined]
        self.notify("Cancelling the run…", timeout=3)  # type: ignore[attr-defined]

    def evaluation_request(self) -> Any:
        """The request a run makes (tests may override it to skip slow checks)."""
        from nkitui.evaluate.options import EvaluationRequest

        task = self.audit_task  # type: ignore[attr-defined]
        backend = self.backend_choice  # type: ignore[attr-defined]
        return EvaluationRequest.of(task.root, backend=backend, target=self.target)  # type: ignore[attr-defined]

    @work(thread=True, name="run", group="run", exit_on_error=False)
    def run_evaluation(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.result import RunResult
            from nkitui.evaluate.run import start_evaluation
            from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, ProgressEvent, ResultEvent

        events: queue.Queue = queue.Queue()
        try:
            handle = start_evaluation(self.evaluation_request(), on_event=events.put,
                                      task=self.audit_task)  # type: ignore[attr-defined]
        except Exception as exc:
            self.post_message(RunFinished("", None, error=f"{type(exc).__name__}: {exc}"))  # type: ignore[attr-defined]
            return
        self.run_handle = handle
        run_id = handle.run_id
        self.post_message(RunStarted(run_id, self.backend_choice, self.target))  # type: ignore[attr-defined]
        batch: list[tuple[int, str]] = []
        last_flush = time.monotonic()
        phase: str | None = None
        result: Any = None
        error_level = LEVEL_INDEX["error"]

        def flush() -> None:
            nonlocal batch, last_flush
            if batch:
                self.post_message(RunLogBatch(run_id, batch))  # type: ignore[attr-defined]
                batch = []
            last_flush = time.monotonic()

        while True:
            try:
                ev = events.get(timeout=LOG_FLUSH_S)
            except queue.Empty:
                flush()
                if handle.done and events.empty() and result is None and not handle.running:
                    # the dispatcher ended without a result event (should not happen): stop waiting
                    break
                continue
            if isinstance(ev, LogEvent):
                batch.append((level_index(ev.level), log_line(ev.stream, ev.text)))
            elif isinstance(ev, PhaseEvent):
                flush()
                if ev.state == "start":
                    phase = ev.name
                    batch.append((LEVEL_INDEX["info"], f"── {ev.name} ──"))
                else:
                    detail = f": {ev.detail}" if ev.detail else ""
                    # A phase's outcome is what the info filter is for: never hide it as debug.
                    level = error_level if ev.status == "failed" else LEVEL_INDEX["info"]
                    took = f" in {ev.duration_s:.2f} s" if isinstance(ev.duration_s, (int, float)) else ""
                    batch.append((level, f"── {ev.name} {ev.status}{took}{detail}"))
                self.post_message(RunProgress(run_id, phase, 0, 0))  # type: ignore[attr-defined]
            elif isinstance(ev, ProgressEvent):
                self.post_message(RunProgress(run_id, phase, ev.done, ev.total, ev.label))  # type: ignore[attr-defined]
            elif isinstance(ev, ErrorEvent):
                where = f" at {ev.location}" if ev.location else ""
                batch.append((error_level, f"error ({ev.kind}){where}: {ev.message}"))
            elif isinstance(ev, ResultEvent):
                result = RunResult.from_dict(ev.result)
                break
            if len(batch) >= LOG_BATCH_MAX or time.monotonic() - last_flush >= LOG_FLUSH_S:
                flush()
        flush()
        self.post_message(RunFinished(run_id, result))  # type: ignore[attr-defined]

    # --- messages from the run worker ----------------------------------------------------------

    def on_run_started(self, message: RunStarted) -> None:
        self.run_id = message.run_id
        self.run_area.log.run_label = message.run_id
        self.update_header(run="running", run_detail="")  # type: ignore[attr-defined]
        self.run_area.set_status(
            Content.assemble(("◐ run ", "bold $text-primary"), message.run_id,
                             (f"  ·  {message.backend} / {message.target}", "$text-muted")),
            Content.assemble(("◐ run ", "bold $text-primary"), short_run_id(message.run_id)))

    def on_run_log_batch(self, message: RunLogBatch) -> None:
        if message.run_id == self.run_id:
            self.run_area.log.append_lines(message.lines)

    def on_run_progress(self, message: RunProgress) -> None:
        if message.run_id != self.run_id or not self.run_in_progress:  # type: ignore[attr-defined]
            return
        detail = message.phase or ""
        if message.total:
            detail += f" {message.done}/{message.total}"
        self.update_header(run="running", run_detail=detail.strip())  # type: ignore[attr-defined]
        head: list = [("◐ run ", "bold $text-primary"), message.run_id, "  ·  ", (message.phase or "", "bold")]
        short: list = [("◐ ", "bold $text-primary"), short_run_id(message.run_id), " ", (message.phase or "", "bold")]
        progress: list = []
        if message.total:
            width = 20
            filled = round(width * message.done / message.total)
            progress = ["  ", ("▰" * filled + "▱" * (width - filled), "$text-primary"),
                        f" {message.done}/{message.total}"]
        label = [f" {message.label}"] if message.total and message.label else []
        # At 80 columns the progress bar matters more than the full run id.
        self.run_area.set_status(Content.assemble(*head, *progress, *label), Content.assemble(*short, *progress, *label),
                                 Content.assemble(*short, *progress))

    def on_run_finished(self, message: RunFinished) -> None:
        self.run_in_progress = False
        self.run_handle = None
        self.run_area.log.flush_now()
        if message.result is None:
            self.update_header(run="error", run_detail="")  # type: ignore[attr-defined]
            text = message.error or "the run ended without a result"
            self.run_area.set_status(Content.styled(f"✘ {text}", "bold $text-error"))
            self.notify(text, title="Run failed to start", severity="error", timeout=10)  # type: ignore[attr-defined]
            return
        self.show_result(message.result, reopened=False)
        self.list_runs()

    # --- showing a result ----------------------------------------------------------------------

    def show_result(self, result: Any, *, reopened: bool) -> None:
        from nkitui.evaluate.present.report import render_result

        self.shown_result = result
        state = _STATUS_STATE.get(result.status, "error")
        changes = {"run": state, "run_detail": ("reopened " if reopened else "") + result.short_id}
        if result.backend and result.backend != "auto":
            # A run cancelled before its compile phase never resolved `auto`: the header keeps the
            # backend the probe found rather than claiming "auto (auto)".
            changes["backend"] = result.backend + (" (auto)" if result.backend_requested == "auto" else "")
        self.update_header(**changes)  # type: ignore[attr-defined]
        self.run_area.set_status(*result_summary(result, reopened))
        if reopened:
            log = self.run_area.log
            log.clear(result.run_id)
            log.append_lines(_excerpt_line(line) for line in result.log_excerpt)
            log.flush_now()
        self.run_area.results.show_result(result, render_result(result))
        self.run_findings = [f for f in result.findings if f.source != "analysis"]
        self.source_area.set_findings(self.all_findings())  # type: ignore[attr-defined]
        self._update_badges()  # type: ignore[attr-defined]
        record = None
        message = ""
        if result.utilisation is not None:
            record = result.utilisation
        else:
            message = f"Run {result.short_id} has no utilisation data ({result.status})."
        self.engines_area.show_record(record, result.run_id, message)
        if not reopened:
            verdict = "passed" if result.passed else result.status
            self.notify(run_notice(result), title=f"Run {short_run_id(result.run_id)} {verdict}",
                        severity="information" if result.passed else "warning", timeout=6)  # type: ignore[attr-defined]

    # --- history -------------------------------------------------------------------------------

    @work(thread=True, name="list runs", group="runs", exclusive=True, exit_on_error=False)
    def list_runs(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.store import RunStore
        self.post_message(RunsListed(RunStore().list(self.audit_task.id)))  # type: ignore[attr-defined]

    def on_runs_listed(self, message: RunsListed) -> None:
        self.run_summaries = [s for s in message.runs if not s.error]
        self.runs_known = bool(self.run_summaries)

    def action_run_history(self) -> None:
        if not self.run_summaries:
            self.notify(f"No earlier runs of this task: press {keymap.app_key(self, 'app.run')} to run it.", timeout=3)  # type: ignore[attr-defined]
            return

        from nkitui.app.screens.runs import RunsScreen

        def chosen(choice: tuple | None) -> None:
            if choice is None:
                return
            if choice[0] == "open":
                self.reopen_run(choice[1])
            else:
                self.compare_runs(choice[1], choice[2])

        self.push_screen(RunsScreen(self.run_summaries), chosen)  # type: ignore[attr-defined]

    @work(thread=True, name="reopen run", group="runs-load", exclusive=True, exit_on_error=False)
    def reopen_run(self, run_id: str) -> None:
        with WORKER_IMPORTS:
            from nkitui.evaluate.run.store import RunStore
        result = RunStore().load(run_id, self.audit_task.id)  # type: ignore[attr-defined]
        self.call_from_thread(self._reopened, result)  # type: ignore[attr-defined]

    def _reopened(self, result: Any) -> None:
        self.action_show_area("run")  # type: ignore[attr-defined]
        self.show_result(result, reopened=True)

    @work(thread=True, name="compare runs", group="runs-load", exclusive=True, exit_on_error=False)
    def compare_runs(self, run_a: str, run_b: str) -> None:
        with WORKER_IMPORTS:
            from nkitui.app.screens.runs import ComparisonScreen
            from nkitui.evaluate.run.store import RunStore, compare_runs

        store = RunStore()
        task_id = self.audit_task.id  # type: ignore[attr-defined]
        a, b = store.load(run_a, task_id), store.load(run_b, task_id)
        self.call_from_thread(self.push_screen, ComparisonScreen(compare_runs(a, b), a, b))  # type: ignore[attr-defined]


def short_run_id(run_id: str) -> str:
    """The run id's random tail (20260107T090000Z-a1b2c3 -> a1b2c3), as the header shows it."""
    return run_id.rsplit("-", 1)[-1] if "-" in run_id else run_id


def run_notice(result: Any) -> str:
    """The notification when a run ends: short, so at 80x24 the toast covers two rows, not five."""
    passed = sum(1 for c in result.checks if c.passed)
    total = sum(1 for c in result.checks if c.passed is not None)
    timing = result.timing
    time_part = (f" · {timing.kind} {units.time_us(timing.median_us)}"
                 if timing is not None and timing.median_us is not None else "")
    return f"{passed}/{total} checks{time_part}"


def result_summary(result: Any, reopened: bool = False) -> tuple[Content, ...]:
    """The Run area's status after a run: the full line, then a shorter one for narrow terminals."""
    glyph, style = {"passed": ("✔", "bold $text-success"), "failed": ("✘", "bold $text-error")}.get(
        result.status, ("■", "bold $text-warning"))
    passed = sum(1 for c in result.checks if c.passed)
    total = sum(1 for c in result.checks if c.passed is not None)
    parts: list = [(f"{glyph} {result.status}", style), f"  {passed}/{total} checks"]
    timing = result.timing
    if timing is not None and timing.median_us is not None:
        parts += ["  ·  ", (f"{timing.kind} {units.time_us(timing.median_us)}", "bold")]
    error = [("  ·  ", "$text-muted"), (result.error.message[:120], "$text-error")] if result.error else []
    reopened_text = "reopened " if reopened else ""
    full = parts + [("  ·  ", "$text-muted"), (f"{reopened_text}run {result.run_id}", "$text-muted")] + error
    short = parts + [("  ·  ", "$text-muted"), (f"{reopened_text}{short_run_id(result.run_id)}", "$text-muted")] + error
    return Content.assemble(*full), Content.assemble(*short)


_EXCERPT_TAG = re.compile(r"^\[(?P<stream>[\w.-]+)(?::(?P<level>\w+))?\] ")


def _excerpt_line(line: str) -> tuple[int, str]:
    """A stored log line, "[stream] text" or "[stream:level] text", as (level, text shown)."""
    m = _EXCERPT_TAG.match(line)
    if m is None or m.group("level") is None:
        return LEVEL_INDEX["info"], line
    return level_index(m.group("level")), f"[{m.group('stream')}] {line[m.end():]}"

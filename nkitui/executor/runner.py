"""Parent side of a run: spawn the worker, read its pipes, enforce the timeout, cancel, report.

    handle = start_worker(job)                       # returns at once; the worker is starting
    for event in handle.events(): ...                # blocks; ends after the last event
    handle.cancel()                                  # from any thread: SIGTERM, SIGKILL after grace
    handle.wait(timeout=None) -> result              # or consume everything without looking

Threads per run: one I/O thread multiplexing the three pipes (events, kernel stdout, kernel
stderr), one waiter (process exit + wall-clock watchdog). Events travel to the consumer through a
bounded queue of batches: when the consumer is slow the I/O thread blocks, the pipes fill and the
worker blocks on its next write (back-pressure). The kernel's raw output is bounded on the way in
(logbuffer.StreamLimiter), so a 50 MB burst costs a few milliseconds of reading and a few thousand
events, never 50 MB of events.

The consumer (whoever iterates events() or calls wait()) applies each event to the handle's state
and, at the end, asks the optional `finalizer` to turn the outcome into the final result object.
"""

from __future__ import annotations

import json
import os
import queue
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nkitui.executor import confine
from nkitui.executor.events import (
    BackendEvent,
    DataEvent,
    ErrorEvent,
    Event,
    LogEvent,
    PhaseEvent,
    ProgressEvent,
    ResultEvent,
    log_lines_of,
    parse_line,
)
from nkitui.executor.exitstatus import ExitReport, describe_exit
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.logbuffer import BoundedLog, StreamLimiter
from nkitui.executor.workspace import Scratch, WorkspaceError, make_scratch

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
READ_CHUNK = 1 << 16
QUEUE_BATCHES = 64
MAX_EVENT_LINE = 64 << 20  # an event line longer than this is dropped with a marker
DRAIN_AFTER_EXIT_S = 2.0  # idle time after the worker's exit before giving up on open pipes
DRAIN_AFTER_EXIT_BYTES = 4 << 20  # pipes buffer 64 KB each: more than this after exit is a straggler
_FINISHED = object()
_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def worker_command(job_path: Path, kernel_fd: int) -> list[str]:
    # -P: do not put the cwd (the task copy) first on sys.path, so a task cannot shadow nkitui or
    # numpy with modules of the same name before the limits and the guard are in place.
    return [sys.executable, "-P", "-m", "nkitui.executor.worker", str(job_path), "--kernel-fd", str(kernel_fd)]


@dataclass
class WorkerOutcome:
    """Everything the parent knows when a run is over (given to the finalizer)."""

    run_id: str
    exit: ExitReport
    limits: Limits
    result: dict[str, Any] | None  # the worker's result event, if it sent one
    errors: list[ErrorEvent]
    phases: list[PhaseEvent]  # ended phases, in order
    log: BoundedLog
    started_at: float  # time.time()
    ended_at: float
    elapsed_s: float
    startup_s: float | None  # spawn -> first event
    stream_bytes: dict[str, int] = field(default_factory=dict)
    crash_location: tuple[str, int] | None = None  # from a faulthandler traceback on stderr
    backend: BackendEvent | None = None  # the backend the worker announced (kept when it dies later)
    confinement: dict[str, Any] | None = None  # confine.observe() of the worker once it said it was confined


class _EventStreamParser:
    """Lines on the worker's event descriptor -> events; stray text -> bounded log lines.
    Each chunk is decoded once up to its last newline (a UTF-8 sequence never spans a newline)."""

    def __init__(self) -> None:
        self.partial = b""
        self.text = StreamLimiter("worker")
        self.total_bytes = 0

    def feed(self, data: bytes) -> list[Event]:
        self.total_bytes += len(data)
        data = self.partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self.partial = data
            if len(data) > MAX_EVENT_LINE:
                self.partial = b""
                return [LogEvent("executor", f"[nkitui] dropped an event line longer than {MAX_EVENT_LINE >> 20} MB", "warning")]
            return []
        self.partial = data[cut + 1:]
        out: list[Event] = []
        for line in data[:cut].decode("utf-8", errors="replace").split("\n"):
            ev = parse_line(line)
            if ev is None:
                out.extend(self.text.feed(line.encode("utf-8") + b"\n"))  # not an event: bounded like kernel output
            else:
                out.append(_redacted(ev))
        return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self.partial:
            out.extend(self.feed(b"\n"))
        out.extend(self.text.finish())
        return out


def _redacted(ev: Event) -> Event:
    """An event with known secret shapes removed from its text (the worker's output is redacted as
    it is read; an event's words, such as a kernel's exception, must be too before anyone shows them)."""
    from dataclasses import replace

    from nkitui.common.redact import redact_text

    if isinstance(ev, LogEvent):
        text = redact_text(ev.text)
        return ev if text == ev.text else replace(ev, text=text)
    if isinstance(ev, ErrorEvent):
        message, traceback = redact_text(ev.message), redact_text(ev.traceback)
        if (message, traceback) != (ev.message, ev.traceback):
            return replace(ev, message=message, traceback=traceback)
        return ev
    # every other event's words too: a phase's detail or a check's can quote a kernel's exception, and a
    # child's data carries its words to the evaluator (terminal controls made visible; secrets in data are
    # redacted where the evaluator's result is written)
    from nkitui.common.redact import neutralize_obj, redact_obj

    if isinstance(ev, PhaseEvent) and ev.detail:
        detail = redact_text(ev.detail)
        return ev if detail == ev.detail else replace(ev, detail=detail)
    if isinstance(ev, ProgressEvent) and ev.label:
        label = redact_text(ev.label)
        return ev if label == ev.label else replace(ev, label=label)
    if isinstance(ev, BackendEvent):
        reason = redact_text(ev.reason)
        return ev if reason == ev.reason else replace(ev, reason=reason)
    if isinstance(ev, ResultEvent):
        return replace(ev, result=redact_obj(ev.result))
    if isinstance(ev, DataEvent):
        return replace(ev, data=neutralize_obj(ev.data))
    return ev


_CLOSED_POLL_S = 0.25  # how soon an events() iteration blocked on another thread sees close()


class RunHandle:
    """One run of a worker. Thread-safe: cancel() and the status properties work from any thread;
    events()/wait() are meant for one consumer."""

    def __init__(
        self,
        job: WorkerJob,
        *,
        finalizer: Callable[[WorkerOutcome], tuple[Any, list[Event]]] | None = None,
        command: list[str] | None = None,
        queue_batches: int = QUEUE_BATCHES,
        requests: bool = False,
        fork: bool = False,
    ) -> None:
        self.job = job
        self._requests = requests  # a pipe on the worker's stdin for send() (untrusted children are servers)
        self._fork = fork  # fork this process instead of starting an interpreter (nkitui.executor.forked)
        self.run_id = job.run_id
        self.limits = job.limits
        self._finalizer = finalizer
        self._command = command
        self._queue: queue.Queue[Any] = queue.Queue(  # event batches, then _FINISHED
           maxsize=queue_batches)
        self._lock = threading.Lock()
        self._consumer_lock = threading.Lock()
        self._exited = threading.Event()
        self._finished = threading.Event()
        self._delivered = threading.Event()
        self._abandoned = threading.Event()
        self._cancel_requested = False
        self._timed_out = False
        self._proc: Any = None  # subprocess.Popen, or forked.ForkedWorker
        self._scratch: Scratch | None = None
        self._kernel_r: int | None = None
        self._spawned_at = 0.0
        self._first_event_at: float | None = None
        self._exit_at: float | None = None
        self._stderr_tail: deque[str] = deque(maxlen=200)
        self._start_error: ErrorEvent | None = None
        self._stream_bytes: dict[str, int] = {}
        self._observed: dict[str, Any] | None = None
        self._disk_watch: Any = None  # confine.diskwatch.DiskWatch of the scratch folder, from the spawn on
        self._disk_exceeded: str | None = None  # why the watch stopped the worker, in words
        # state applied by the consumer
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.log = BoundedLog()
        self.errors: list[ErrorEvent] = []
        self.phases: list[PhaseEvent] = []
        self.current_phase: str | None = None
        self.progress: tuple[int, int] = (0, 0)
        self.result_dict: dict[str, Any] | None = None
        self.backend: BackendEvent | None = None
        self.result: Any = None
        self.exit: ExitReport | None = None
        self.outcome: WorkerOutcome | None = None

    # -- starting --------------------------------------------------------------------------------
    def start(self) -> "RunHandle":
        if self.launch():
            self.watch()
        return self

    def launch(self) -> bool:
        """Start the worker process, no thread yet (several forked children are launched before any
        of their threads start). False when it could not start (the events say why)."""
        try:
            self._spawn()
        except (WorkspaceError, OSError) as exc:
            self._start_error = ErrorEvent(kind="start-failed", message=f"could not start the run: {exc}")
            self._exited.set()
            self._exit_at = time.perf_counter()
            if self._scratch is not None:
                self._scratch.remove()
            self._queue.put(_FINISHED)
            return False
        return True

    def watch(self) -> None:
        """Start the threads that read the launched worker's pipes and wait for its exit."""
        if self._fork and self._proc is not None:
            from nkitui.executor.confine import reaping

            reaping.watch(self._proc.pid, self._scratch.root if self._scratch else None)
        threading.Thread(target=self._io_loop, name=f"nkitui-run-io-{self.run_id}", daemon=True).start()
        threading.Thread(target=self._wait_loop, name=f"nkitui-run-wait-{self.run_id}", daemon=True).start()

    def _spawn(self) -> None:
        self._scratch = make_scratch(self.job.workspace)
        kernel_r, kernel_w = os.pipe()
        try:
            job_dict = self.job.to_file_dict(self._scratch.root, self._scratch.work)
            self._scratch.job_path.write_text(json.dumps(job_dict), encoding="utf-8")
            policy = confine.ConfinementPolicy(scratch=self._scratch.root, processes=self.job.allow_subprocess)
            if self.limits.disk_mb or self.limits.max_entries:
                from nkitui.executor.confine.diskwatch import DiskWatch

                self._disk_watch = DiskWatch(self._scratch.root, max_bytes=(self.limits.disk_mb or 1 << 30) << 20,
                                             max_entries=self.limits.max_entries or 1 << 30,
                                             nested_runs=self.job.role == "evaluator")
            python_path = [*self.job.python_path, _PACKAGE_PARENT]
            self._spawned_at = time.perf_counter()
            if self._fork:
                from nkitui.executor import forked

                self._proc = forked.fork_worker(self._scratch.job_path, kernel_w, policy, extra_env=self.job.extra_env,
                                                python_path=python_path, cwd=self._scratch.work, requests=self._requests)
                self._kernel_r = kernel_r
                return
            command = self._command or worker_command(self._scratch.job_path, kernel_w)
            # confine.spawn: own session, parent-death SIGKILL, scrubbed env (HOME/TMPDIR in the
            # scratch folder), forked on the spawner thread and watched by the reaper
            self._proc = confine.spawn(
                command, policy, extra_env=self.job.extra_env, python_path=python_path,
                stdin=subprocess.PIPE if self._requests else subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(kernel_w,), cwd=self._scratch.work, bufsize=0,
            )
        except BaseException:
            os.close(kernel_r)
            raise
        finally:
            os.close(kernel_w)
        self._kernel_r = kernel_r

    # -- the I/O thread --------------------------------------------------------------------------
    def _put(self, item: Any) -> None:
        while not self._abandoned.is_set():
            try:
                self._queue.put(item, timeout=0.25)
                return
            except queue.Full:
                continue

    def _io_loop(self) -> None:
        """Read the worker's three pipes until they close; then, once the waiter says the worker is gone,
        remove the scratch folder and end the stream. Whatever fails on the way, the stream ends (a
        consumer waiting for the end must never wait for ever) with an internal error that says what."""
        try:
            self._read_pipes()
        except BaseException as exc:  # noqa: BLE001 - reported as the run's error, never lost
            self._internal_error("reading the worker's output", exc)
        finally:
            try:
                self._exited.wait()
                if self._scratch is not None:
                    self._scratch.remove()  # the worker and its process group are gone
                    if os.path.lexists(self._scratch.root):
                        self._put([LogEvent("executor", f"[nkitui] could not remove the scratch folder {self._scratch.root}", "warning")])
                if self._proc is not None:
                    confine.release(self._proc.pid)  # the reaper has nothing left to clean for this run
            except BaseException as exc:  # noqa: BLE001
                self._internal_error("cleaning up after the worker", exc)
            finally:
                self._put(_FINISHED)

    def _internal_error(self, doing: str, exc: BaseException) -> None:
        """A failure of nkitui's own threads: the worker is stopped and the run says what happened (an
        internal error is never a pass: the evaluation misses the phases it needs)."""
        self._kill_group(signal.SIGKILL)
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
        self._put([ErrorEvent(kind="internal", message=f"nkitui failed while {doing}: {type(exc).__name__}: {exc}{at}")])

    def _read_pipes(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None and self._proc.stderr is not None
        assert self._kernel_r is not None  # _spawn opened it before the process started
        sel = selectors.DefaultSelector()
        parsers: dict[int, tuple[str, Any]] = {
            self._proc.stdout.fileno(): ("events", _EventStreamParser()),
            self._kernel_r: ("stdout", StreamLimiter("stdout")),
            self._proc.stderr.fileno(): ("stderr", StreamLimiter("stderr")),
        }
        for fd in parsers:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        open_fds = set(parsers)
        after_exit = 0
        try:
            while open_fds and not self._abandoned.is_set():
                ready = sel.select(timeout=0.25)
                if self._exit_at is not None and (
                    after_exit > DRAIN_AFTER_EXIT_BYTES
                    or not ready and time.perf_counter() - self._exit_at > DRAIN_AFTER_EXIT_S
                ):
                    self._put([LogEvent("executor", "[nkitui] a process started by the kernel kept the output open after the worker exited; stopped reading", "warning")])
                    break
                for key, _ in ready:
                    fd = key.fd
                    name, parser = parsers[fd]
                    try:
                        data = os.read(fd, READ_CHUNK)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if self._exit_at is not None:
                        after_exit += len(data)
                    if not data:
                        sel.unregister(fd)
                        open_fds.discard(fd)
                        batch = parser.finish()
                        self._stream_bytes[name] = parser.total_bytes
                    else:
                        batch = parser.feed(data)
                    if name == "events" and batch and self._first_event_at is None:
                        self._first_event_at = time.perf_counter()
                    if name == "events" and self._observed is None and any(
                            isinstance(ev, LogEvent) and confine.is_report_line(ev) for ev in batch):
                        self._observed = confine.observe(self._proc.pid)  # /proc, not the child's word
                        self._watch_free_space_unless_landlock(batch)
                    if name == "stderr":
                        for ev in batch:
                            if ev.stream == "stderr":
                                self._stderr_tail.append(ev.text)
                    if batch:
                        self._put(batch)
        finally:
            sel.close()
            for fd in list(parsers):
                if fd == self._kernel_r:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

    def _watch_free_space_unless_landlock(self, batch: list[Event]) -> None:
        """A worker confined without Landlock can write outside its scratch folder: the disk watch then
        also watches the free space of the filesystems it could reach."""
        if self._disk_watch is None:
            return
        line = next(ev.text for ev in batch if isinstance(ev, LogEvent) and confine.is_report_line(ev))
        active = line.removeprefix("sandbox: ").split(";")[0].split(", ") if line.startswith("sandbox: ") else []
        if "landlock" not in active:
            self._disk_watch.watch_free_space(os.environ.get("HOME"))

    # -- the waiter thread -----------------------------------------------------------------------
    def _wait_loop(self) -> None:
        """Wait for the worker's exit (stopping it at its timeout or disk budget); whatever fails on the
        way, the worker's process group is killed and `_exited` is set (the I/O thread waits for it)."""
        try:
            self._wait_for_exit()
        except BaseException as exc:  # noqa: BLE001 - reported as the run's error, never lost
            self._internal_error("watching the worker", exc)
            try:
                if self._proc is not None:
                    self._proc.wait(timeout=30)
            except BaseException:  # noqa: BLE001, S110 - SIGKILLed already; the reaper has its pid
                pass
        finally:
            if self._exit_at is None:
                self._exit_at = time.perf_counter()
            self._kill_group(signal.SIGKILL)  # stragglers the kernel started
            self._exited.set()

    def _wait_for_exit(self) -> None:
        assert self._proc is not None
        timeout = self.limits.timeout_s if self.limits.timeout_s and self.limits.timeout_s > 0 else None
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = self._disk_watch
        from nkitui.executor.confine.diskwatch import POLL_S

        while True:
            step = None if watch is None else POLL_S
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                step = left if step is None else min(step, left)
            try:
                self._proc.wait(timeout=step)
                break
            except subprocess.TimeoutExpired:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                self._timed_out = True
                self._terminate()
                self._proc.wait()
                break
            why = watch.check(self._proc.pid) if watch is not None else None
            if why is not None:  # over its disk budget: stopped at once, nothing of it is worth saving
                self._disk_exceeded = why
                self._kill_group(signal.SIGKILL)
                self._proc.wait()
                break
        self._exit_at = time.perf_counter()

    def _kill_group(self, sig: int) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _terminate(self) -> None:
        """SIGTERM to the worker's process group; SIGKILL if it is still there after the grace period."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._kill_group(signal.SIGTERM)
        try:
            self._proc.wait(timeout=self.limits.grace_s)
        except subprocess.TimeoutExpired:
            self._kill_group(signal.SIGKILL)

    # -- control ---------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> bool:
        """Write one JSON line to the worker's stdin (handles started with `requests=True`).
        False when the worker is gone (its stdin is closed)."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return False
        data = (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the worker's process group now, without the grace period (for untrusted children,
        which have nothing to save)."""
        with self._lock:
            if self._exited.is_set():  # its process group id may belong to someone else by now
                return
            self._cancel_requested = True
        self._kill_group(signal.SIGKILL)

    def cancel(self) -> None:
        """Stop the run (returns at once). The events stream ends with a 'cancelled' error."""
        with self._lock:
            if self._cancel_requested or self._exited.is_set():
                return
            self._cancel_requested = True
        threading.Thread(target=self._terminate, name=f"nkitui-run-cancel-{self.run_id}", daemon=True).start()

    def close(self) -> None:
        """Cancel if running and stop delivering events (for a consumer that goes away)."""
        self.cancel()
        self._abandoned.set()

    # -- status ----------------------------------------------------------------------------------
    @property
    def observed(self) -> dict[str, Any] | None:
        """What /proc showed of the worker's confinement once it said it was confined (confine.observe):
        the parent's own evidence, not the worker's claim."""
        return self._observed

    @property
    def scratch(self) -> Scratch | None:
        """The run's scratch folder (removed once the worker has exited)."""
        return self._scratch

    @property
    def cancel_requested(self) -> bool:
        """Did this process ask for the stop (cancel(), or the timeout's SIGTERM)?"""
        return self._cancel_requested or self._timed_out

    @property
    def forked(self) -> bool:
        """Was the worker forked from this process (nkitui.executor.forked) rather than exec'd?"""
        return self._fork

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def done(self) -> bool:
        """True once the consumer has received the last event (with on_event: after the callback
        for the final ResultEvent returned)."""
        return self._delivered.is_set()

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    @property
    def startup_s(self) -> float | None:
        """Seconds from spawning the worker to its first event."""
        if self._first_event_at is None:
            return None
        return self._first_event_at - self._spawned_at

    @property
    def status(self) -> str:
        """starting | running | cancelling | <final>, where <final> is the result's status when
        there is one (e.g. passed / failed) or the exit kind (timeout, cancelled, crash, ...)."""
        if self._finished.is_set():
            final = getattr(self.result, "status", None)
            if isinstance(final, str):
                return final
            if isinstance(self.result_dict, dict) and self.result_dict.get("status"):
                return str(self.result_dict["status"])
            if self.exit is not None:
                return self.exit.kind
            return "finished"
        if self._cancel_requested:
            return "cancelling"
        return "running" if self._first_event_at is not None else "starting"

    # -- consuming -------------------------------------------------------------------------------
    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Yield events until the run is over. The worker's result event is held back and
        delivered last (after the finalizer completed it); when the worker died without saying
        why, the parent adds an ErrorEvent in words. `timeout` bounds each wait for the next
        batch (queue.Empty is raised when it passes). State (log, phases, progress) is applied
        one batch at a time, just before the batch's events are yielded; the lock is never held
        while the consumer runs, so an abandoned iterator cannot block a later events()/wait()."""
        while True:
            final = False
            with self._consumer_lock:
                if self._finished.is_set():
                    self._delivered.set()
                    return
                batch = self._next_batch(timeout)
                if batch is None:  # close()d: the I/O thread delivers nothing more, not even the end
                    return
                if batch is _FINISHED:
                    out = self._finish()
                    final = True
                else:
                    out = []
                    for ev in batch:
                        self._apply(ev)
                        if not isinstance(ev, ResultEvent):  # the result comes last, after finishing
                            out.append(ev)
            yield from out
            if final:
                self._delivered.set()  # `done` only once the consumer has had the last event
                return

    def _next_batch(self, timeout: float | None) -> Any:
        """The next batch (queue.Empty once `timeout` has passed), or None when the handle was closed
        meanwhile: an iteration blocked on another thread (a spare kernel process's) ends then
        instead of waiting for ever for the end, which the I/O thread of a closed handle never sends."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _CLOSED_POLL_S if deadline is None else min(_CLOSED_POLL_S, max(0.0, deadline - time.monotonic()))
            try:
                return self._queue.get(timeout=step)
            except queue.Empty:
                if self._abandoned.is_set():
                    return None
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def wait(self, timeout: float | None = None) -> Any:
        """Consume every event (discarding them) until the run is over; returns `result`.
        Returns None when `timeout` passes first (the run goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for _ in self.events(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())):
                if deadline is not None and time.monotonic() > deadline:
                    return None
        except queue.Empty:
            return None
        return self.result

    def _apply(self, ev: Event) -> None:
        if isinstance(ev, LogEvent):
            self.log.append(ev)
        elif isinstance(ev, PhaseEvent):
            for line in log_lines_of(ev):  # the stored log reads as the live one (app-core)
                self.log.append(line)
            if ev.state == "start":
                self.current_phase = ev.name
            else:
                self.phases.append(ev)
                if self.current_phase == ev.name:
                    self.current_phase = None
        elif isinstance(ev, ProgressEvent):
            self.progress = (ev.done, ev.total)
        elif isinstance(ev, ErrorEvent):
            self.errors.append(ev)
            for line in log_lines_of(ev):
                self.log.append(line)
        elif isinstance(ev, ResultEvent):
            self.result_dict = ev.result
        elif isinstance(ev, BackendEvent):
            self.backend = ev

    def _crash_location(self) -> tuple[str, int] | None:
        if self._scratch is None:
            return None
        roots = (str(self._scratch.work) + os.sep, os.path.realpath(self._scratch.work) + os.sep)
        for text in self._stderr_tail:  # faulthandler prints the most recent call first
            m = _FRAME_RE.search(text)
            if m:
                for root in roots:
                    if m.group("file").startswith(root):
                        return m.group("file")[len(root):], int(m.group("line"))
        return None

    def _finish(self) -> list[Event]:
        self._exited.wait()
        proc_rc = self._proc.returncode if self._proc is not None else None
        end = self._exit_at if self._exit_at is not None else time.perf_counter()
        elapsed = end - self._spawned_at if self._spawned_at else 0.0
        memory_seen = any(e.kind == "memory-limit" for e in self.errors)
        if self._start_error is not None:
            report = ExitReport("start-failed", self._start_error.message, None)
        else:
            report = describe_exit(proc_rc, self.limits, cancelled=self._cancel_requested, timed_out=self._timed_out,
                                   elapsed_s=elapsed, memory_error_seen=memory_seen, disk_exceeded=self._disk_exceeded)
        self.exit = report
        self.ended_at = time.time()
        crash = self._crash_location()
        final: list[Event] = []
        # the worker's own "cancelled" only knows that SIGTERM came; the parent knows why (a cancel, the timeout)
        already = {e.kind for e in self.errors if e.kind != "cancelled"}
        abnormal = report.kind not in ("ok", "failed", "invalid")
        if self._start_error is not None:
            final.append(self._start_error)
        elif abnormal and report.kind not in already:
            file, line = crash if crash else (None, None)
            message = f"the run {report.message}"
            if file:
                message += f"; the last kernel line on the stack was {file}:{line}"
            final.append(ErrorEvent(kind=report.kind, message=message, file=file, line=line))
        for ev in final:
            self._apply(ev)
        self.outcome = WorkerOutcome(
            run_id=self.run_id, exit=report, limits=self.limits, result=self.result_dict, errors=list(self.errors),
            phases=list(self.phases), log=self.log, started_at=self.started_at, ended_at=self.ended_at,
            elapsed_s=elapsed, startup_s=self.startup_s, stream_bytes=dict(self._stream_bytes), crash_location=crash,
            backend=self.backend, confinement=self._observed,
        )
        if self._finalizer is not None:
            try:
                self.result, extra = self._finalizer(self.outcome)
            except Exception as exc:  # noqa: BLE001 - a finalizer bug must not lose the run
                self.result = self.result_dict
                extra = [ErrorEvent(kind="internal", message=f"nkitui could not finish the run's result: {type(exc).__name__}: {exc}")]
            for ev in extra:
                self._apply(ev)
            final.extend(extra)
        else:
            self.result = self.result_dict
            if self.result_dict is not None:
                final.append(ResultEvent(self.result_dict))
        self._cleanup()
        self._finished.set()
        return final

    def _cleanup(self) -> None:
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr) if self._proc else ():
            if stream is None:
                continue
            try:
                stream.close()
            except OSError:
                pass


def start_worker(
    job: WorkerJob,
    *,
    finalizer: Callable[[WorkerOutcome], tuple[Any, list[Event]]] | None = None,
    on_event: Callable[[Event], None] | None = None,
    command: list[str] | None = None,
    requests: bool = False,
) -> RunHandle:
    """Start one worker run. With `on_event`, a dispatcher thread consumes the events and calls it
    for each (exceptions in the callback are logged, never fatal); otherwise iterate
    `handle.events()` or call `handle.wait()`. `requests`: keep a pipe on the worker's stdin for
    `handle.send()`."""
    handle = RunHandle(job, finalizer=finalizer, command=command, requests=requests).start()
    if on_event is not None:
        def dispatch() -> None:
            for ev in handle.events():
                try:
                    on_event(ev)
                except Exception as exc:  # noqa: BLE001
                    handle.log.append(LogEvent("executor", f"[nkitui] event callback failed: {type(exc).__name__}: {exc}", "error"))

        threading.Thread(target=dispatch, name=f"nkitui-run-dispatch-{handle.run_id}", daemon=True).start()
    return handle

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
    EventTooDeep,
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
MAX_UNTRUSTED_EVENT_LINE = 8 << 20  # an untrusted child's line longer than this stops it (replies are KBs)
UNTRUSTED_LOG_EVENTS = 2000  # log events an untrusted child's stream shows before they are elided
UNTRUSTED_MAX_LOG_EVENTS = 20_000  # log events before an untrusted child is stopped (each costs a JSON parse)
UNTRUSTED_OTHER_EVENTS = 1000  # events beyond one per reply before an untrusted child is stopped
UNTRUSTED_OTHER_BYTES = 16 << 20  # bytes of such events (a sandbox record per reply is ~100 KB at most) ...
UNTRUSTED_BYTES_PER_REPLY = 1 << 20  # ... plus this much per reply
MAX_LOG_TEXT = 4096  # an untrusted child's log event text is cut here (logbuffer.MAX_LINE)
DRAIN_AFTER_EXIT_S = 2.0  # idle time after the worker's exit before giving up on open pipes
DRAIN_AFTER_EXIT_BYTES = 4 << 20  # pipes buffer 64 KB each: more than this after exit is a straggler
DRAIN_AFTER_EXIT_MAX_S = 10.0  # however the pipes trickle after the worker's exit, reading ends by then
EVENTS_CLOSED_GRACE_S = 3.0  # a worker that closed its event stream and has not exited by then is stopped
STOPPED_CHECKS = 2  # consecutive looks (POLL_S apart) that find the worker stopped (SIGSTOP) before it is killed
_FINISHED = object()
_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _process_state(pid: int) -> str:
    """The state letter of process `pid` in /proc (R, S, D, T, t, Z, ...), or "" when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return ""
    after = stat.rpartition(b")")[2].split()  # the name in parentheses may hold spaces and ")"
    return after[0].decode("ascii", "replace") if after else ""


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
    Each complete run of lines is decoded once (a UTF-8 sequence never spans a newline); a line still
    arriving is gathered in a bytearray, so a line of many chunks costs linear time, never a copy of
    everything so far per chunk (a 60 MB line cost 25 s of CPU that way).

    `untrusted` (a child that runs task code, read by the evaluator): what it sends is bounded here,
    and what no honest child sends makes `refused` say why, so the reader stops it at once instead of
    spending the run's time (or its memory, or the starter's) on it:
      * a line longer than MAX_UNTRUSTED_EVENT_LINE, or an event nested deeper than events.MAX_DEPTH;
      * more than UNTRUSTED_OTHER_EVENTS events beyond one per reply (errors, phases, progress, results,
        backends, data of other kinds: nkitui's server in the child sends a handful, a flood is task code),
        or more than UNTRUSTED_OTHER_BYTES of them (+ UNTRUSTED_BYTES_PER_REPLY per reply), or more than
        UNTRUSTED_MAX_LOG_EVENTS log events, or as many lines that are not events;
    and its log events (nkitui's own lines in the child: a few) are shown like a kernel's output: the
    first UNTRUSTED_LOG_EVENTS lines of at most MAX_LOG_TEXT characters, then elided with a marker."""

    def __init__(self, untrusted: bool = False) -> None:
        self.partial = bytearray()
        self.dropping = False  # inside a line already found too long: skipped up to its newline
        self.text = StreamLimiter("worker")
        self.total_bytes = 0
        self.untrusted = untrusted
        self.max_line = MAX_UNTRUSTED_EVENT_LINE if untrusted else MAX_EVENT_LINE
        self.refused: str | None = None  # why an untrusted child must be stopped (set once)
        self.replies = 0
        self.others = 0
        self.logs_shown = 0
        self.logs_elided = 0
        self.stray = 0  # lines that are not events
        self.other_bytes = 0  # bytes of events that are not replies

    def feed(self, data: bytes) -> list[Event]:
        self.total_bytes += len(data)
        if self.refused is not None:  # the child is being stopped: nothing more of it is read as events
            return []
        out: list[Event] = []
        cut = data.rfind(b"\n")
        if cut < 0:
            self._gather(data, out)
            return out
        first = data.find(b"\n")  # where the line in progress ends
        complete: bytes | None  # the complete lines of this chunk, None when there are none
        if self.dropping:  # the rest of a line already found too long: skipped
            self.dropping = False
            complete = data[first + 1:cut] if first < cut else None
        elif len(self.partial) + first > self.max_line:
            out.extend(self._too_long())
            complete = data[first + 1:cut] if first < cut else None
        else:
            complete = bytes(self.partial) + data[:cut]
        self.partial = bytearray()
        if complete is not None:
            self._fold(out, complete.decode("utf-8", errors="replace").split("\n"))
        if self.refused is None:
            self._gather(data[cut + 1:], out)
        return out

    def _gather(self, piece: bytes, out: list[Event]) -> None:
        """Keep the start of a line still arriving (or skip it: inside a line already too long)."""
        if self.dropping or not piece:
            return
        self.partial += piece
        if len(self.partial) > self.max_line:
            self.partial = bytearray()
            self.dropping = True
            out.extend(self._too_long())

    def _fold(self, out: list[Event], lines: list[str]) -> None:
        for line in lines:
            if self.refused is not None:
                break
            if len(line) > self.max_line:  # (a long line inside one chunk's complete lines)
                out.extend(self._too_long())
                continue
            try:
                ev = parse_line(line, strict=self.untrusted)
            except EventTooDeep as exc:
                self.refused = f"it sent {exc} on its event stream"
                out.append(LogEvent("executor", f"[nkitui] {self.refused}: stopped", "warning"))
                break
            if ev is None:
                if self.untrusted:
                    self.stray += 1
                    if self.stray > UNTRUSTED_MAX_LOG_EVENTS:  # each costs a look (and a JSON parse, if it starts so)
                        self.refused = (f"it wrote more than {UNTRUSTED_MAX_LOG_EVENTS:,} lines that are not events on "
                                        "its event stream (a flood)")
                        out.append(LogEvent("executor", f"[nkitui] {self.refused}: stopped", "warning"))
                        break
                out.extend(self.text.feed(line.encode("utf-8") + b"\n"))  # not an event: bounded like kernel output
            elif not self.untrusted:
                out.append(_redacted(ev))
            else:
                kept = self._bounded(ev, len(line))
                if kept is not None:
                    out.append(_redacted(kept))

    def _too_long(self) -> list[Event]:
        limit = f"{self.max_line >> 20} MB"
        if self.untrusted:
            if self.refused is None:
                self.refused = f"it sent an event line longer than {limit} on its event stream"
            return [LogEvent("executor", f"[nkitui] {self.refused}: stopped", "warning")]
        return [LogEvent("executor", f"[nkitui] dropped an event line longer than {limit}", "warning")]

    def _bounded(self, ev: Event, size: int) -> Event | None:
        """An untrusted child's event within its budget (see the class), else None (elided) or `refused`."""
        from dataclasses import replace

        if not (isinstance(ev, DataEvent) and ev.kind == "reply"):
            self.other_bytes += size  # parsed and walked at a cost per token: bounded in bytes too
            if self.other_bytes > UNTRUSTED_OTHER_BYTES + UNTRUSTED_BYTES_PER_REPLY * self.replies:
                self.refused = (f"it sent more than {self.other_bytes >> 20} MB of events that answer no request on "
                                "its event stream (a flood)")
                return LogEvent("executor", f"[nkitui] {self.refused}: stopped", "warning")

        if isinstance(ev, LogEvent):
            if self.logs_shown >= UNTRUSTED_LOG_EVENTS:
                self.logs_elided += 1
                if self.logs_shown + self.logs_elided > UNTRUSTED_MAX_LOG_EVENTS:
                    self.refused = (f"it sent more than {UNTRUSTED_MAX_LOG_EVENTS:,} log events on its event stream (a "
                                    "flood: nkitui's own code there logs a few lines; a kernel's prints go to stdout)")
                    return LogEvent("executor", f"[nkitui] {self.refused}: stopped", "warning")
                return None
            self.logs_shown += 1
            return ev if len(ev.text) <= MAX_LOG_TEXT else replace(ev, text=ev.text[:MAX_LOG_TEXT] + " …")
        if isinstance(ev, DataEvent) and ev.kind == "reply":
            self.replies += 1
            return ev
        self.others += 1
        if self.others > UNTRUSTED_OTHER_EVENTS + self.replies:
            self.refused = (f"it sent more than {UNTRUSTED_OTHER_EVENTS:,} events that answer no request on its event "
                            "stream (a flood)")
            return LogEvent("executor", f"[nkitui] {self.refused}: stopped", "warning")
        if isinstance(ev, ErrorEvent) and (len(ev.message) > MAX_LOG_TEXT or len(ev.traceback) > 10 * MAX_LOG_TEXT):
            return replace(ev, message=ev.message[:MAX_LOG_TEXT], traceback=ev.traceback[:10 * MAX_LOG_TEXT])
        return ev

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self.partial and not self.dropping:
            out.extend(self.feed(b"\n"))
        self.partial = bytearray()
        out.extend(self.text.finish())
        if self.logs_elided:
            out.append(LogEvent("executor", f"[nkitui] … {self.logs_elided:,} more log events of the worker elided "
                                            f"(the first {UNTRUSTED_LOG_EVENTS:,} are shown) …", "warning"))
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
        # why nkitui itself stopped the worker for what it did (a flood, a stop signal, ...), and the exit kind
        # that says so; told in the exit report instead of "killed by SIGKILL from outside nkitui"
        self._stopped: tuple[str, str] | None = None
        self._events_closed_at: float | None = None  # when the worker's event stream ended
        self._seen_stopped = 0
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
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
        message = f"nkitui failed while {doing}: {type(exc).__name__}: {exc}{at}"
        self._stop(message, kind="internal")
        self._put([ErrorEvent(kind="internal", message=message)])

    def _stop(self, why: str, kind: str = "crash") -> None:
        """nkitui stops the worker (SIGKILL to its group) because of what it did, `why` in words; its exit
        is then told as that (`kind`: "crash" for what the worker did, "internal" for nkitui's own failure)."""
        with self._lock:
            if self._stopped is None:
                self._stopped = (kind, why)
            if self._exited.is_set():  # its process group id may belong to someone else by now
                return
        self._kill_group(signal.SIGKILL)

    def _read_pipes(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None and self._proc.stderr is not None
        assert self._kernel_r is not None  # _spawn opened it before the process started
        sel = selectors.DefaultSelector()
        parsers: dict[int, tuple[str, Any]] = {
            self._proc.stdout.fileno(): ("events", _EventStreamParser(untrusted=self.job.role == "untrusted")),
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
                    or time.perf_counter() - self._exit_at > DRAIN_AFTER_EXIT_MAX_S  # a slow trickle, never idle
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
                        if name == "events":
                            self._events_closed_at = time.perf_counter()
                    else:
                        batch = parser.feed(data)
                    if name == "events" and parser.refused is not None and self._stopped is None:
                        self._stop(parser.refused)  # an untrusted child that sent what no honest one does
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
            step: float | None = POLL_S  # also when no disk watch: a stopped worker or a closed stream is noticed
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
            why = self._why_stuck()
            if why is not None:  # it can never say anything more: stopped now, not at the run's timeout
                self._stop(why)
                self._proc.wait()
                break
        self._exit_at = time.perf_counter()

    def _why_stuck(self) -> str | None:
        """Why the (still running) worker can never finish its run, in words, or None: it stopped itself
        (SIGSTOP: no signal but SIGKILL and SIGCONT moves it again, and a run waiting for it would wait
        until its timeout, or for ever for a child without one), or it closed its event stream and kept
        running (it cannot answer or report any more)."""
        assert self._proc is not None
        if _process_state(self._proc.pid) == "T":
            self._seen_stopped += 1
            if self._seen_stopped >= STOPPED_CHECKS:
                return "it stopped itself (SIGSTOP or another stop signal): a stopped process can never answer"
        else:
            self._seen_stopped = 0
        closed = self._events_closed_at
        if closed is not None and time.perf_counter() - closed > EVENTS_CLOSED_GRACE_S:
            return (f"it closed its event stream and was still running {EVENTS_CLOSED_GRACE_S:g} s later (it can "
                    "no longer answer or report)")
        return None

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

    def stop(self, why: str) -> None:
        """SIGKILL the worker's process group now because of what it did (`why`, in words: the run's exit
        says "was stopped by nkitui: <why>", a crash, never a cancel or a kill from outside)."""
        self._stop(why)

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
                                   elapsed_s=elapsed, memory_error_seen=memory_seen, disk_exceeded=self._disk_exceeded,
                                   stopped=self._stopped)
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

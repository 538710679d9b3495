"""The evaluator's side of its untrusted children (nkitui.executor.untrusted): requests, replies, and
everything else a child sends, read as data.

    child = UntrustedChild("kernel", spawn_untrusted(...), ctx)
    child.ready()                                       # its confinement report (the first one only)
    reply = child.request("run", inputs=[...], precise=True)
    outputs = child.arrays(reply, "outputs", names)     # plain .npy, checked before reading

What a child may not do, and what happens when it tries: a `result` event is ignored (and noted);
`phase`/`progress`/`backend` events are ignored (and noted) — the evaluator reports its own; log
lines become the kernel's output in the evaluator's log; a reply is accepted only for the request
just sent (ids are random); a child that ends without answering raises ChildGone, with its exit
told in words. Arrays are read with allow_pickle=False, their headers checked first.
"""

from __future__ import annotations

import os
import queue
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nkitui.executor.context import WorkerContext
from nkitui.executor.events import (
    BackendEvent,
    DataEvent,
    ErrorEvent,
    Event,
    LogEvent,
    PhaseEvent,
    ProgressEvent,
    ResultEvent,
)
from nkitui.executor.runner import RunHandle
from nkitui.executor.workspace import remove_beneath

KERNEL_ENTRY = "nkitui.executor.untrusted.kernel:serve"
_NEW_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
REFERENCE_ENTRY = "nkitui.executor.untrusted.reference:serve"


class ChildGone(BaseException):
    """The child ended before answering; `error` tells how (crash, limit, a silent exit). A
    BaseException, so numerics steps that tolerate a failed call (`except Exception`) do not mistake
    a dead process for one bad input: it stops the run."""

    def __init__(self, error: ErrorEvent, status: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = status  # the run status it leads to: crashed, memory-limit, cpu-limit, killed


class ChildReplyError(Exception):
    """The child answered with something the evaluator cannot use (a missing or forged array)."""


_STATUS = {"crash": "crashed", "memory-limit": "memory-limit", "cpu-limit": "cpu-limit", "killed": "killed",
           "disk-limit": "crashed",  # the disk watch stopped it (a status of its own would change the contract)
           "timeout": "timeout", "cancelled": "cancelled", "internal": "internal-error"}
CLOSE_GRACE_S = 5.0  # how long a child asked to leave may take before it is killed
MAX_FORGED_REPLIES = 100  # replies to no request before the child is stopped (20 are recorded; more is a flood)


class _Janitor:
    """Removes folders on one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Path, Path]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def remove(self, root: Path, rel: Path) -> None:
        self._queue.put((root, rel))
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nkitui-janitor", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            root, rel = self._queue.get()
            try:
                remove_beneath(root, rel)
            except Exception:  # noqa: BLE001, S110 - the run's removal of the whole scratch folder comes later anyway
                pass  # one folder a child made hard to remove must not end the thread that removes the others


_JANITOR = _Janitor()


class UntrustedChild:
    def __init__(self, role: str, handle: RunHandle, ctx: WorkerContext) -> None:
        self.role = role  # "kernel" | "reference"
        self.handle = handle
        self.ctx = ctx
        self._events: Iterator[Event] = handle.events()
        self.confinement: dict[str, Any] | None = None
        self.violations: list[dict[str, Any]] = []
        self.errors: list[ErrorEvent] = []
        self.notes: list[str] = []
        self._ignored: set[str] = set()
        self._seq = 0
        self._gone: ChildGone | None = None
        # replies that answered no pending request: task code writing to the event descriptor (the
        # reply is in the process's words; only nkitui's server answers exactly once, with the id sent)
        self.forgeries: list[dict[str, Any]] = []
        self._forged = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def ready(self) -> dict[str, Any]:
        """Wait for the confinement report the child sends before it imports any task code."""
        while self.confinement is None:
            self._next(None)
        return self.confinement

    def close(self) -> None:
        """Ask the child to leave, read what it still says (for at most CLOSE_GRACE_S: a child that does not
        leave is killed, so a verdict already computed is never lost to the run's timeout), and make sure it
        is gone."""
        if self._gone is None and self.handle.running:
            self.handle.send({"op": "exit"})
            overdue = threading.Event()

            def kill_overdue() -> None:
                overdue.set()
                self.handle.kill()

            deadline = threading.Timer(CLOSE_GRACE_S, kill_overdue)
            deadline.daemon = True
            deadline.start()
            try:
                for ev in self._events:
                    self._take(ev, None)
            except ChildGone:
                pass
            finally:
                deadline.cancel()
            if overdue.is_set():
                self._note_once("exit", f"the {self.role} process did not leave within {CLOSE_GRACE_S:g} s of being "
                                        "asked (after its last answer); it was killed")
        self.handle.kill()
        self.handle.close()

    def kill(self) -> None:
        self.handle.kill()
        self.handle.close()

    # -- requests -------------------------------------------------------------------------------
    def folder(self) -> tuple[str, Path]:
        """A fresh request id and its folder in the child's scratch (in/ for the evaluator's arrays).
        The id is a secret of the request line: the folder is named by the sequence number only, so
        task code that lists the scratch folder cannot address a forged reply to the request."""
        self._seq += 1
        rid = f"{self._seq}-{secrets.token_hex(16)}"
        scratch = self.handle.scratch
        if scratch is None:
            raise self._died()
        folder = scratch.root / "io" / str(self._seq)
        from nkitui.executor.workspace import open_dir_beneath

        try:  # never through a link the child planted (io/ -> a folder outside): the evaluator is not confined
            io = open_dir_beneath(scratch.root, "io", create=True)
        except OSError as exc:
            raise self._tampered(f"its request folder io/{self._seq}/in could not be made without following a "
                                 f"link ({exc.strerror or exc}): task code replaced a folder of its scratch folder "
                                 "with a link") from None
        try:
            # a new folder, made here: the sequence numbers are easy to guess, and a link or FIFO planted in a
            # request folder ahead of time (io/7/in/0-a.npy -> ~/.bashrc) was followed by the evaluator's
            # writes of the inputs, outside any sandbox
            os.mkdir(str(self._seq), 0o700, dir_fd=io)
            inner = os.open(str(self._seq), _NEW_DIR_FLAGS, dir_fd=io)
            try:
                os.mkdir("in", 0o700, dir_fd=inner)
            finally:
                os.close(inner)
        except FileExistsError:
            raise self._tampered(f"its next request folder io/{self._seq} existed before nkitui made it: task code "
                                 "planted it (what it holds would be written through by the evaluator)") from None
        except OSError as exc:
            raise self._tampered(f"its request folder io/{self._seq}/in could not be made ({exc.strerror or exc}): "
                                 "task code changed its scratch folder") from None
        finally:
            os.close(io)
        return rid, folder

    @property
    def scratch_root(self) -> Path | None:
        """The root of the child's scratch folder: where every read of what the child wrote starts
        (nkitui.executor.workspace.read_beneath follows no link below it)."""
        scratch = self.handle.scratch
        return scratch.root if scratch is not None else None

    def _tampered(self, why: str) -> ChildGone:
        """The child planted a link for the evaluator to follow: stopped at once, recorded as a sandbox
        violation (the `sandbox` check fails), the run ends crashed with the reason."""
        if len(self.forgeries) < 20:
            self.forgeries.append({"action": "link", "target": "the scratch folder", "file": None, "line": None,
                                   "detail": f"the {self.role} process: {why}"})
        self.handle.kill()
        if self._gone is None:
            self._gone = ChildGone(ErrorEvent("sandbox", f"the {self.role} process was stopped: {why}"), "crashed")
        return self._gone

    def request(self, op: str, *, rid: str | None = None, folder: Path | None = None, **fields: Any) -> dict[str, Any]:
        return self.answer(self.ask(op, rid=rid, folder=folder, **fields))

    def ask(self, op: str, *, rid: str | None = None, folder: Path | None = None, **fields: Any) -> str:
        """Send a request without waiting for its reply (`answer` waits): a fresh kernel process imports the
        kernel while the evaluator goes on. Its reply is the next one it sends; nothing else is asked meanwhile."""
        if rid is None:
            rid, folder = self.folder()
        message: dict[str, Any] = {"op": op, "id": rid, **fields}
        if folder is not None:
            message["dir"] = str(folder)
        if self._gone is not None or not self.handle.send(message):
            raise self._died()
        return rid

    def answer(self, rid: str) -> dict[str, Any]:
        """The reply to the request `ask` sent (ChildGone when the child ends first)."""
        while True:
            reply = self._next(rid)
            if reply is not None:
                return reply

    def forget(self, folder: Path) -> None:
        """Drop a request's files once they have been read (the scratch folder stays small). The
        removal happens on a background thread: the evaluator's next request does not wait for it; it
        follows no link the child planted (workspace.remove_beneath)."""
        root = self.scratch_root
        if root is not None and folder.is_relative_to(root):
            _JANITOR.remove(root, folder.relative_to(root))

    # -- what the child says ----------------------------------------------------------------------
    def _next(self, rid: str | None) -> dict[str, Any] | None:
        try:
            ev = next(self._events)
        except StopIteration:
            raise self._died() from None
        return self._take(ev, rid)

    def _take(self, ev: Event, rid: str | None) -> dict[str, Any] | None:
        if isinstance(ev, LogEvent):
            self._forward(ev)
        elif isinstance(ev, DataEvent):
            if ev.kind == "reply":
                if rid is not None and ev.data.get("id") == rid:
                    return ev.data
                self._forged_reply(ev.data.get("id"))
            elif ev.kind == "confinement":
                if self.confinement is None:  # the first report only: later ones come after task code ran
                    self.confinement = dict(ev.data)
                else:
                    self._note_once("confinement", f"the {self.role} process sent another confinement report after "
                                                   "its task code ran; only the first one counts")
            elif ev.kind == "sandbox":
                violations = ev.data.get("violations")
                if isinstance(violations, list):
                    self.violations = [v for v in violations if isinstance(v, dict)][:100]
        elif isinstance(ev, ResultEvent):
            self._note_once("result", f"the {self.role} process sent a result event; results from a process that "
                                      "ran task code are ignored (the evaluator builds the result)")
        elif isinstance(ev, (PhaseEvent, ProgressEvent, BackendEvent)):
            self._note_once(ev.event, f"the {self.role} process sent {ev.event} events; they are ignored (the "
                                      "evaluator reports its own phases and progress)")
        elif isinstance(ev, ErrorEvent):
            self.errors.append(ev)
        return None

    def _forged_reply(self, got: Any) -> None:
        """A reply to no pending request: nkitui's server answers each request once, with its id, so
        this is task code writing on the event descriptor (a forged answer, or the real one after a
        forged one was taken). It fails the run's sandbox check."""
        if len(self.forgeries) < 20:
            self.forgeries.append({
                "action": "forgery", "target": "the event descriptor", "file": None, "line": None,
                "detail": f"the {self.role} process sent a reply to no pending request: task code wrote on the "
                          "evaluator's event descriptor"})
        self._note_once("forgery", f"the {self.role} process sent a reply to no pending request: task code wrote on "
                                   "the evaluator's event descriptor; the run fails its sandbox check")
        self._forged += 1
        if self._forged > MAX_FORGED_REPLIES:  # each costs the evaluator a parse: a flood ends the child, not the run's time
            self.handle.stop(f"it sent more than {MAX_FORGED_REPLIES} replies to no request on the evaluator's event "
                             "descriptor (forged replies, a flood)")

    def _forward(self, ev: LogEvent) -> None:
        prefix = "" if self.role == "kernel" else f"[{self.role}] "
        if ev.stream in ("stdout", "stderr"):
            self.ctx.emit(LogEvent(ev.stream, prefix + ev.text, ev.level))
        elif ev.stream == "executor":  # the evaluator's own markers about this child's output (elided lines)
            self.ctx.emit(LogEvent("executor", ev.text, ev.level))
        else:  # the child's own "worker" lines are its words, not the evaluator's
            self.ctx.emit(LogEvent("stderr", f"[{self.role} process] {ev.text}", "debug" if ev.level == "debug" else ev.level))

    def _note_once(self, key: str, text: str) -> None:
        if key not in self._ignored:
            self._ignored.add(key)
            self.notes.append(text)
            self.ctx.log(text, level="warning")

    def _died(self) -> ChildGone:
        if self._gone is not None:
            return self._gone
        try:  # drain what is left (the handle's final error event carries the exit in words)
            for ev in self._events:
                self._take(ev, None)
        except Exception:  # noqa: BLE001 - already ending
            pass
        exit_report = self.handle.exit
        kind = exit_report.kind if exit_report is not None else "crash"
        own = [e for e in self.errors if e.kind == "memory-limit"]
        crash = self.handle.outcome.crash_location if self.handle.outcome is not None else None
        file, line = crash if crash else (None, None)
        what = f"the {self.role} process"
        if own:
            error = ErrorEvent("memory-limit", own[-1].message, own[-1].file, own[-1].line, own[-1].traceback)
            status = "memory-limit"
        elif kind == "cancelled" and not self.handle.cancel_requested:
            # status 3 is what a worker stopped by SIGTERM exits with; task code can exit with it too (or
            # SIGTERM its own process group). Only the evaluator's own cancel makes a child "cancelled"
            code = exit_report.returncode if exit_report is not None else None
            error = ErrorEvent("crash", f"{what} exited with status {code} (a stop by SIGTERM) though nkitui did "
                                        "not stop it: task code ended the process", file, line)
            status = "crashed"
        elif kind in ("ok", "failed", "invalid"):
            code = exit_report.returncode if exit_report is not None else None
            message = f"{what} exited with status {code} before answering: task code ended the process"
            stderr = [e.text.strip() for e in self.handle.log.entries() if e.stream == "stderr" and e.text.strip()]
            if stderr:
                message += f"; the last line it wrote on stderr: {stderr[-1].rstrip('.')}"
            memory_mb = self.handle.limits.memory_mb
            if memory_mb and any("memory" in s.lower() or "alloc" in s.lower() for s in stderr[-5:]):
                message += (f". The memory limit ({memory_mb} MB of address space) is likely too low for the "
                            "libraries it loads; raise it (--memory-mb)")
            error, status = ErrorEvent("crash", message), "crashed"
        else:
            message = f"{what} {exit_report.message if exit_report is not None else 'ended'}"
            if file:
                message += f"; the last kernel line on the stack was {file}:{line}"
            if self.role == "kernel" and exit_report is not None and exit_report.returncode == -signal.SIGSEGV:
                message += (". On the emulator the device's memory is write-protected outside its instructions: "
                            "a write into it from host code (behind nl.store / DMA, e.g. through a tensor's "
                            "storage or a forged numpy array) ends the kernel process this way")
            error, status = ErrorEvent(kind, message, file, line), _STATUS.get(kind, "crashed")
        self._gone = ChildGone(error, status)
        return self._gone

    # -- arrays ---------------------------------------------------------------------------------
    def arrays(self, reply: dict[str, Any], folder: Path, names: list[str], max_elements: dict[str, int],
               sub: str = "out") -> dict[str, Any]:
        """The arrays a reply names, read from folder/sub: exactly `names`, each checked (plain .npy,
        header first, at most max_elements[name] elements). ChildReplyError says what is wrong."""
        from nkitui.executor.arrays import ArrayTransferError, load_array

        described = reply.get("outputs")
        if not isinstance(described, dict):
            raise ChildReplyError(f"the {self.role} process answered without its outputs")
        missing = [n for n in names if n not in described]
        if missing:
            raise ChildReplyError(f"the {self.role} process returned no {', '.join(f'`{n}`' for n in missing)}")
        out = {}
        for name in names:
            try:
                out[name] = load_array(folder / sub, described[name], max_elements=max_elements[name],
                                       require_digest=True, anchor=self.scratch_root)
            except ArrayTransferError as exc:
                raise ChildReplyError(f"output `{name}` from the {self.role} process is unusable: {exc}") from None
        return out

"""A second trusted process for the judging launches' replays, so they use both cores.

On a kernel with many instructions the evaluator's replay thread is the run phase's critical path: each
judging launch (the trials, precision isolation) is answered by replaying the first seed's verified
instruction log on its inputs, one after another on one interpreter (flawed_transliteration: seven replays
of 0.35-0.45 s after its seeds ran, the other core idle). The helper takes every other one:

    helper = ReplayHelper.fork()            # in the load phase: the evaluator has one thread and no input
                                            # set yet; before any untrusted child exists
    raw = helper.replay(data, inputs, target=..., precise=...)   # the log's bytes, unpacked once there
    helper.close()

It is the evaluator's own fork: it never imports or runs task code, it only unpacks and replays logs (the
same untrusted bytes the evaluator's replay thread reads, with the same engine), and it answers the
evaluator alone, over a socket pair no untrusted child holds (they are forked later, with every descriptor
past their pipes closed, or started as new interpreters). What comes back is what `replay.replay` returned
there, or the error it raised, in words.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import numpy as np


class ReplayHelper:
    def __init__(self, pid: int, conn: Any) -> None:
        self.pid = pid
        self._conn = conn
        self._lock = threading.Lock()  # one request at a time
        self._sent: set[bytes] = set()  # logs the helper holds, by the digest of their bytes
        self.replays = 0

    @classmethod
    def fork(cls) -> "ReplayHelper | None":
        """A helper forked from this process, or None where forking is not safe here (see forked.why_not)."""
        from multiprocessing.connection import Pipe

        from nkitui.executor import forked

        if forked.why_not() is not None:
            return None
        ours, theirs = Pipe(duplex=True)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the helper (its behaviour is tested through the evaluator)
            code = 1
            try:
                ours.close()
                _serve(theirs, parent)
                code = 0
            finally:
                os._exit(code)
        theirs.close()
        return cls(pid, ours)

    def replay(self, data: bytes, inputs: list[np.ndarray], *, target: str, precise: bool) -> dict[str, np.ndarray]:
        """`replay.replay` of the log `data` on `inputs`, computed in the helper; its errors raised here: Diverged
        as itself, anything else as an exception of the same name (ChildProcessError when the helper is gone)."""
        from nkitui.emulator import replay

        key = hashlib.sha256(data).digest()
        with self._lock:
            try:
                if key not in self._sent:
                    self._conn.send(("log", key, data))
                    self._sent.add(key)
                self._conn.send(("replay", key, inputs, target, precise))
                reply = self._conn.recv()
            except (OSError, EOFError) as exc:
                raise ChildProcessError(f"the replay helper is gone ({exc})") from None
        self.replays += 1
        if reply[0] == "ok":
            return dict(reply[1])
        if reply[0] == "diverged":
            raise replay.Diverged(reply[1], reply[2], reply[3])
        raise type(str(reply[1]), (Exception,), {})(reply[2])

    def replayer(self, data: bytes) -> Any:
        """`replay.replay`'s signature for the log `data`, made here in the helper; where the helper is gone, made in
        the calling process."""
        def replay_there(log: Any, inputs: list[np.ndarray], *, target: str, precise: bool) -> dict[str, np.ndarray]:
            try:
                return self.replay(data, inputs, target=target, precise=precise)
            except ChildProcessError:
                from nkitui.emulator import replay

                return replay.replay(log, inputs, target=target, precise=precise)

        return replay_there

    def close(self) -> None:
        import signal

        try:
            self._conn.close()
        except OSError:
            pass
        pid, self.pid = self.pid, 0
        if not pid:
            return
        try:  # still ours to signal: not waited for until here, so the pid cannot have been reused
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _serve(conn: Any, parent: int) -> None:  # pragma: no cover - runs in the helper
    import ctypes
    import gc

    gc.freeze()  # the evaluator's objects are never collected here
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: it ends with the evaluator
    if os.getppid() != parent:
        return
    keep = conn.fileno()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # not the evaluator's pipes to its starter: only the socket pair stays
        os.dup2(null, fd)
    max_fd = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536
    os.closerange(3, keep)
    os.closerange(keep + 1, max_fd)
    from nkitui.emulator import replay

    logs: dict[bytes, Any] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "log":
            try:
                logs[message[1]] = replay.unpack(message[2])
            except Exception as exc:  # noqa: BLE001 - said when a replay of it is asked
                logs[message[1]] = exc
            continue
        _op, key, inputs, target, precise = message
        try:
            log = logs[key]
            if isinstance(log, Exception):
                raise log
            raw = replay.replay(log, inputs, target=target, precise=precise)
            answer: tuple[Any, ...] = ("ok", {name: np.asarray(a) for name, a in raw.items()})
        except replay.Diverged as exc:
            answer = ("diverged", str(exc), exc.index, exc.location)
        except Exception as exc:  # noqa: BLE001 - told to the evaluator in words, as its own replay would meet it
            answer = ("error", type(exc).__name__, str(exc)[:500])
        try:
            conn.send(answer)
        except (OSError, EOFError):
            return

"""nkitui's side of the reaper (reaper.py): start it once, tell it which runs to watch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from nkitui.executor.confine.reaper import start_time

_lock = threading.Lock()
_proc: subprocess.Popen[bytes] | None = None
_owner_pid: int | None = None  # a forked copy of nkitui must not write into its parent's reaper


def _reaper() -> subprocess.Popen[bytes] | None:
    global _proc, _owner_pid
    if _proc is not None and _owner_pid == os.getpid() and _proc.poll() is None:
        return _proc
    script = Path(__file__).with_name("reaper.py")
    try:
        _proc = subprocess.Popen([sys.executable, "-I", "-S", str(script)], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                                 start_new_session=True, close_fds=True)
    except OSError:
        _proc = None
    _owner_pid = os.getpid()
    return _proc


def _send(message: dict[str, Any], start: bool = True) -> bool:
    global _proc
    with _lock:
        if not start and (_proc is None or _owner_pid != os.getpid()):
            return False  # nothing to tell a reaper this process never started
        for _ in range(2):  # one restart if the reaper was killed
            proc = _reaper()
            if proc is None or proc.stdin is None:
                return False
            try:
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                _proc = None
        return False


def watch(pid: int, scratch: Path | None) -> bool:
    """Ask the reaper to kill pid's process group and remove `scratch` if nkitui dies first."""
    return _send({"watch": pid, "start": start_time(pid), "scratch": str(scratch) if scratch else ""})


def release(pid: int) -> None:
    _send({"release": pid})


def start() -> bool:
    """Start the reaper now (make_scratch does, before it makes the folder: starting a process takes tens of
    milliseconds, and a kill then must not find a folder the reaper has not been told about)."""
    with _lock:
        return _reaper() is not None


def hold(scratch: Path) -> bool:
    """Ask the reaper to remove `scratch` if nkitui dies before a child is watched in it (or it is dropped)."""
    return _send({"hold": str(scratch)})


def drop(scratch: Path) -> None:
    """`scratch` is gone (nkitui removed it): the reaper forgets it."""
    _send({"drop": str(scratch)}, start=False)


def reaper_pid() -> int | None:
    return _proc.pid if _proc is not None and _proc.poll() is None else None

"""The reaper: a tiny process that cleans up after nkitui when nkitui dies without doing so.

Run as `python -I -S reaper.py` (standard library only, nothing imported from nkitui). nkitui keeps
the write end of the reaper's stdin and sends one JSON line per run:

    {"watch": PID, "start": STARTTIME, "scratch": "/tmp/nkitui-run-..."}   a confined child started
    {"release": PID}                                                      its run ended normally
    {"hold": "/tmp/nkitui-run-..."}      a scratch folder was made, no child runs in it yet
    {"drop": "/tmp/nkitui-run-..."}      that folder was removed by nkitui (or handed to a "watch")

A scratch folder is held from the moment it exists: nkitui killed while it copies the task there, or
before its child started, must not leave it behind either (a Ray worker killed by its node does).

When stdin reaches end-of-file (nkitui exited, or was killed with SIGKILL), every run still watched
is ended: SIGKILL to the child's process group (only if /proc still shows the same process, by its
start time, so a recycled pid is never hit), a short wait for it to go, then its scratch folder is
removed. The reaper lives in its own session and ignores the terminal's signals, so a Ctrl-C that
kills nkitui does not kill the reaper before it has cleaned up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the reaper starts with as little as it can
    from typing import Any


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): tells a process from a recycled pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    if fields[:1] == [b"Z"]:  # a zombie: already dead, waiting for whoever adopted it to reap it
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def reap(watched: dict[int, tuple[int | None, str]]) -> None:
    for pid, (start, _) in watched.items():
        if start is not None and start_time(pid) == start:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + 3.0
    for pid, (start, scratch) in watched.items():
        while start is not None and start_time(pid) == start and time.monotonic() < deadline:
            time.sleep(0.02)
        if scratch and os.path.basename(scratch).startswith("nkitui-"):
            _REMOVAL.remove_tree(scratch)  # any depth, any modes, links never followed


def _load_removal() -> Any:
    """removal.py, loaded by its path at start (the reaper runs isolated: nothing of nkitui is importable,
    and an nkitui upgraded meanwhile must not change what the reaper runs)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "removal.py")
    spec = importlib.util.spec_from_file_location("nkitui_reaper_removal", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_REMOVAL = _load_removal()


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    watched: dict[int, tuple[int | None, str]] = {}
    held: set[str] = set()  # scratch folders with no child watched yet
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "watch" in msg:
            scratch = str(msg.get("scratch") or "")
            watched[int(msg["watch"])] = (msg.get("start"), scratch)
            held.discard(scratch)
        elif "release" in msg:
            watched.pop(int(msg["release"]), None)
        elif "hold" in msg:
            held.add(str(msg["hold"]))
        elif "drop" in msg:
            held.discard(str(msg["drop"]))
    reap(watched)
    for scratch in held:
        if os.path.basename(scratch).startswith("nkitui-"):
            _REMOVAL.remove_tree(scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())

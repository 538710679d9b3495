"""The reaper: a tiny process that cleans up after nkitui when nkitui dies without doing so.

Run as `python -I -S reaper.py` (standard library only, nothing imported from nkitui). nkitui keeps
the write end of the reaper's stdin and sends one JSON line per run:

    {"watch": PID, "start": STARTTIME, "scratch": "/tmp/nkitui-run-..."}   a confined child started
    {"release": PID}                                                      its run ended normally

When stdin reaches end-of-file (nkitui exited, or was killed with SIGKILL), every run still watched
is ended: SIGKILL to the child's process group (only if /proc still shows the same process, by its
start time, so a recycled pid is never hit), a short wait for it to go, then its scratch folder is
removed. The reaper lives in its own session and ignores the terminal's signals, so a Ctrl-C that
kills nkitui does not kill the reaper before it has cleaned up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the reaper starts with as little as it can
    from collections.abc import Callable
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
            for _ in range(8):  # the children are dead: nothing races the chmods; each pass opens a level
                if not os.path.lexists(scratch) or os.path.islink(scratch):
                    break
                shutil.rmtree(scratch, onerror=_unlocker(scratch))


def _unlocker(root: str) -> Callable[[Any, str, Any], None]:
    """A folder a kernel made unreadable (chmod 0): its owner takes the rights back, only strictly
    inside the scratch folder (never its parent, /tmp), never through a link."""
    inside = root.rstrip(os.sep) + os.sep

    def unlock(func: Any, path: str, _exc_info: Any) -> None:  # shutil.rmtree's onerror signature
        for target in (path, os.path.dirname(path)):
            if not (target == root or str(target).startswith(inside)):
                continue
            try:
                if os.path.isdir(target) and not os.path.islink(target):
                    os.chmod(target, 0o700)
            except OSError:
                pass

    return unlock


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    watched: dict[int, tuple[int | None, str]] = {}
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "watch" in msg:
            watched[int(msg["watch"])] = (msg.get("start"), str(msg.get("scratch") or ""))
        elif "release" in msg:
            watched.pop(int(msg["release"]), None)
    reap(watched)
    return 0


if __name__ == "__main__":
    sys.exit(main())

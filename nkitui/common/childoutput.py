"""What a confined child prints, passed on to the auditor's terminal as data.

The kernel is untrusted: its prints could hold escape sequences that move the cursor, print a fake
"PASSED", set the window title or write the clipboard (OSC 52), secrets it found, or gigabytes. Each
line goes through the same redaction as a stored run log (controls shown as pictures, secret shapes
replaced), and after `max_bytes` the rest is counted, not shown."""

from __future__ import annotations

import os
import threading
from typing import TextIO

from nkitui.common.redact import LineRedactor

MAX_RELAY_BYTES = 1 << 20  # a terminal's worth; `nkitui check` keeps the whole log in the run
MAX_LINE_BYTES = 64 << 10  # a longer line is shown in pieces (no unbounded buffer)
_CHUNK = 64 << 10


class OutputRelay:
    """Reads `fd` (the child's stdout and stderr) on a thread until end of file and writes it to `sink`."""

    def __init__(self, fd: int, sink: TextIO, *, max_bytes: int = MAX_RELAY_BYTES) -> None:
        self._fd = fd
        self._sink = sink
        self._max = max_bytes
        self.shown = 0
        self.held_back = 0
        self._redactor = LineRedactor()
        self._thread = threading.Thread(target=self._pump, name="nkitui-child-output", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        pending = b""
        try:
            while True:
                chunk = os.read(self._fd, _CHUNK)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._line(line)
                while len(pending) > MAX_LINE_BYTES:
                    self._line(pending[:MAX_LINE_BYTES])
                    pending = pending[MAX_LINE_BYTES:]
            if pending:
                self._line(pending)
        except OSError:
            pass  # the descriptor went away: nothing more to show
        finally:
            os.close(self._fd)

    def _line(self, raw: bytes) -> None:
        if self.shown >= self._max:
            self.held_back += len(raw) + 1
            return
        self.shown += len(raw) + 1
        text = self._redactor.line(raw.decode("utf-8", "replace").rstrip("\r"))
        try:
            self._sink.write(text + "\n")
            self._sink.flush()
        except (OSError, ValueError):  # the terminal went away (a dropped SSH session): keep draining
            pass

    def finish(self, timeout_s: float = 5.0) -> None:
        """Wait for the end of the output (every writer is gone once the child's group is killed); say how
        much was held back."""
        self._thread.join(timeout_s)
        if self.held_back:
            try:
                self._sink.write(f"[nkitui: {self.held_back:,} more bytes of the kernel's output not shown (the "
                                 f"first {self._max:,} are)]\n")
                self._sink.flush()
            except (OSError, ValueError):
                pass

"""Worker entry points for the generic runner tests (real child processes, no task involved)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from nkitui.executor.events import LogEvent


def hello(payload, ctx):  # noqa: ANN001, ANN201
    with ctx.phase("load") as ph:
        print("hello on stdout")
        print("hello on stderr", file=sys.stderr)
        n = int(payload.get("n", 3))
        for i in range(n):
            ctx.progress(i + 1, n, f"step {i + 1}")
        ph.detail = "said hello"
    ctx.result({"status": "passed", "cwd": os.getcwd(), "home": os.environ.get("HOME"),
                "aws": os.environ.get("AWS_SECRET_ACCESS_KEY"), "pythonpath_first": sys.path[0]})
    return 0


def many_events(payload, ctx):  # noqa: ANN001, ANN201
    n = int(payload["n"])
    for i in range(n):
        ctx.emit(LogEvent("worker", f"event {i}"))
    ctx.result({"status": "passed", "n": n})
    return 0


def burst(payload, ctx):  # noqa: ANN001, ANN201
    line = "y" * 99 + "\n"
    sys.stdout.write(line * (int(payload["mb"]) * 10486) + "last line\n")
    sys.stdout.flush()
    ctx.result({"status": "passed"})
    return 0


def stray_text(payload, ctx):  # noqa: ANN001, ANN201
    os.write(ctx.events_fd, b"this is not json\n{\"event\": \"nonsense\"}\n{broken json\n")
    ctx.result({"status": "passed"})
    return 0


def sleep(payload, ctx):  # noqa: ANN001, ANN201
    with ctx.phase("run"):
        ctx.log("going to sleep")
        time.sleep(float(payload.get("seconds", 60)))
    return 0


def straggler(payload, ctx):  # noqa: ANN001, ANN201
    # A child that inherits the output pipes and outlives the worker.
    subprocess.Popen(["sleep", "30"])
    ctx.result({"status": "passed"})
    return 0


def raise_error(payload, ctx):  # noqa: ANN001, ANN201
    raise RuntimeError("the entry itself is broken")

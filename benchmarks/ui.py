"""UI benchmark: start-up, keystroke-to-repaint latency and live-log ingestion of the workstation.

    .venv/bin/python benchmarks/ui.py [--repeats 5] [--keys 40] [--rate 100000] [--seconds 3] [--json]

Every number is printed beside a baseline measured in the same run, as a ratio (machines differ;
ratios travel). The baseline is a minimal Textual app: one Static that changes on a key press.

  first frame   process start -> the first frame the compositor hands to the terminal driver
                (headless), median of fresh processes; nkitui goes through what `nkitui TASK`
                does (config, task loading, themes, keymap). Goal: ratio <= 1.5.
  keystroke     key press -> the next frame, median over presses: the code view's cursor (j),
                switching areas (2, 1) and the log's cursor; baseline: the minimal app's key.
  ingestion     log lines fed to the Run area's live log at --rate lines/s (batches every 50 ms, as
                the run worker sends them) for --seconds: whether the view keeps up (feed time /
                time until the last line is on screen, 1.0 = keeps up), and keystroke latency in the
                code view while the log ingests, as a ratio to idle.
                Goals: keeps up at 100k lines/s, no input lag (latency ratio close to 1).
  ready         (information) process start -> task loaded, code highlighted, analysis, history
                and draft shown: the workstation fully usable, against the minimal app's first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "tests" / "app" / "fixtures" / "scale_rows"


# -- the baseline app ------------------------------------------------------------------------------
def minimal_app():
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Minimal(App):
        BINDINGS = [("j", "bump", "bump")]

        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def compose(self) -> ComposeResult:
            yield Static("0", id="counter")

        def action_bump(self) -> None:
            self.count += 1
            self.query_one("#counter", Static).update(str(self.count))

    return Minimal()


def nkitui_app(task_dir: Path):
    """The app as `nkitui TASK_DIR` builds it (nkitui.app.run_app without running it): the task
    folder is loaded after the first frame."""
    from nkitui.app.app import NkituiApp
    from nkitui.app.config import load_config

    return NkituiApp(task_dir, backend="emulator", config=load_config())


class FrameClock:
    """Records when the compositor hands a frame to the driver (App._display), for any app."""

    def __init__(self) -> None:
        self.frames: list[float] = []
        from textual.app import App

        original = App._display

        def display(app, screen, renderable):  # noqa: ANN001
            if renderable is not None:
                self.frames.append(time.perf_counter())
            return original(app, screen, renderable)

        App._display = display  # type: ignore[method-assign]

    def first_after(self, t0: float) -> float | None:
        return next((t for t in self.frames if t >= t0), None)


# -- child process: time to first frame -------------------------------------------------------------
def child_first_frame(kind: str, task_dir: str, started: float) -> None:
    clock = FrameClock()
    app = minimal_app() if kind == "minimal" else nkitui_app(Path(task_dir))

    ready: list[float] = []

    async def stop_after_first_frame_then_ready(pilot) -> None:  # noqa: ANN001
        while not clock.frames:
            await asyncio.sleep(0.001)
        await wait_ready(pilot)
        ready.append(time.perf_counter())
        pilot.app.exit()

    app.run(headless=True, size=(120, 40), auto_pilot=stop_after_first_frame_then_ready)
    print(json.dumps({"first_frame_s": clock.frames[0] - started if clock.frames else None,
                      "ready_s": ready[0] - started if ready else None}))


def first_frame(kind: str, task_dir: Path, repeats: int, env: dict[str, str]) -> tuple[float, float]:
    """Median (first frame, ready) seconds over fresh processes."""
    times: list[float] = []
    readies: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--task", str(task_dir), "--started", repr(started)],
            capture_output=True, text=True, env=env, timeout=120, check=True,
        ).stdout
        values = json.loads(out.strip().splitlines()[-1])
        times.append(float(values["first_frame_s"]))
        readies.append(float(values["ready_s"]))
    return statistics.median(times), statistics.median(readies)


# -- keystroke latency ------------------------------------------------------------------------------
async def key_latencies(app, keys: list[str], clock: FrameClock, prepare=None) -> list[float]:  # noqa: ANN001
    latencies: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        if prepare is not None:
            await prepare(pilot)
        await pilot.pause(0.2)
        for key in keys:
            t0 = time.perf_counter()
            await pilot.press(key)
            deadline = time.perf_counter() + 2
            while clock.first_after(t0) is None and time.perf_counter() < deadline:
                await asyncio.sleep(0.001)
            shown = clock.first_after(t0)
            if shown is not None:
                latencies.append(shown - t0)
    return latencies


async def wait_ready(pilot) -> None:  # noqa: ANN001
    from textual.worker import WorkerState

    app = pilot.app
    while not getattr(app, "session_started", True) or any(
            w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in app.workers):
        await pilot.pause(0.05)


# -- log ingestion ----------------------------------------------------------------------------------
async def ingestion(task_dir: Path, rate: int, seconds: float, keys: int, clock: FrameClock) -> dict:
    from nkitui.app.messages import RunLogBatch

    app = nkitui_app(task_dir)
    result: dict = {}
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_ready(pilot)
        await pilot.press("w")  # split layout: the log and the code view on screen together
        await pilot.press("1")
        await pilot.pause(0.2)
        idle = []
        for _ in range(keys):
            t0 = time.perf_counter()
            await pilot.press("j")
            while clock.first_after(t0) is None:
                await asyncio.sleep(0.001)
            idle.append(clock.first_after(t0) - t0)
        app.run_id = "bench"
        log = app.run_area.log
        batch_every = 0.05
        per_batch = int(rate * batch_every)
        stop = threading.Event()

        # Lines are made up front so the feeder only posts (as the run worker does, which gets
        # its lines from the child's pipe): the feed rate is then the requested one.
        n_batches = int(seconds / batch_every)
        batches = [[(1, f"compile: step {b * per_batch + i} of the kernel, tile {i % 128}") for i in range(per_batch)]
                   for b in range(n_batches)]

        def feed() -> None:  # the run worker's side: one message per batch, from a thread
            next_at = time.perf_counter()
            for lines in batches:
                if stop.is_set():
                    break
                app.post_message(RunLogBatch("bench", lines))
                next_at += batch_every
                time.sleep(max(0.0, next_at - time.perf_counter()))

        feeder = threading.Thread(target=feed, daemon=True)
        started = time.perf_counter()
        feeder.start()
        busy = []
        while feeder.is_alive():
            t0 = time.perf_counter()
            await pilot.press("j" if len(busy) % 2 == 0 else "k")
            while clock.first_after(t0) is None:
                await asyncio.sleep(0.001)
            busy.append(clock.first_after(t0) - t0)
        stop.set()
        fed_until = time.perf_counter()
        while log._pending or log._dirty:
            await asyncio.sleep(0.01)
        shown_at = time.perf_counter()
        result = {
            "lines": log.store.total,
            "fed_s": fed_until - started,
            "lines_per_s": log.store.total / (fed_until - started),
            # 1.0 when the last line is on screen the moment the last batch arrives (keeps up)
            "keeps_up": (fed_until - started) / (shown_at - started),
            "idle_key_s": statistics.median(idle),
            "busy_key_s": statistics.median(busy) if busy else float("nan"),
            "presses_during_ingestion": len(busy),
        }
    return result


# -- main ----------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--rate", type=int, default=100_000, help="log lines per second fed to the live log")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=("minimal", "nkitui"), help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_first_frame(args.child, args.task, args.started)
        return 0

    sys.path.insert(0, str(ROOT))
    from tests.app.helpers import make_task_repo

    with tempfile.TemporaryDirectory(prefix="nkitui-bench-") as tmp:
        base = Path(tmp)
        env = dict(os.environ)
        for name in ("CONFIG", "STATE", "DATA", "CACHE"):  # no user settings, no stored runs
            (base / name.lower()).mkdir()
            env[f"XDG_{name}_HOME"] = str(base / name.lower())
            os.environ[f"XDG_{name}_HOME"] = str(base / name.lower())
        task_dir = make_task_repo(base / "scale_rows", FIXTURE)

        minimal_start, _ = first_frame("minimal", task_dir, args.repeats, env)
        nkitui_start, nkitui_ready = first_frame("nkitui", task_dir, args.repeats, env)

        clock = FrameClock()
        keys = ["j"] * args.keys
        minimal_keys = asyncio.run(key_latencies(minimal_app(), keys, clock))
        code_keys = asyncio.run(key_latencies(nkitui_app(task_dir), keys, clock, wait_ready))
        area_keys = asyncio.run(key_latencies(nkitui_app(task_dir), ["2", "1"] * (args.keys // 2), clock, wait_ready))
        ingest = asyncio.run(ingestion(task_dir, args.rate, args.seconds, min(args.keys, 20), clock))
        shutil.rmtree(base / "scale_rows", ignore_errors=True)

    base_key = statistics.median(minimal_keys)
    rows = [
        ("first frame", f"{nkitui_start * 1e3:.0f} ms", f"{minimal_start * 1e3:.0f} ms", nkitui_start / minimal_start,
         "<= 1.5"),
        ("ready (task, code, analysis)", f"{nkitui_ready * 1e3:.0f} ms", f"{minimal_start * 1e3:.0f} ms",
         nkitui_ready / minimal_start, "(information)"),
        ("keystroke: code cursor (j)", f"{statistics.median(code_keys) * 1e3:.1f} ms", f"{base_key * 1e3:.1f} ms",
         statistics.median(code_keys) / base_key, ""),
        ("keystroke: switch area (2/1)", f"{statistics.median(area_keys) * 1e3:.1f} ms", f"{base_key * 1e3:.1f} ms",
         statistics.median(area_keys) / base_key, ""),
        ("log ingestion (keeps up)", f"{ingest['lines_per_s']:,.0f} lines/s", f"{args.rate:,} lines/s fed",
         ingest["keeps_up"], "~1.0"),
        ("keystroke while ingesting", f"{ingest['busy_key_s'] * 1e3:.1f} ms",
         f"{ingest['idle_key_s'] * 1e3:.1f} ms idle", ingest["busy_key_s"] / ingest["idle_key_s"], "close to 1"),
    ]
    if args.json:
        print(json.dumps({"rows": [dict(zip(("measure", "nkitui", "baseline", "ratio", "goal"), r)) for r in rows],
                          "ingestion": ingest}, indent=2))
        return 0
    print(f"{'measure':<30} {'nkitui':>18} {'baseline':>24} {'ratio':>7}  goal")
    for name, value, baseline, ratio, goal in rows:
        print(f"{name:<30} {value:>18} {baseline:>24} {ratio:>7.2f}  {goal}")
    print(f"({ingest['lines']:,} lines fed in {ingest['fed_s']:.1f} s; {ingest['presses_during_ingestion']} key "
          f"presses during ingestion; baseline app: one Static updated per key)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

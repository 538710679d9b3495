"""Queue benchmark: how fast `nkitui DIR` shows a queue of many tasks, and how fast its rows fill in.

    .venv/bin/python benchmarks/task_queue.py [--tasks 40] [--repeats 3] [--json]

A folder of --tasks task repositories (the bundled sample tasks copied round-robin, each its own git
repository with its own task id, so nothing is shared between them) is opened as `nkitui DIR` opens
it, in fresh processes, headless at 80x24:

  first frame   process start -> the first frame on the terminal driver, against a minimal Textual
                app's first frame and against `nkitui TASK` (the workstation on one of the tasks),
                both measured in the same run. Goal: no slower than one task's workstation (ratio
                <= 1.0; the queue never waits for the tasks before drawing).
  listed        process start -> every task has its row (found and loaded, facts still coming).
  filled        process start -> every row's verdict, review state and finding counts are read,
                with an empty findings cache (cold) and with the cache the cold run left (warm).
                The warm/cold ratio is what caching the static analysis by the files' hashes buys.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def make_queue(dest: Path, count: int) -> Path:
    """`count` task repositories under dest, copies of the bundled samples with ids of their own."""
    import git

    from nkitui.task.samples import sample_task_names

    names = sample_task_names()
    source = ROOT / "sample_tasks"
    for i in range(count):
        name = names[i % len(names)]
        task = dest / f"{i:03d}-{name}"
        shutil.copytree(source / name, task, ignore=shutil.ignore_patterns("__pycache__"))
        manifest = task / "task.toml"
        manifest.write_text(manifest.read_text().replace(f'id = "{name}"', f'id = "{name}-{i:03d}"', 1))
        repo = git.Repo.init(task, initial_branch="main")
        repo.git.add(A=True)
        actor = git.Actor("Bench", "bench@example.com")
        repo.index.commit("task", author=actor, committer=actor)
    return dest


def child(kind: str, folder: str, started: float) -> None:
    from benchmarks.ui import FrameClock, minimal_app

    clock = FrameClock()
    marks: dict[str, float] = {}
    if kind == "minimal":
        app = minimal_app()
    elif kind == "task":
        from nkitui.app.app import NkituiApp
        from nkitui.app.config import load_config

        app = NkituiApp(Path(folder), backend="emulator", config=load_config())
    else:
        from nkitui.app.app import NkituiApp
        from nkitui.app.config import load_config

        app = NkituiApp(Path(folder), mode="auto", backend="emulator", config=load_config())

    async def watch(pilot) -> None:  # noqa: ANN001
        import asyncio

        while not clock.frames:
            await asyncio.sleep(0.001)
        if kind == "queue":
            qs = pilot.app.queue_screen
            while qs is None or not qs.queue.discovered or len(qs.list.rows) < len(qs.queue) or not len(qs.queue):
                await asyncio.sleep(0.005)
            marks["listed"] = time.perf_counter()
            while not qs.filled:
                await asyncio.sleep(0.005)
            marks["filled"] = time.perf_counter()
            marks["tasks"] = len(qs.queue)
        pilot.app.exit()

    app.run(headless=True, size=(80, 24), auto_pilot=watch)
    print(json.dumps({"first_frame_s": clock.frames[0] - started,
                      "listed_s": marks["listed"] - started if "listed" in marks else None,
                      "filled_s": marks["filled"] - started if "filled" in marks else None,
                      "tasks": marks.get("tasks")}))


def run_child(kind: str, folder: Path, env: dict[str, str]) -> dict:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--folder", str(folder), "--started",
                          repr(started)], capture_output=True, text=True, env=env, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.started)
        return 0
    with tempfile.TemporaryDirectory(prefix="nkitui-bench-queue-") as tmp:
        base = Path(tmp)
        folder = make_queue(base / "queue", args.tasks)
        env = dict(os.environ)
        for name in ("CONFIG", "STATE", "DATA", "CACHE"):
            env[f"XDG_{name}_HOME"] = str(base / name.lower())
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        minimal = statistics.median(run_child("minimal", folder, env)["first_frame_s"] for _ in range(args.repeats))
        one_task = next(p for p in sorted(folder.iterdir()) if p.is_dir())
        workstation = statistics.median(run_child("task", one_task, env)["first_frame_s"] for _ in range(args.repeats))
        cold_runs, warm_runs = [], []
        for _ in range(args.repeats):
            shutil.rmtree(base / "cache", ignore_errors=True)
            cold_runs.append(run_child("queue", folder, env))
            warm_runs.append(run_child("queue", folder, env))

    def median(runs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    result = {
        "tasks": cold_runs[0]["tasks"], "repeats": args.repeats, "minimal_first_frame_s": round(minimal, 3),
        "queue_first_frame_s": round(median(cold_runs + warm_runs, "first_frame_s"), 3),
        "first_frame_ratio": round(median(cold_runs + warm_runs, "first_frame_s") / minimal, 2),
        "workstation_first_frame_s": round(workstation, 3),
        "queue_over_workstation": round(median(cold_runs + warm_runs, "first_frame_s") / workstation, 2),
        "listed_s": round(median(cold_runs + warm_runs, "listed_s"), 3),
        "filled_cold_s": round(median(cold_runs, "filled_s"), 3),
        "filled_warm_s": round(median(warm_runs, "filled_s"), 3),
    }
    result["warm_over_cold"] = round(result["filled_warm_s"] / result["filled_cold_s"], 2)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"queue of {result['tasks']} tasks, median of {args.repeats} fresh processes each (80x24, headless)")
    print(f"  first frame   {result['queue_first_frame_s']:.3f} s   minimal Textual app {minimal:.3f} s   "
          f"ratio {result['first_frame_ratio']:.2f}")
    print(f"                `nkitui TASK` (one task) {workstation:.3f} s   queue/workstation "
          f"{result['queue_over_workstation']:.2f} (goal <= 1.0)")
    print(f"  every row     {result['listed_s']:.3f} s after start")
    print(f"  filled, cold  {result['filled_cold_s']:.3f} s   (every port analysed)")
    print(f"  filled, warm  {result['filled_warm_s']:.3f} s   (findings from the cache)   "
          f"warm/cold {result['warm_over_cold']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

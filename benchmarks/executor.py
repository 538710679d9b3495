"""Executor benchmark: how fast the parent ingests worker events, and what starting a run costs.

    .venv/bin/python benchmarks/executor.py [--events 200000] [--repeats 7] [--json]

Every number is printed beside a baseline measured in the same run, as a ratio (machines differ;
ratios travel):

  ingest     events/s the parent turns into Event objects and hands to a consumer of
             RunHandle.events(), for a worker that writes N log events as fast as a pipe takes
             them; baseline: json.loads of the same lines in one process, no pipes or threads
             (ratio = ingest rate / parse rate, the share of pure parsing speed the executor keeps)
  start-up   spawn -> first event of a worker (the hello written before any import), and
             spawn -> first phase of an evaluation (worker, job file, limits, sandbox guard and
             the pipeline module, which imports only the event and result types: numpy, the task
             model and each phase's machinery come in inside their phases); baseline: spawning
             `python -c pass` to exit
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LINE = b'{"event":"log","stream":"worker","level":"info","text":"benchmark event 0123456789"}\n'


# -- worker entry points (imported by the worker as benchmarks.executor:...) ----------------------
def emit_events(payload, ctx):  # noqa: ANN001, ANN201
    """Write N event lines in large writes, so that the parent, not the child, is the bottleneck."""
    n = int(payload["n"])
    block = LINE * 4096
    full, rest = divmod(n, 4096)
    for _ in range(full):
        os.write(ctx.events_fd, block)
    os.write(ctx.events_fd, LINE * rest)
    ctx.result({"status": "passed", "n": n})
    return 0


def first_phase(payload, ctx):  # noqa: ANN001, ANN201
    with ctx.phase("load"):
        pass
    return 0


# -- measurements ---------------------------------------------------------------------------------
def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def bare_python(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return _median(times)


def worker_first_event(repeats: int) -> float:
    from nkitui.executor.job import WorkerJob
    from nkitui.executor.runner import start_worker

    times = []
    for _ in range(repeats):
        handle = start_worker(WorkerJob(entry="benchmarks.executor:first_phase"))
        handle.wait(timeout=60)
        if handle.startup_s is not None:
            times.append(handle.startup_s)
    return _median(times)


def evaluation_first_phase(repeats: int) -> float:
    """Spawn -> the pipeline's first phase event, on a small task."""
    from nkitui.evaluate.run import EvaluationRequest, start_evaluation
    from nkitui.executor.events import PhaseEvent

    folder = Path(tempfile.mkdtemp(prefix="nkitui-bench-"))
    (folder / "k.py").write_text("import neuronxcc.nki as nki\n\n\n@nki.jit\ndef k(a):\n    return a\n")
    (folder / "ref.py").write_text("def ref(a):\n    return a\n")
    (folder / "task.toml").write_text(
        'id = "bench"\ntitle = "bench"\n[sources]\nnki = "k.py"\nreference = "ref.py::ref"\n[kernel]\nentry = "k.py::k"\n'
        '[[inputs]]\nname = "a"\nshape = [4]\ndtype = "float32"\n[[outputs]]\nname = "out"\nshape = [4]\n'
        'dtype = "float32"\ntolerance = { kind = "exact" }\n'
    )
    times = []
    for _ in range(repeats):
        handle = start_evaluation(EvaluationRequest.of(folder, static=False, store=False))
        spawned = handle._spawned_at  # noqa: SLF001 - the benchmark measures from the spawn itself
        for event in handle.events():
            if isinstance(event, PhaseEvent):
                times.append(time.perf_counter() - spawned)
                handle.cancel()
                break
        handle.close()
    return _median(times)


def ingest_rate(n: int, repeats: int) -> tuple[float, int]:
    from nkitui.executor.events import LogEvent
    from nkitui.executor.job import WorkerJob
    from nkitui.executor.runner import start_worker

    rates = []
    seen = 0
    for _ in range(repeats):
        handle = start_worker(WorkerJob(entry="benchmarks.executor:emit_events", payload={"n": n}))
        seen = 0
        start = None
        for event in handle.events():
            if isinstance(event, LogEvent) and event.text == "benchmark event 0123456789":
                if start is None:
                    start = time.perf_counter()
                seen += 1
        elapsed = time.perf_counter() - (start or time.perf_counter())
        rates.append(seen / elapsed if elapsed > 0 else float("nan"))
    return _median(rates), seen


def parse_rate(n: int) -> float:
    from nkitui.executor.events import decode_line

    lines = [LINE] * n
    start = time.perf_counter()
    for line in lines:
        json.loads(line)
    json_rate = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for line in lines:
        decode_line(line)
    return json_rate, n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    baseline_spawn = bare_python(args.repeats)
    first_event = worker_first_event(args.repeats)
    first_phase_s = evaluation_first_phase(max(3, args.repeats // 2))
    json_rate, decode_rate = parse_rate(args.events)
    ingest, seen = ingest_rate(args.events, max(2, args.repeats // 2))
    results = {
        "baseline_python_c_pass_s": baseline_spawn,
        "worker_spawn_to_first_event_s": first_event,
        "worker_first_event_ratio": first_event / baseline_spawn,
        "evaluation_spawn_to_first_phase_s": first_phase_s,
        "evaluation_first_phase_ratio": first_phase_s / baseline_spawn,
        "baseline_json_loads_per_s": json_rate,
        "decode_line_per_s": decode_rate,
        "parent_ingest_events_per_s": ingest,
        "ingest_ratio_to_json_loads": ingest / json_rate,
        "events_delivered": seen,
        "events_sent": args.events,
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"start-up   python -c pass (baseline)          {baseline_spawn * 1e3:8.1f} ms")
    print(f"           worker: spawn -> first event        {first_event * 1e3:8.1f} ms   x{results['worker_first_event_ratio']:.2f} baseline")
    print(f"           evaluation: spawn -> first phase    {first_phase_s * 1e3:8.1f} ms   x{results['evaluation_first_phase_ratio']:.2f} baseline")
    print(f"ingest     json.loads in one process (baseline) {json_rate:10,.0f} lines/s")
    print(f"           parent ingest via RunHandle.events() {ingest:10,.0f} events/s   {results['ingest_ratio_to_json_loads']:.2f} of baseline"
          f"   ({seen:,}/{args.events:,} delivered)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

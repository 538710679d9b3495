"""Executor benchmark: how fast the parent ingests worker events, what starting a run costs, and
what `nkitui check` costs on the bundled tasks against the version before the trust split.

    .venv/bin/python benchmarks/executor.py [--events 200000] [--repeats 7] [--json]
    .venv/bin/python benchmarks/executor.py --check-tasks [--baseline 9e4cd76] [--repeats 2] [--tasks a,b]
    .venv/bin/python benchmarks/executor.py --processes [--baseline 9e4cd76] [--repeats 2] [--tasks a,b]

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
  check      wall time of `nkitui check TASK --no-store --quiet --json` on each bundled task, for this
             checkout and for the baseline commit (a `git worktree` made in a temp folder, run the same
             way: `python -P -m nkitui` with that tree first on PYTHONPATH), interleaved and alternating
             which goes first; the ratio is this checkout's total over the baseline's, and every task's
             verdict (exit code, status, failed checks) must be the same on both. Beside the wall
             time, the CPU time of each check's whole process tree (its waited-for descendants'
             rusage) and its ratio: on a shared machine the wall time follows the load, the CPU
             time far less. Both trees are
             byte-compiled first (as an installed package is: workers never write bytecode, so an
             uncompiled tree makes every worker compile nkitui anew) and each runs once unmeasured
  processes  where a check's CPU time goes, per process: the same checks, both trees alternated, each
             check's process tree polled from /proc every 20 ms (utime + stime of the parent, the
             evaluator, its untrusted children in the order they were started: reference, kernel,
             then a spare kernel process if one starts; reapers and git together); the median per
             role. Polling misses each process's last few milliseconds; the total is beside the
             rusage of the whole tree
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

from benchmarks.baseline import NoWorktree, baseline_beside  # noqa: E402

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


BASELINE_COMMIT = "9e4cd76"  # the last commit before the trust split (one worker ran the kernel and judged it)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for descendants so far."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _check_once(tree: Path, task: Path, env: dict[str, str]) -> tuple[float, dict, float]:
    """Wall seconds of one `nkitui check` run from `tree`, its verdict, and the CPU seconds of its whole
    process tree (every process of a check is waited for by its parent, so the kernel's counts for the
    run: on a shared machine CPU time moves far less than wall time)."""
    run_env = {**env, "PYTHONPATH": str(tree)}
    cpu0 = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-m", "nkitui", "check", str(task), "--no-store", "--quiet", "--json"],
                          cwd=tree, env=run_env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    cpu = _children_cpu() - cpu0
    verdict: dict = {"exit": proc.returncode}
    try:
        data = json.loads(proc.stdout)
        verdict["status"] = data.get("status")
        # the checks added by the trust split (integrity, device-outputs) exist only on one side
        verdict["failed"] = sorted(c["id"] for c in data.get("checks", []) if c.get("passed") is False)
    except ValueError:
        verdict["status"] = f"no JSON ({proc.stderr.strip()[-200:]})"
    return elapsed, verdict, cpu


def _bundled_tasks(only: list[str] | None) -> list[Path]:
    samples = ROOT / "sample_tasks"
    return sorted(p for p in samples.iterdir() if (p / "task.toml").is_file() and (not only or p.name in only))


def check_tasks(baseline: str, repeats: int, only: list[str] | None) -> dict:
    """This checkout against `baseline` on the bundled tasks (see the module docstring)."""
    samples = ROOT / "sample_tasks"
    tasks = _bundled_tasks(only)
    rows = []
    load_before = os.getloadavg()[0]
    try:
        with baseline_beside(baseline, "nkitui-bench-check-") as (base_tree, env):
            for tree in (base_tree, ROOT):
                if tasks:
                    _check_once(tree, (samples if tree is ROOT else tree / "sample_tasks") / tasks[0].name, env)
            for task in tasks:
                base_times, new_times, verdicts = [], [], {"baseline": None, "this": None}
                cpu: dict[str, list[float]] = {"baseline": [], "this": []}
                for r in range(repeats):
                    order = [("baseline", base_tree), ("this", ROOT)]
                    if r % 2:
                        order.reverse()
                    for name, tree in order:
                        elapsed, verdict, used = _check_once(tree, samples / task.name if tree is ROOT else tree / "sample_tasks" / task.name, env)
                        (base_times if name == "baseline" else new_times).append(elapsed)
                        cpu[name].append(used)
                        verdicts[name] = verdict
                b, n = _median(base_times), _median(new_times)
                rows.append({"task": task.name, "baseline_s": b, "this_s": n, "ratio": n / b,
                             "baseline_cpu_s": _median(cpu["baseline"]), "this_cpu_s": _median(cpu["this"]),
                             "baseline": verdicts["baseline"], "this": verdicts["this"],
                             "same_verdict": _same_verdict(verdicts["baseline"], verdicts["this"])})
    except NoWorktree as exc:
        return {"error": str(exc)}
    total_b = sum(r["baseline_s"] for r in rows)
    total_n = sum(r["this_s"] for r in rows)
    cpu_b = sum(r["baseline_cpu_s"] for r in rows)
    cpu_n = sum(r["this_cpu_s"] for r in rows)
    return {"baseline_commit": baseline, "repeats": repeats, "tasks": rows, "baseline_total_s": total_b,
            "this_total_s": total_n, "ratio": total_n / total_b if total_b else float("nan"),
            "baseline_cpu_s": cpu_b, "this_cpu_s": cpu_n, "cpu_ratio": cpu_n / cpu_b if cpu_b else float("nan"),
            "all_verdicts_same": all(r["same_verdict"] for r in rows),
            # the machine's 1-minute load average before and after: on a shared machine the ratio of a
            # loaded run hides what overlapping phases save (they need an idle core)
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def _poll_tree(cmd: list[str], cwd: Path, env: dict[str, str], interval: float = 0.02) -> tuple[float, int, dict[int, dict]]:
    """Run `cmd`; until it exits, poll /proc for its descendants' CPU seconds. -> (wall seconds, its pid,
    {pid: {"ppid", "cpu", "cmd", "first"}}), the last sample of each process."""
    tick = os.sysconf("SC_CLK_TCK")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, dict] = {}
    while proc.poll() is None:
        stats: dict[int, tuple[int, float, str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    text = f.read()
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            fields = text[text.rfind(")") + 2:].split()
            stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, line)
        family = {proc.pid}
        grown = True
        while grown:
            grown = False
            for pid, (ppid, _cpu, _line) in stats.items():
                if pid not in family and ppid in family:
                    family.add(pid)
                    grown = True
        now = time.perf_counter() - start
        for pid in family & stats.keys():
            ppid, cpu, line = stats[pid]
            entry = seen.setdefault(pid, {"ppid": ppid, "cpu": cpu, "cmd": line, "first": now})
            entry["cpu"] = max(entry["cpu"], cpu)
            entry["cmd"] = entry["cmd"] or line
        time.sleep(interval)
    return time.perf_counter() - start, proc.pid, seen


def _roles(root: int, seen: dict[int, dict]) -> dict[str, float]:
    """CPU seconds per role of one check's polled process tree (see the module docstring)."""
    roles: dict[str, float] = {}
    evaluator = next((pid for pid, e in seen.items() if e["ppid"] == root and "nkitui.executor.worker" in e["cmd"]), None)
    children = sorted((e["first"], pid) for pid, e in seen.items()
                      if evaluator is not None and e["ppid"] == evaluator and "nkitui.executor.worker" in e["cmd"])
    names = {pid: name for (_first, pid), name in zip(children, ("reference", "kernel"))}
    for pid, e in seen.items():
        if pid == root:
            role = "parent"
        elif pid == evaluator:
            role = "evaluator"
        elif pid in names:
            role = names[pid]
        elif any(pid == p for _f, p in children):
            role = "spare"
        else:
            role = "reapers, git"
        roles[role] = roles.get(role, 0.0) + e["cpu"]
    return roles


ROLES = ("parent", "evaluator", "reference", "kernel", "spare", "reapers, git")


def process_split(baseline: str, repeats: int, only: list[str] | None) -> dict:
    """Per-process CPU of `nkitui check` on the bundled tasks, this checkout and `baseline` alternated."""
    samples = ROOT / "sample_tasks"
    tasks = _bundled_tasks(only)
    rows = []
    load_before = os.getloadavg()[0]
    try:
        with baseline_beside(baseline, "nkitui-bench-procs-") as (base_tree, env):
            for task in tasks:
                got: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
                walls: dict[str, list[float]] = {"baseline": [], "this": []}
                for r in range(repeats):
                    order = [("baseline", base_tree), ("this", ROOT)]
                    if r % 2:
                        order.reverse()
                    for name, tree in order:
                        folder = samples / task.name if tree is ROOT else tree / "sample_tasks" / task.name
                        cmd = [sys.executable, "-P", "-m", "nkitui", "check", str(folder), "--no-store", "--quiet",
                               "--json"]
                        wall, root, seen = _poll_tree(cmd, tree, {**env, "PYTHONPATH": str(tree)})
                        got[name].append(_roles(root, seen))
                        walls[name].append(wall)
                row: dict = {"task": task.name}
                for name in ("baseline", "this"):
                    row[name] = {role: _median([g.get(role, 0.0) for g in got[name]]) for role in ROLES}
                    row[name]["wall"] = _median(walls[name])
                rows.append(row)
    except NoWorktree as exc:
        return {"error": str(exc)}
    return {"baseline_commit": baseline, "repeats": repeats, "tasks": rows,
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def print_processes(result: dict) -> None:
    if "error" in result:
        print(f"processes  {result['error']}")
        return
    print(f"processes  CPU seconds per process of nkitui check (median of {result['repeats']}, polled from /proc; "
          f"baseline {result['baseline_commit']} ran everything in one worker)")
    print(f"           {'task':<24} {'tree':<9} " + " ".join(f"{r[:10]:>10}" for r in ROLES) + f" {'total':>7} {'wall':>7}")
    sums: dict[str, dict[str, float]] = {"baseline": {}, "this": {}}
    for row in result["tasks"]:
        for name in ("baseline", "this"):
            cells = row[name]
            total = sum(cells[r] for r in ROLES)
            for r in (*ROLES, "wall"):
                sums[name][r] = sums[name].get(r, 0.0) + cells[r]
            print(f"           {row['task'] if name == 'baseline' else '':<24} {name:<9} "
                  + " ".join(f"{cells[r]:10.2f}" for r in ROLES) + f" {total:7.2f} {cells['wall']:7.2f}")
    for name in ("baseline", "this"):
        cells = sums[name]
        print(f"           {'total' if name == 'baseline' else '':<24} {name:<9} "
              + " ".join(f"{cells.get(r, 0.0):10.2f}" for r in ROLES)
              + f" {sum(cells.get(r, 0.0) for r in ROLES):7.2f} {cells.get('wall', 0.0):7.2f}")
    print(f"           load average {result['load_before']:.1f} before, {result['load_after']:.1f} after "
          f"({os.cpu_count()} CPUs)")


def _same_verdict(a: dict | None, b: dict | None) -> bool:
    if not a or not b:
        return False
    new_checks = {"integrity", "device-outputs"}
    return a["exit"] == b["exit"] and a.get("status") == b.get("status") and \
        [c for c in a.get("failed", []) if c not in new_checks] == [c for c in b.get("failed", []) if c not in new_checks]


def print_check(result: dict) -> None:
    if "error" in result:
        print(f"check      {result['error']}")
        return
    print(f"check      nkitui check on the bundled tasks: this checkout vs {result['baseline_commit']} "
          f"(median of {result['repeats']}, run interleaved)")
    print(f"           {'':<24} {'wall':>26}  {'CPU (process tree)':>26}")
    print(f"           {'task':<24} {'baseline':>9} {'this':>9} {'ratio':>6}  {'baseline':>9} {'this':>9} {'ratio':>6}"
          "  verdict")
    for r in result["tasks"]:
        verdict = f"{r['this']['status']} (exit {r['this']['exit']})" + ("" if r["same_verdict"] else
                                                                        f"  DIFFERS from {r['baseline']}")
        cpu_ratio = r["this_cpu_s"] / r["baseline_cpu_s"] if r["baseline_cpu_s"] else float("nan")
        print(f"           {r['task']:<24} {r['baseline_s']:8.2f}s {r['this_s']:8.2f}s {r['ratio']:6.2f}  "
              f"{r['baseline_cpu_s']:8.2f}s {r['this_cpu_s']:8.2f}s {cpu_ratio:6.2f}  {verdict}")
    print(f"           {'total':<24} {result['baseline_total_s']:8.2f}s {result['this_total_s']:8.2f}s "
          f"{result['ratio']:6.2f}  {result['baseline_cpu_s']:8.2f}s {result['this_cpu_s']:8.2f}s "
          f"{result['cpu_ratio']:6.2f}  {'same verdicts on every task' if result['all_verdicts_same'] else 'VERDICTS DIFFER'}")
    print(f"           load average {result['load_before']:.1f} before, {result['load_after']:.1f} after "
          f"({os.cpu_count()} CPUs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check-tasks", action="store_true",
                    help="time `nkitui check` on the bundled tasks against the baseline commit (and compare verdicts)")
    ap.add_argument("--processes", action="store_true",
                    help="the CPU time of nkitui check per process (parent, evaluator, children) against the baseline")
    ap.add_argument("--baseline", default=BASELINE_COMMIT, help=f"the baseline commit (default {BASELINE_COMMIT})")
    ap.add_argument("--tasks", help="comma-separated bundled task names (default: all)")
    args = ap.parse_args(argv)
    if args.processes:
        split = process_split(args.baseline, args.repeats, args.tasks.split(",") if args.tasks else None)
        if args.json:
            print(json.dumps(split, indent=2))
        else:
            print_processes(split)
        return 0 if "error" not in split else 1
    if args.check_tasks:
        result = check_tasks(args.baseline, args.repeats, args.tasks.split(",") if args.tasks else None)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print_check(result)
        return 0 if result.get("all_verdicts_same") else 1

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

"""Batch benchmark: the twelve bundled tasks through `nkitui batch`, serial against the pool, and the
local pool against Ray, every ratio against a baseline measured in the same run.

    .venv/bin/python benchmarks/batch.py [--workers 2] [--repeats 1] [--quick] [--no-ray] [--json]

  pool      wall time of the batch with --workers N over the same batch with --workers 1
            (goal on a 2-core machine: at most 0.6)
  ray       wall time on a local Ray runtime (N CPUs) over the local pool with N workers, and the
            per-task overhead of Ray: (ray - pool) / tasks; Ray's own start-up is timed apart

The tasks are copied out as git repositories (as `nkitui demo` does), the evaluation is the full
`nkitui check` (static analysis, trials, precision isolation) unless --quick, and results go to a
temporary run store. The serial pass runs first and fills the batch ledger, so the pool and Ray
passes schedule longest-first, as any batch after the first does. The machine's load average is
printed with the numbers: on a shared machine the ratios move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_LOG: list[dict] = []  # per batch: wall, CPU of this process (the driver) and of its workers
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _batch(tasks_dir: Path, options, executor) -> tuple[float, dict[str, str]]:  # noqa: ANN001
    from nkitui.batch import start_batch

    import resource

    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    handle = start_batch(tasks_dir, options=options, executor=executor)
    summary = handle.wait()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = [round((a.ru_utime + a.ru_stime) - (b.ru_utime + b.ru_stime), 2) for a, b in zip(after, before)]
    CPU_LOG.append({"executor": executor.name, "workers": executor.workers, "wall_s": round(wall, 2),
                    "driver_cpu_s": cpu[0], "workers_cpu_s": cpu[1],
                    "task_s": {k: r.duration_s for k, r in handle.records.items()}})
    if summary.error or summary.not_run:
        raise SystemExit(f"the batch did not complete: {summary.to_dict()}")
    return wall, {k: r.status for k, r in handle.records.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="measure each configuration this many times (median)")
    parser.add_argument("--quick", action="store_true", help="one seed, no static/trials/precision (a smoke run)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray measurement")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)

    from nkitui.batch import BatchOptions, LocalExecutor
    from nkitui.batch.sizing import usable_cpus
    from nkitui.task.samples import install_samples

    with tempfile.TemporaryDirectory(prefix="nkitui-bench-batch-") as tmp:
        tmp_path = Path(tmp)
        os.environ["XDG_DATA_HOME"] = str(tmp_path / "data")  # the ledger and run store of this run only
        tasks_dir = tmp_path / "tasks"
        install_samples(tasks_dir)
        options = BatchOptions(seeds=1, static=False, trials=False, precision=False) if args.quick else BatchOptions()
        n_tasks = len([p for p in tasks_dir.iterdir() if p.is_dir()])
        load_before = os.getloadavg()[0]

        serial, pool = [], []
        verdicts: dict[str, dict[str, str]] = {}
        for _ in range(args.repeats):
            wall, verdicts["serial"] = _batch(tasks_dir, options, LocalExecutor(1))
            serial.append(wall)
            wall, verdicts["pool"] = _batch(tasks_dir, options, LocalExecutor(args.workers))
            pool.append(wall)
        report: dict = {
            "tasks": n_tasks, "workers": args.workers, "cpus": usable_cpus(), "quick": args.quick,
            "serial_s": round(statistics.median(serial), 2), "pool_s": round(statistics.median(pool), 2),
        }
        # the median of the ratios of back-to-back pairs: a pair shares the machine's load of the moment
        report["pool_ratios"] = [round(p / q, 3) for p, q in zip(pool, serial)]
        report["pool_ratio"] = round(statistics.median(report["pool_ratios"]), 3)

        if not args.no_ray:
            import ray

            from nkitui.batch.ray_executor import RayExecutor

            t0 = time.perf_counter()
            ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                     object_store_memory=256 << 20, logging_level="error", _node_ip_address="127.0.0.1")
            report["ray_start_s"] = round(time.perf_counter() - t0, 2)
            try:
                ray_walls, pool_again = [], []
                for _ in range(args.repeats):
                    wall, verdicts["ray"] = _batch(tasks_dir, options, RayExecutor())
                    ray_walls.append(wall)
                    wall, _ = _batch(tasks_dir, options, LocalExecutor(args.workers))
                    pool_again.append(wall)
            finally:
                ray.shutdown()
            ray_s, pool2_s = statistics.median(ray_walls), statistics.median(pool_again)
            report.update(ray_s=round(ray_s, 2), pool_beside_ray_s=round(pool2_s, 2),
                          ray_ratio=round(ray_s / pool2_s, 3),
                          ray_overhead_per_task_s=round((ray_s - pool2_s) / n_tasks, 3))
        report["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        report["same_verdicts"] = all(v == verdicts["serial"] for v in verdicts.values())
        report["batches"] = CPU_LOG

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"batch benchmark: {report['tasks']} bundled tasks, {'quick' if args.quick else 'full'} evaluation, "
              f"{report['cpus']} CPUs, load average {report['load_average'][0]} -> {report['load_average'][1]}")
        print(f"  serial (--workers 1)     {report['serial_s']:8.2f} s   baseline")
        pairs = f" (pairs: {', '.join(f'{r:.3f}' for r in report['pool_ratios'])})" if args.repeats > 1 else ""
        print(f"  pool   (--workers {args.workers})     {report['pool_s']:8.2f} s   ratio {report['pool_ratio']:.3f}"
              f"  (goal <= 0.6 on 2 cores){pairs}")
        if "ray_s" in report:
            print(f"  local pool again         {report['pool_beside_ray_s']:8.2f} s   baseline for Ray")
            print(f"  ray    ({args.workers} CPUs)          {report['ray_s']:8.2f} s   ratio {report['ray_ratio']:.3f}, "
                  f"overhead {report['ray_overhead_per_task_s'] * 1000:+.0f} ms per task "
                  f"(+ {report['ray_start_s']:.1f} s to start Ray)")
        for b in CPU_LOG:
            print(f"    {b['executor']:5} x{b['workers']}: wall {b['wall_s']:6.1f} s, CPU of the driver {b['driver_cpu_s']:5.1f} s, "
                  f"of the local workers {b['workers_cpu_s']:6.1f} s, task times summed {sum(v or 0 for v in b['task_s'].values()):6.1f} s")
        print(f"  verdicts identical across serial, pool{' and Ray' if 'ray_s' in report else ''}: "
              f"{'yes' if report['same_verdicts'] else 'NO'}")
    return 0 if report["same_verdicts"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

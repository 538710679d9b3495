"""Speed of the cost model: `estimate()` on a ~100k-instruction trace, as a ratio against a baseline commit
measured in the same run (machines here are noisy; only same-run ratios mean something).

    .venv/bin/python benchmarks/costmodel.py [--baseline REV] [--repeats N] [--no-cache]

The trace is the trn1 matmul tutorial's tiled kernel at its published shape (99,840 instructions, traced
shape-only by the emulator; cached like the calibration's traces). The baseline is checked out into a
temporary `git worktree` (default 9e4cd76, the code before issue #16) and timed in child processes that
alternate with children running this checkout: each child loads the same saved trace with its own code and
times `estimate()` (process CPU time), as a trace's first estimate and again on the same trace; the ratios are
taken per round (baseline and this checkout timed back to back) and reported as best and median. Also timed:
the trace load on both sides, and `nkitui perf estimate TRACE.json`
end to end (JSON load, estimate, rendering; wall time) in this checkout. Goal: under 1 s per 100k
instructions for `estimate()`. The calibration of the model is benchmarks/calibration.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BASELINE = "9e4cd76"

# Runs in a child with PYTHONPATH set to the checkout under test: load the trace, time estimate().
_TIMER = r"""
import gc, json, sys, time
from nkitui.emulator.trace import Trace
from nkitui.perf import estimate
t = time.process_time()
trace = Trace.from_json(json.load(open(sys.argv[1])))
load = time.process_time() - t
times, again = [], []
for _ in range(int(sys.argv[2])):
    # a trace's first estimate (checkouts that keep the trace's storage ranges compute them here) ...
    if hasattr(trace, "_ranges"):
        trace._ranges = None
    gc.collect()
    t = time.process_time()
    estimate(trace, "trn1")
    times.append(time.process_time() - t)
    # ... and the same trace estimated again (the ranges kept: calibration fits, other targets)
    gc.collect()
    t = time.process_time()
    estimate(trace, "trn1")
    again.append(time.process_time() - t)
print(json.dumps({"instructions": len(trace), "times": times, "again": again, "load": load}))
"""


def _time_in(tree: Path, trace_path: Path, repeats: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _TIMER, str(trace_path), str(repeats)], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(tree)}, cwd=tree,
                         timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"timing in {tree} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=BASELINE, help=f"git revision to compare against (default {BASELINE})")
    ap.add_argument("--repeats", type=int, default=3, help="estimates per child (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating baseline/current child pairs (default 3)")
    ap.add_argument("--no-cache", action="store_true", help="trace again instead of reading the cached trace")
    args = ap.parse_args(argv)

    import calibration

    case = calibration.BY_KEY["matmul tiled"]
    t0 = time.perf_counter()
    trace, _ = calibration.trace_case(case, "full", not args.no_cache, calibration._emulator_digest())
    print(f"trace: {case.key} at the published shape, {len(trace)} instructions ({time.perf_counter() - t0:.1f} s "
          "to trace or read)")
    with tempfile.TemporaryDirectory(prefix="nkitui-costmodel-bench-") as tmp:
        tmp_path = Path(tmp)
        trace_path = tmp_path / "trace.json"
        trace_path.write_text(json.dumps(trace.to_json()))
        base_tree = tmp_path / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(base_tree), args.baseline],
                       check=True)
        try:
            base, cur = [], []
            for _ in range(args.rounds):
                base.append(_time_in(base_tree, trace_path, args.repeats))
                cur.append(_time_in(ROOT, trace_path, args.repeats))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
        n = len(trace)
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "nkitui", "perf", "estimate", str(trace_path)], capture_output=True,
                              text=True, cwd=ROOT, timeout=600)
        cli_wall = time.perf_counter() - t
        if done.returncode != 0:
            raise SystemExit(f"nkitui perf estimate failed:\n{done.stderr}")
    per100k = 1e5 / n

    def report(what: str, field: str) -> float:
        b = [t for r in base for t in r[field]]
        c = [t for r in cur for t in r[field]]
        ratios = [min(rc[field]) / min(rb[field]) for rb, rc in zip(base, cur)]  # per round: same-run ratios
        print(f"{what} ({args.rounds} rounds x {args.repeats} per side, alternating children):")
        print(f"  baseline {args.baseline}: best {min(b):.3f} s, median {statistics.median(b):.3f} s")
        print(f"  this checkout:   best {min(c):.3f} s, median {statistics.median(c):.3f} s")
        print(f"  ratio this/baseline per round: best {min(ratios):.2f}, median {statistics.median(ratios):.2f}")
        return min(c) * per100k

    print(f"estimate() CPU time for {n} instructions:")
    best = report("the trace's first estimate", "times")
    print(f"  per 100k instructions: {best:.3f} s best -> goal < 1 s {'met' if best < 1.0 else 'NOT met'}")
    report("the same trace estimated again (its storage ranges kept)", "again")
    lb = [r["load"] for r in base]
    lc = [r["load"] for r in cur]
    print(f"Trace.from_json(json.load(...)) CPU time: baseline median {statistics.median(lb):.3f} s, this checkout "
          f"median {statistics.median(lc):.3f} s (ratio per round median "
          f"{statistics.median(c / b for b, c in zip(lb, lc)):.2f})")
    print(f"`nkitui perf estimate TRACE.json` end to end (new process: imports, JSON load, estimate, text): "
          f"{cli_wall:.2f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

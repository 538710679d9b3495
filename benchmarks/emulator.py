"""Emulator speed: realistic kernels as a ratio to numpy computing the same result, and the
per-instruction cost of the emulator itself.

    .venv/bin/python benchmarks/emulator.py [--quick] [--json]
    .venv/bin/python benchmarks/emulator.py --baseline 9e4cd76 [--pairs 6] [--quick]

Goals (issue #3): under 20 us of emulator overhead per instruction, and within 5x of direct numpy
on large-tile kernels. Every number is measured in this run; nothing is compared to a constant.

`--baseline COMMIT` (issue #19: "the emulator benchmark ratios do not get worse") measures this
checkout's emulator against COMMIT's, checked out in a temporary git worktree: the measurement (this
script's own, so both sides run the same kernels) runs `--pairs` times per side in fresh processes,
alternating which side goes first, with BLAS and OpenMP on one thread and every kernel timed in CPU
seconds (other processes on a shared machine stretch wall time by whole time slices); each figure is printed as
both sides' medians, this/baseline, and the pairs in which this side was lower. A figure the
baseline's emulator cannot produce (an API it lacks) is left out of that side. Exit status 1 when a
figure is worse: a higher median that most pairs agree with.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

# The tree whose emulator is measured: this checkout, or the baseline's worktree (`--baseline` sets it
# for its measuring processes). Its folder goes first on sys.path, ahead of any installed nkitui.
TREE = Path(os.environ.get("NKITUI_BENCH_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(TREE))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # benchmarks/timing.py, this checkout's
sys.path.insert(2, str(Path(__file__).resolve().parents[1]))  # benchmarks.baseline, this checkout's

from nkitui import emulator  # noqa: E402

if not Path(emulator.__file__).resolve().is_relative_to(TREE.resolve()):
    raise SystemExit(f"measuring {emulator.__file__}, not the emulator of {TREE}")
emulator.install()

import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
import nki as nki_new  # noqa: E402  (the new `nki` namespace front end)
import nki.isa as nisa_new  # noqa: E402
import nki.language as nl_new  # noqa: E402
from tests.emulator.tutorial_kernels import matmul_tiled  # noqa: E402  (AWS matmul tutorial shape)
from timing import best_of  # noqa: E402  (benchmarks/timing.py)

BF16 = ml_dtypes.bfloat16


@nki.jit
def softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        neg_max = nisa.tensor_reduce(np.max, tile, axis=(1,), negate=True)
        total = nl.ndarray((128, 1), dtype=nl.float32)
        e = nisa.activation(op=nl.exp, data=tile, bias=neg_max, reduce_op=nl.add, reduce_res=total)
        nl.store(out[t * 128:(t + 1) * 128, :], nisa.tensor_scalar(e, np.multiply, nisa.reciprocal(total)))
    return out


@nki.jit
def layernorm(x, gamma, beta):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    chunks = math.ceil(cols / 512)
    g = nl.load(gamma).broadcast_to((128, cols))
    b = nl.load(beta).broadcast_to((128, cols))
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32)
        for c in nl.affine_range(chunks):
            stats[:, c * 6:(c + 1) * 6] = nisa.bn_stats(tile[:, c * 512:(c + 1) * 512])
        mv = nisa.bn_aggr(stats)
        rstd = nl.rsqrt(mv[:, 1:2] + 1e-5)
        normed = nisa.tensor_scalar(tile, np.subtract, mv[:, 0:1], op1=np.multiply, operand1=rstd)
        nl.store(out[t * 128:(t + 1) * 128, :], normed * g + b)
    return out


@nki.jit
def tiny_chain(x, n_ops):
    """Per-instruction overhead: a chain of element-wise ops on a (128, 1) tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in nl.sequential_range(n_ops):
        t = nisa.tensor_scalar(t, np.add, 1.0)
    nl.store(out, t)
    return out


@nki_new.jit
def tiny_chain_new(x, n_ops):
    """The same chain in the new namespace (destination-first ISA calls, two ping-pong tiles)."""
    out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
    a = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
    b = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
    nisa_new.dma_copy(dst=a, src=x)
    for _ in range(n_ops // 2):
        nisa_new.tensor_scalar(dst=b, data=a, op0=nl_new.add, operand0=1.0)
        nisa_new.tensor_scalar(dst=a, data=b, op0=nl_new.add, operand0=1.0)
    nisa_new.dma_copy(dst=out, src=a)
    return out


# Single-threaded measurements use this process's CPU time: other processes on a busy machine
# inflate wall time by whole time slices, CPU time much less. Multi-threaded numpy baselines (BLAS)
# use wall time, since their CPU time adds up over threads.
cpu = time.process_time


@nki_new.jit
def lnc_matmul_chain(x, w, n_matmuls, cores):
    """Each core: `n_matmuls` bf16 128x128x512 matmuls into PSUM, every 8th result copied to SBUF and
    stored to shared HBM (about one HBM-visible instruction in ten, as in nki-library's MoE kernels).
    With cores=1 one core does the work of both (the same instructions, no turn-taking)."""
    c = nl_new.program_id(0) if cores > 1 else 0
    out = nl_new.ndarray((2, 128, 512), dtype=nl_new.float32, buffer=nl_new.shared_hbm, name="out")
    xs = nl_new.ndarray((128, 128), dtype=x.dtype, buffer=nl_new.sbuf)
    ws = nl_new.ndarray((128, 512), dtype=w.dtype, buffer=nl_new.sbuf)
    nisa_new.dma_copy(dst=xs, src=x)
    nisa_new.dma_copy(dst=ws, src=w)
    acc = nl_new.ndarray((128, 512), dtype=nl_new.float32, buffer=nl_new.psum)
    r = nl_new.ndarray((128, 512), dtype=nl_new.float32, buffer=nl_new.sbuf)
    for core in ([c] if cores > 1 else [0, 1]):
        for i in range(n_matmuls):
            nisa_new.nc_matmul(dst=acc, stationary=xs, moving=ws)
            if i % 8 == 7:
                nisa_new.tensor_copy(dst=r, src=acc)
                nisa_new.dma_copy(dst=out[core], src=r)
    return out


def measure(quick: bool, clock=time.perf_counter) -> dict:
    """Every figure of one run: per kernel its emulated, traced and numpy seconds and instruction count;
    the per-instruction overheads; the logical-core and shape-only-trace figures (None where this tree's
    emulator cannot run them)."""
    rng = np.random.default_rng(0)
    repeat = 2 if quick else 3
    n = 1024 if quick else 2048
    rows, cols = (1024, 2048) if quick else (4096, 4096)
    kernels: dict[str, dict] = {}

    def record(name, emu_s, np_s, instructions, traced_s):
        kernels[name] = {"emu_s": emu_s, "trace_s": traced_s, "numpy_s": np_s, "instructions": instructions}

    lhsT = rng.standard_normal((n, n)).astype(BF16)
    rhs = rng.standard_normal((n, n)).astype(BF16)
    emu_s = best_of(lambda: matmul_tiled(lhsT, rhs), repeat, clock)
    instrs = matmul_tiled.last_run.instructions
    with emulator.trace():
        traced = best_of(lambda: matmul_tiled(lhsT, rhs), 1, clock)
    np_s = best_of(lambda: (lhsT.astype(np.float32).T @ rhs.astype(np.float32)).astype(BF16), repeat, clock)
    record(f"tiled matmul {n}^3 bf16", emu_s, np_s, instrs, traced)

    x = rng.standard_normal((rows, cols)).astype(np.float32)
    emu_s = best_of(lambda: softmax(x), repeat, clock)
    instrs = softmax.last_run.instructions
    with emulator.trace():
        traced = best_of(lambda: softmax(x), 1, clock)

    def np_softmax():
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    record(f"softmax {rows}x{cols} fp32", emu_s, best_of(np_softmax, repeat, clock), instrs, traced)

    gamma = rng.random((1, cols)).astype(np.float32)
    beta = rng.random((1, cols)).astype(np.float32)
    emu_s = best_of(lambda: layernorm(x, gamma, beta), repeat, clock)
    instrs = layernorm.last_run.instructions
    with emulator.trace():
        traced = best_of(lambda: layernorm(x, gamma, beta), 1, clock)

    def np_layernorm():
        mu = x.mean(1, keepdims=True)
        return (x - mu) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma + beta

    record(f"layernorm {rows}x{cols} fp32", emu_s, best_of(np_layernorm, repeat, clock), instrs, traced)

    small = np.zeros((128, 1), np.float32)
    n_ops = 2000 if quick else 10000

    def np_chain():
        t = small
        for _ in range(n_ops):
            t = t + np.float32(1.0)
        return t

    overheads = {}
    for label, kern in (("legacy", tiny_chain), ("nki", tiny_chain_new)):
        # emulator and numpy alternate, so both see the same load; best of `repeat` each
        emu_s = np_s = math.inf
        for _ in range(repeat):
            emu_s = min(emu_s, best_of(lambda kern=kern: kern(small, n_ops), 1, cpu))
            np_s = min(np_s, best_of(np_chain, 1, cpu))
        instrs = kern.last_run.instructions
        with emulator.trace():
            traced = best_of(lambda kern=kern: kern(small, n_ops), 1, cpu)
        record(f"{n_ops} tiny (128x1) {label} instrs (cpu)", emu_s, np_s, instrs, traced)
        overheads[label] = {"us": (emu_s - np_s) / instrs * 1e6, "traced_us": (traced - np_s) / instrs * 1e6}

    # logical cores: kernel[2] against one core issuing the same instructions (wall time: the cost of
    # the cores' turn-taking is thread wake-ups, which a loaded host makes slow)
    xb = np.ones((128, 128), BF16)
    wb = np.ones((128, 512), BF16)
    n_mm = 400 if quick else 1600
    lnc: dict | None
    try:
        lnc1 = lnc2 = math.inf
        for _ in range(repeat):  # alternating, so both see the same load
            lnc1 = min(lnc1, best_of(lambda: lnc_matmul_chain(xb, wb, n_mm, 1), 1))
            lnc2 = min(lnc2, best_of(lambda: lnc_matmul_chain[2](xb, wb, n_mm, 2), 1))
        lnc = {"matmuls": 2 * n_mm, "one_core_s": lnc1, "two_cores_s": lnc2}
    except Exception as exc:  # an older emulator (a --baseline tree) without logical cores
        lnc = {"error": f"{type(exc).__name__}: {exc}"}

    M, K, N = (4096, 8192, 8192) if not quick else (1024, 2048, 2048)
    with emulator.trace(execute=False) as tr:
        t0 = cpu()
        matmul_tiled(emulator.ShapeDtype((K, M), "bfloat16"), emulator.ShapeDtype((K, N), "bfloat16"))
        dry = cpu() - t0
    shape_only = {"shape": [M, K, N], "instructions": len(tr), "cpu_s": dry}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"cpus": os.cpu_count(), "load": load, "kernels": kernels, "overheads": overheads,
            "logical_cores": lnc, "shape_only": shape_only}


def print_run(m: dict) -> None:
    print(f"machine: {m['cpus']} CPUs, load average {m['load']:.1f} (other load inflates every timing; the "
          "ratios compare runs made under the same load)")
    print(f"{'kernel':<34} {'emu ms':>9} {'trace ms':>9} {'numpy ms':>9} {'ratio':>8} {'instrs':>8} {'us/instr':>9}")
    for name, k in m["kernels"].items():
        per = k["emu_s"] / k["instructions"] * 1e6
        print(f"{name:<34} {k['emu_s'] * 1e3:9.1f} {k['trace_s'] * 1e3:9.1f} {k['numpy_s'] * 1e3:9.1f} "
              f"{k['emu_s'] / k['numpy_s']:7.2f}x {k['instructions']:8d} {per:9.1f}")
    print()
    for label, o in m["overheads"].items():
        print(f"emulator overhead per instruction beyond the numpy op, {label} namespace (CPU time): "
              f"{o['us']:.1f} us ({o['traced_us']:.1f} us while recording a trace); goal < 20 us")
    lnc = m["logical_cores"]
    if "error" in lnc:
        print(f"logical cores: not measured ({lnc['error']})")
    else:
        print(f"logical cores: {lnc['matmuls']} matmuls (1 HBM store per 8) on kernel[2] {lnc['two_cores_s'] * 1e3:.1f} "
              f"ms wall, on one core {lnc['one_core_s'] * 1e3:.1f} ms: {lnc['two_cores_s'] / lnc['one_core_s']:.2f}x")
    s = m["shape_only"]
    M, K, N = s["shape"]
    print(f"shape-only trace of the matmul tutorial at {M}x{K}x{N}: {s['instructions']} instructions in "
          f"{s['cpu_s']:.2f} s CPU ({s['cpu_s'] / s['instructions'] * 1e6:.1f} us per instruction)")


# Shown beside the others but never judged: since 9e4cd76 logical cores run in lockstep (a kernel's result
# no longer depends on thread timing), which costs thread hand-overs the free-running threads did not.
LNC_FIGURE = "logical cores: kernel[2] / one core (not judged)"


def figures(m: dict) -> dict[str, float]:
    """The figures `--baseline` compares (lower is better for every one): each kernel's ratio to numpy,
    the per-instruction overheads, the logical-core ratio and the shape-only trace's cost."""
    out = {}
    for name, k in m["kernels"].items():
        if "tiny" not in name:
            out[f"{name}: ratio to numpy"] = k["emu_s"] / k["numpy_s"]
    for label, o in m["overheads"].items():
        out[f"{label} overhead per instruction (us)"] = o["us"]
        out[f"{label} overhead while tracing (us)"] = o["traced_us"]
    lnc = m["logical_cores"]
    if "error" not in lnc:
        out[LNC_FIGURE] = lnc["two_cores_s"] / lnc["one_core_s"]
    s = m["shape_only"]
    out["shape-only trace (us per instruction)"] = s["cpu_s"] / s["instructions"] * 1e6
    return out


def run_pairs(baseline: str, pairs: int, quick: bool) -> dict:
    from benchmarks.baseline import NoWorktree, baseline_beside
    from benchmarks.pairs import compare_pairs

    one_thread = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    runs: dict[str, list[dict]] = {"baseline": [], "this": []}
    me = Path(__file__).resolve()
    try:
        with baseline_beside(baseline, "nkitui-bench-emu-") as (base_tree, env):
            for i in range(pairs):
                order = [("baseline", base_tree), ("this", me.parents[1])]
                if i % 2:
                    order.reverse()
                for side, tree in order:
                    cmd = [sys.executable, str(me), "--json", "--cpu-clock"] + (["--quick"] if quick else [])
                    done = subprocess.run(cmd, capture_output=True, text=True,
                                          env={**env, **one_thread, "NKITUI_BENCH_TREE": str(tree)})
                    if done.returncode != 0:
                        return {"error": f"{side} run {i + 1} failed: {done.stderr.strip()[-2000:]}"}
                    runs[side].append(json.loads(done.stdout))
                    print(f"pair {i + 1}/{pairs}: {side} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    except NoWorktree as exc:
        return {"error": str(exc)}
    rows = compare_pairs([figures(m) for m in runs["baseline"]], [figures(m) for m in runs["this"]],
                         not_judged={LNC_FIGURE})
    return {"baseline_commit": baseline, "pairs": pairs, "quick": quick, "figures": rows, "runs": runs}


def print_comparison(result: dict) -> None:
    print(f"this checkout against {result['baseline_commit']}: {result['pairs']} alternated pairs, BLAS on one "
          "thread, CPU time; lower is better for every figure")
    print(f"{'figure':<46} {'baseline':>9} {'this':>9} {'this/base':>9} {'lower in':>9}")
    for r in result["figures"]:
        if r["baseline"] is None:
            print(f"{r['figure']:<46} {'-':>9} {r['this']:9.2f}   (the baseline cannot run it)")
            continue
        flag = "  WORSE" if r["worse"] else ""
        print(f"{r['figure']:<46} {r['baseline']:9.2f} {r['this']:9.2f} {r['ratio']:8.2f}x "
              f"{r['lower_in']:>4}/{r['pairs']}{flag}")
    worse = [r["figure"] for r in result["figures"] if r.get("worse")]
    print("worse than the baseline: " + (", ".join(worse) if worse else "none"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes (CI smoke run)")
    ap.add_argument("--json", action="store_true", help="print one run's figures as JSON")
    ap.add_argument("--baseline", metavar="COMMIT", help="compare against COMMIT's emulator (alternated runs)")
    ap.add_argument("--pairs", type=int, default=6, help="runs per side with --baseline (default 6)")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="time the kernels in CPU seconds (--baseline's runs, with BLAS on one thread)")
    args = ap.parse_args()
    if args.baseline:
        result = run_pairs(args.baseline, max(1, args.pairs), args.quick)
        if "error" in result:
            print(result["error"], file=sys.stderr)
            return 2
        print_comparison(result)
        return 1 if any(r.get("worse") for r in result["figures"]) else 0
    m = measure(args.quick, time.process_time if args.cpu_clock else time.perf_counter)
    if args.json:
        print(json.dumps(m))
    else:
        print_run(m)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

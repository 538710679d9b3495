"""End to end: real NKI kernels run on the emulator, their traces go through the cost model."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nkitui import emulator
from nkitui.perf import estimate, estimate_latency

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "benchmarks" / "costmodel_kernels" / "matmul_tutorial.py"


@pytest.fixture(scope="module")
def tutorial():
    was = emulator.installed()
    emulator.install()
    spec = importlib.util.spec_from_file_location("perf_e2e_matmul_tutorial", KERNELS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    if not was:
        emulator.uninstall()


def trace_of(kernel, *args, execute=False, target="trn1"):
    with emulator.trace(execute=execute, target=target, capacity="warn") as tr:
        out = kernel(*args)
    return tr, out


def test_executed_kernel_trace_is_costed(tutorial):
    rng = np.random.default_rng(0)
    import ml_dtypes
    a = rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)  # lhsT [K, M]
    b = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    tr, out = trace_of(tutorial.matmul_tiled, a, b, execute=True)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    assert np.abs(out.astype(np.float32) - ref).max() <= 0.02 * np.abs(ref).max()
    r = estimate(tr)
    assert r.target == "trn1" and r.source == "estimated"
    assert r.summary["model_flops"] == 2 * 128 * 256 * 1024
    assert r.summary["matmul_instruction_count"] == 2 * 2
    assert r.summary["hbm_write_bytes"] == 128 * 1024 * 2
    assert r.extras["folded_psum_zeroing"] == 2  # nl.zeros(psum) + `+=` is folded into the matmuls
    assert {h.file for h in r.hotspots} == {"matmul_tutorial.py"}
    assert estimate_latency(tr) == pytest.approx(r.total_time)


def test_tutorial_variants_keep_their_published_order_at_a_reduced_shape(tutorial):
    K, M, N = 1024, 2048, 1024
    a, b = emulator.ShapeDtype((K, M), "bfloat16"), emulator.ShapeDtype((K, N), "bfloat16")
    recs = {}
    for name, kern in tutorial.KERNELS.items():
        tr, _ = trace_of(kern, a, b)
        recs[name] = estimate(tr)
    times = [recs[n].total_time for n in ("tiled", "hoisted", "block_free", "block_all")]
    assert times == sorted(times, reverse=True)
    assert recs["tiled"].engine_percent("dma") > 80  # the tiled kernels wait on DMA
    assert recs["block_all"].summary["hfu_estimated_percent"] == max(
        r.summary["hfu_estimated_percent"] for r in recs.values())
    assert recs["tiled"].hotspots[0].by_engine.keys() == {"dma"}


def test_benchmark_hook_reports_the_estimate_as_latency(tutorial):
    import neuronxcc.nki as nki
    K, M, N = 256, 128, 512
    a, b = emulator.ShapeDtype((K, M), "bfloat16"), emulator.ShapeDtype((K, N), "bfloat16")
    emulator.set_latency_estimator(estimate_latency)
    try:
        with emulator.options(execute=False, target="trn1"):
            bench = nki.benchmark(warmup=1, iters=1)(tutorial.matmul_tiled)
            bench(a, b)
    finally:
        emulator.set_latency_estimator(None)
    res = bench.benchmark_result
    assert res.nc_latency.get_latency_percentile(50) == pytest.approx(estimate_latency(res.trace) * 1e6)


CHILD = """
import importlib.util, json, sys
from nkitui import emulator
emulator.install()
import neuronxcc.nki as nki
spec = importlib.util.spec_from_file_location("child_tutorial", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
before = "nkitui.perf" in sys.modules
a, b = emulator.ShapeDtype((256, 128), "bfloat16"), emulator.ShapeDtype((256, 1024), "bfloat16")
with emulator.options(execute=False, target="trn1"):
    bench = nki.benchmark(warmup=2, iters=5)(mod.matmul_tiled)
    bench(a, b)
res = bench.benchmark_result
from nkitui.perf import estimate_latency
print(json.dumps({"perf_loaded_before": before, "source": res.source,
                  "p50_us": res.nc_latency.get_latency_percentile(50),
                  "estimate_us": estimate_latency(res.trace) * 1e6}))
"""


def test_latency_estimator_named_in_the_environment_serves_benchmark_in_a_child_process():
    # how the executor's worker uses it: the variable in the child's environment, nothing registered
    env = dict(os.environ, NKITUI_LATENCY_ESTIMATOR="nkitui.perf")
    out = subprocess.run([sys.executable, "-c", CHILD, str(KERNELS)], env=env, capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["perf_loaded_before"] is False  # the emulator imported the cost model by name, when asked
    assert res["source"] == "cost-model estimate"
    assert res["p50_us"] == pytest.approx(res["estimate_us"])
    assert 1.0 < res["p50_us"] < 1000.0  # a 128x256x1024 bf16 matmul: microseconds, not the wall time


def test_without_the_variable_benchmark_reports_labelled_wall_time():
    env = {k: v for k, v in os.environ.items() if k != "NKITUI_LATENCY_ESTIMATOR"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(KERNELS)], env=env, capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["source"] == "emulator wall time (not device time)"


def test_a_gather_of_whole_rows_records_row_sized_runs_and_an_element_gather_elements():
    # the DMA moves one descriptor per contiguous run: rows gathered by index are row-sized runs, not elements
    import neuronxcc.nki as nki_legacy
    import neuronxcc.nki.language as nl

    @nki_legacy.jit
    def gather_rows(table, idx):
        out = nl.ndarray((128, 512), dtype=table.dtype, buffer=nl.shared_hbm)
        ids = nl.load(idx)
        rows = nl.load(table[ids[nl.arange(128)[:, None], 0], nl.arange(512)[None, :]])
        nl.store(out, rows)
        return out

    @nki_legacy.jit
    def gather_elements(table, idx):
        out = nl.ndarray((128, 1), dtype=table.dtype, buffer=nl.shared_hbm)
        ids = nl.load(idx)
        vals = nl.load(table[nl.arange(128)[:, None], ids[nl.arange(128)[:, None], 0]])
        nl.store(out, vals)
        return out

    table = np.arange(1024 * 512, dtype=np.float32).reshape(1024, 512)
    for kernel, run, step in ((gather_rows, 512 * 4, 7), (gather_elements, 4, 3)):
        idx = np.arange(128, dtype=np.int32).reshape(128, 1) * step
        with emulator.trace(target="trn1") as tr:
            kernel(table, idx)
        gather = [i for i in tr.instructions if i.meta.get("indirect")]
        assert gather and gather[0].meta["contiguous_bytes"] == run, kernel
    rec = estimate(tr, "trn1")
    assert rec.summary["dma_transfer_count"] == 3


def test_emulator_and_cost_model_count_live_sbuf_alike(tutorial):  # the fixture installs the emulator
    """The emulator's capacity rule and the cost model's program-order SBUF demand both take a tile from its
    first use to its last use (as the compiler allocates): a tile declared before the loop that first writes
    it, after another tile died, adds nothing to the peak in either (issue #19)."""
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def declared_early(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        late = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
        for i in nl.sequential_range(2):
            early = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=early, src=x)
            nisa.dma_copy(dst=out, src=early)
        nisa.dma_copy(dst=late, src=y)
        nisa.dma_copy(dst=out, src=late)
        return out

    x = emulator.ShapeDtype((128, 16384), "float32")
    tr, _ = trace_of(declared_early, x, x, target="trn2")
    emulated = tr.meta["launches"][0]["sbuf_peak_bytes_per_partition"]
    assert emulated == 16384 * 4
    assert estimate(tr, "trn2").extras["sbuf_demand_bytes_per_partition"] == emulated

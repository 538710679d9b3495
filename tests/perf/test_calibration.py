"""benchmarks/calibration.py at small shapes: every tutorial family traced by the emulator, estimated on its
target and put beside its published figure; the leave-one-family-out machinery on one family."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def calibration():
    spec = importlib.util.spec_from_file_location("nkitui_calibration", ROOT / "benchmarks" / "calibration.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through the module
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def small(calibration, tmp_path_factory):
    return calibration.run("small", fit=False, use_cache=False, quiet=True)


def test_every_family_is_estimated_beside_its_published_figures(calibration, small):
    results = small["results"]
    assert {r.case.family for r in results.values()} == set(calibration.FAMILIES)
    for r in results.values():
        assert r.instructions > 0 and r.total_s > 0
        if r.case.published_s:
            assert r.ratio == pytest.approx(r.total_s / r.case.published_s)
    # published engine percentages are reported beside the estimates, for the trn2 walkthrough all four
    trn2 = [p for p in small["percent"] if p["case"].startswith("trn2")]
    assert {p["case"] for p in trn2} == {"trn2 tiled", "trn2 hoisted", "trn2 block_mn", "trn2 block_mnk"}
    assert all(0 <= p["estimated"] <= 100 and p["execution_only"] <= p["estimated"] + 1e-9 for p in trn2)


def test_published_optimisation_steps_keep_their_direction_at_small_shapes(small):
    steps = {s["step"]: s for s in small["steps"]}
    for name in ("loads hoisted", "free dims blocked", "all dims blocked", "v2/v1 loop reordering (4096 ch)",
                 "v2/v1 bn_stats + tensor_scalar"):
        assert steps[name]["ranked"], steps[name]
    assert steps["v3 slope seq 1024->2048"]["estimated"] == pytest.approx(2.0, rel=0.15)  # linear in seq_len


def test_the_trn2_walkthrough_goes_from_dma_bound_to_tensore_bound(small):
    pct = {(p["case"], p["lane"]): p["estimated"] for p in small["percent"]}
    assert pct[("trn2 tiled", "dma")] > 90 and pct[("trn2 block_mnk", "dma")] < 50
    assert pct[("trn2 block_mnk", "tensor")] > 85 and pct[("trn2 block_mnk", "vector")] > 5


def test_leave_one_family_out_puts_its_constants_back_to_their_priors(calibration):
    runner = calibration.Runner("small", ["trn2 tiled", "trn2 block_mnk"], use_cache=False)
    shipped = calibration.current_values()
    values = runner.fit(exclude="trn2", start=shipped, rounds=1)
    (p,) = [p for p in calibration.PARAMS if p.families == ("trn2",)]
    assert values[p.name] == p.prior  # the only family informing it is out: the documented prior
    others = [q for q in calibration.PARAMS if "trn2" not in q.families]
    assert all(values[q.name] == shipped[q.name] for q in others)
    predicted = runner.results(calibration.specs_for(values))
    fitted = runner.results(calibration.specs_for(shipped))
    # the walkthrough's TensorE activity is what its DMA constant is fitted on: the prior moves it
    assert predicted["trn2 tiled"].pct["tensor"] != pytest.approx(fitted["trn2 tiled"].pct["tensor"])


def test_reloads_of_the_blocked_mn_kernel_are_prefetched_not_issued_just_in_time(calibration):
    # trn2 blocked M,N in fp32 with the walkthrough's K = 8192: two rhs columns and two lhsT columns (320 KiB per
    # partition) do not fit in 208 KiB, so part of the rhs is loaded again for the second row of output tiles.
    # The compiler places those reloads like any load, as early as their space allows: TensorE stays busy (the
    # profile: TensorE 99.52%, DMA 95.70%). Issued just in time they queued behind other transfers and left
    # TensorE waiting (85.8% / 77.5% at the published shape before).
    from nkitui import emulator
    from nkitui.perf import estimate

    mod = calibration._module("matmul_trn2.py")
    with emulator.trace(execute=False, target="trn2", capacity="off") as tr:
        mod.KERNELS["block_mn"](emulator.ShapeDtype((8192, 512), "float32"), emulator.ShapeDtype((8192, 2048), "float32"))
    rec = estimate(tr, "trn2")
    assert rec.summary["spill_reload_bytes"] > 0
    assert rec.engines["tensor"].active_time_percent > 93  # 83.9 when issued just in time
    assert abs(rec.engines["dma"].active_time_percent - 95.70) < 15  # 73.7 when issued just in time


def test_spill_reloads_of_computed_tiles_stay_just_in_time(calibration):
    # blocked M,N,K with two M blocks: the SBUF partial sums (128 KiB) plus the rhs and lhsT rows (96 KiB) exceed
    # 208 KiB, so partial sums are spilled and reloaded. That compiler spill code sits next to its user; issued
    # as early as space allows, the reloads kept the DMA queues busy throughout (100% active; the profile shows
    # 21.54% at the published shape).
    from nkitui import emulator
    from nkitui.perf import estimate

    mod = calibration._module("matmul_trn2.py")
    with emulator.trace(execute=False, target="trn2", capacity="off") as tr:
        mod.KERNELS["block_mnk"](emulator.ShapeDtype((2048, 4096), "float32"), emulator.ShapeDtype((2048, 1024), "float32"))
    rec = estimate(tr, "trn2")
    assert rec.summary["spill_save_bytes"] > 0 and rec.summary["spill_reload_bytes"] > 0
    assert rec.engines["dma"].active_time_percent < 50  # 100.0 with early spill reloads

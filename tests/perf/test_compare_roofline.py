"""A/B comparison, roofline and speed of light."""

from pathlib import Path

import pytest

from nkitui.perf import compare, estimate, load_profile, minimal_work, roofline_point, speed_of_light
from nkitui.perf.hardware import TARGETS
from tests.perf.test_estimate import matmul_trace

DATA = Path(__file__).parent / "data"


def test_ab_compare_of_two_estimates():
    tr = matmul_trace()
    a, b = estimate(tr, "trn1"), estimate(tr, "trn2")
    c = compare(a, b)
    assert c.speedup == pytest.approx(a.total_time / b.total_time) and c.speedup > 1
    assert "B mm (estimated, trn2) is" in c.headline() and "faster than A mm (estimated, trn1)" in c.headline()
    t = c.metric("total_time")
    assert (t.better, t.unit) == ("b", "s") and t.delta == pytest.approx(b.total_time - a.total_time)
    assert c.metric("hbm_read_bytes").better == "same"  # the same kernel moves the same bytes
    assert c.metric("dma_active_time_percent").better is None  # busy-ness has no direction
    assert c.warnings == ["the runs are on different targets (trn1 vs trn2): the hardware differs, not only the "
                          "kernels"]
    assert c.to_json()["metrics"][0]["key"] == "total_time"


def test_two_equal_runs_take_the_same_time_rather_than_1_00x_faster():
    a = estimate(matmul_trace(), "trn2")
    headline = compare(a, a).headline()
    assert "take the same time" in headline and "faster" not in headline and "slower" not in headline


def test_compare_estimate_with_measurement_warns_and_diffs_lines():
    measured = load_profile(DATA / "explorer_view.json")
    est = estimate(matmul_trace(), "trn1")
    c = compare(measured, est)
    assert "A is measured and B is estimated: the differences include the cost model's error" in c.warnings[0]
    assert c.lines and abs(c.lines[0].delta) >= abs(c.lines[-1].delta)
    with pytest.raises(KeyError):
        c.metric("no_such_metric")


def test_roofline_point_matches_the_tutorial_intensities():
    # tiled matmul inner loop: 16 MFLOP for 160 KB of HBM traffic -> intensity ~102 FLOP/B [L-MM]
    p = roofline_point(2 * 128 * 128 * 512, (128 * 128 + 128 * 512) * 2, 1e-6, "bfloat16", "trn1")
    assert p.arithmetic_intensity == pytest.approx(102.4)
    assert p.ridge == pytest.approx(223.8, rel=1e-3) and p.bound == "memory"
    assert p.attainable_flops_per_s == pytest.approx(102.4 * TARGETS["trn1"].memory_bytes_per_s)
    # fully blocked kernel: 683 FLOP/B, compute bound
    q = roofline_point(2 * 2048 * 1024 * 1024, (2048 * 1024 + 1024 * 1024) * 2, 1.0, "bfloat16", "trn1")
    assert q.arithmetic_intensity == pytest.approx(682.7, rel=1e-3) and q.bound == "compute"
    assert roofline_point(1e9, 0, 1.0, target="trn1") is None


def test_speed_of_light_of_the_tutorial_matmul():
    work = minimal_work("matmul", [((8192, 4096), "bfloat16"), ((8192, 8192), "bfloat16")],
                        [((4096, 8192), "bfloat16")], lhs_transposed=True)
    assert work.flops == 2 * 4096 * 8192 * 8192
    assert work.hbm_bytes == (8192 * 4096 + 8192 * 8192 + 4096 * 8192) * 2
    sol = speed_of_light(work.flops, work.hbm_bytes, "bfloat16", "trn1")
    assert sol.bound == "compute" and sol.bound_s == pytest.approx(5.99e-3, rel=2e-3)
    assert sol.memory_s == pytest.approx(work.hbm_bytes / 272e9)
    assert sol.against(6.97e-3).achieved_percent == pytest.approx(86.0, abs=0.2)  # the published 85.24% HFU
    assert speed_of_light(work.flops, work.hbm_bytes, "float32", "trn1").compute_s == pytest.approx(4 * sol.compute_s)
    assert speed_of_light(work.flops, work.hbm_bytes, "float8_e4m3", "trn2").compute_s == pytest.approx(
        work.flops / (2 * TARGETS["trn2"].tensor_peak_flops))


def test_speed_of_light_of_memory_bound_operations():
    x = ((4096, 4096), "float32")
    add = minimal_work("elementwise", [x, x], [x])
    assert add.flops == 0 and add.vector_ops == 4096 * 4096
    sol = speed_of_light(add.flops, add.hbm_bytes, "float32", "trn2", add.vector_ops)
    assert sol.bound == "memory" and sol.bound_s == pytest.approx(3 * 4096 * 4096 * 4 / (2.9e12 / 8))
    norm = minimal_work("layernorm", [x], [x])
    assert norm.vector_ops == 3 * 4096 * 4096


def test_minimal_work_of_attention_and_input_errors():
    q = ((8, 2048, 128), "bfloat16")
    full = minimal_work("attention", [q, q, q], [q])
    causal = minimal_work("attention", [q, q, q], [q], causal=True)
    assert full.flops == 8 * 2 * 2048 * 2048 * 256 and causal.flops == full.flops / 2
    with pytest.raises(ValueError, match="contraction sizes differ: A gives K=3, B gives K=4"):
        minimal_work("matmul", [((2, 3), "float32"), ((4, 5), "float32")], [])
    with pytest.raises(ValueError, match="unknown kind 'conv9d'"):
        minimal_work("conv9d", [((2, 3), "float32")], [])
    with pytest.raises(ValueError, match="at least one input or output"):
        minimal_work("copy", [], [])
    with pytest.raises(ValueError, match="must be >= 0"):
        speed_of_light(-1, 0)

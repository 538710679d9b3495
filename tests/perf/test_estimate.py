"""`estimate()` and the PerfRecord it returns: profiler keys, labels, JSON, hot lines, timeline."""

import json

import pytest

from nkitui.perf import SUMMARY_KEYS, PerfRecord, estimate, minimal_work
from nkitui.perf.hardware import TARGETS
from nkitui.perf.synthetic import TraceBuilder


def matmul_trace(target="trn1", m=256, k=256, n=1024):
    b = TraceBuilder(target, kernel="mm", file="mm.py")
    lhsT, rhs = b.hbm("lhsT", (k, m), "bfloat16"), b.hbm("rhs", (k, n), "bfloat16")
    out = b.hbm("out", (m, n), "bfloat16")
    for mi in range(m // 128):
        for ni in range(n // 512):
            ps = b.psum("ps", (128, 512))
            for ki in range(k // 128):
                a, w = b.sbuf("a", (128, 128), "bfloat16"), b.sbuf("w", (128, 512), "bfloat16")
                b.load(a.all(), lhsT.region((ki * 128, ki * 128 + 128), (mi * 128, mi * 128 + 128)), line=10)
                b.load(w.all(), rhs.region((ki * 128, ki * 128 + 128), (ni * 512, ni * 512 + 512)), line=11)
                b.matmul(ps.all(), a.all(), w.all(), line=12, accumulate=ki > 0)
            sb = b.sbuf("o", (128, 512), "bfloat16")
            b.compute("vector", "tensor_copy", sb.all(), ps.all(), line=13)
            b.store(out.region((mi * 128, mi * 128 + 128), (ni * 512, ni * 512 + 512)), sb.all(), line=14)
    return b.build()


def test_record_carries_every_profiler_summary_key_and_is_labelled_estimated():
    r = estimate(matmul_trace())
    assert r.source == "estimated" and r.label == "estimated"
    assert set(SUMMARY_KEYS) <= set(r.summary)
    assert r.summary["total_time"] == r.total_time > 0
    assert r.target == "trn1" and r.kernel == "mm"
    assert any("not a hardware measurement" in n for n in r.notes)


def test_flop_and_byte_accounting():
    m, k, n = 256, 256, 1024
    r = estimate(matmul_trace(m=m, k=k, n=n))
    s = r.summary
    assert s["model_flops"] == s["hardware_flops"] == 2 * m * k * n
    assert s["matmul_instruction_count"] == (m // 128) * (n // 512) * (k // 128)
    loads = (m // 128) * (n // 512) * (k // 128) * (128 * 128 + 128 * 512) * 2
    assert s["hbm_read_bytes"] == loads
    assert s["hbm_write_bytes"] == m * n * 2
    assert s["inputs_and_weights_size_bytes"] == (k * m + k * n) * 2
    peak = TARGETS["trn1"].tensor_peak_flops
    assert s["mfu_estimated_percent"] == pytest.approx(100 * 2 * m * k * n / (peak * r.total_time))
    hbm = s["hbm_read_bytes"] + s["hbm_write_bytes"]
    assert s["mbu_estimated_percent"] == pytest.approx(100 * hbm / r.total_time / 410e9)
    assert s["mm_arithmetic_intensity"] == pytest.approx(2 * m * k * n / hbm)
    assert s["dma_transfer_count"] == s["sync_engine_instruction_count"]


def test_engine_percentages_are_consistent_and_dma_bound_for_a_tiled_matmul():
    r = estimate(matmul_trace())
    for lane, st in r.engines.items():
        assert 0 <= st.active_time_percent <= 100.0 + 1e-9
        assert st.active_time_percent == pytest.approx(100 * st.active_time / r.core_time)  # of the core time (launch overhead apart)
        assert r.summary.get(f"{lane}_engine_active_time_percent", st.active_time_percent) == st.active_time_percent
    assert r.engine_percent("dma") > 80 > r.engine_percent("tensor")
    assert r.roofline.bound == "memory"


def test_hot_lines_rank_the_dma_lines_first():
    r = estimate(matmul_trace())
    top = r.hotspots[0]
    assert top.location == "mm.py:11" and top.by_engine == {"dma": pytest.approx(top.time)}
    assert {h.location for h in r.hotspots} == {f"mm.py:{i}" for i in range(10, 15)}
    assert sum(h.percent for h in r.hotspots) == pytest.approx(100.0)
    mm_line = next(h for h in r.hotspots if h.line == 12)
    assert mm_line.opcodes == {"nc_matmul": 8} and mm_line.flops == 2 * 256 * 256 * 1024


def test_json_round_trip():
    tr = matmul_trace()
    work = minimal_work("matmul", [((256, 256), "bfloat16"), ((256, 1024), "bfloat16")],
                        [((256, 1024), "bfloat16")], lhs_transposed=True)
    r = estimate(tr, work=work)
    text = json.dumps(r.to_json())
    back = PerfRecord.from_json(json.loads(text))
    assert back.to_json() == r.to_json()
    assert back.speed_of_light.achieved_percent == pytest.approx(100 * back.speed_of_light.bound_s / r.total_time)
    with pytest.raises(ValueError, match="lacks the field 'summary'"):
        PerfRecord.from_json({"version": 1, "source": "estimated", "target": "trn1", "total_time": 1.0,
                              "engines": {}})
    with pytest.raises(ValueError, match="source must be 'estimated' or 'measured'"):
        PerfRecord(source="guessed", target="trn1", kernel="", total_time=1.0, summary={}, engines={})


def test_timeline_and_strip_chart_bins():
    r = estimate(matmul_trace())
    assert set(r.timeline) >= {"tensor", "vector", "dma", "sync"}
    for ivs in r.timeline.values():
        assert all(s < e for s, e in ivs)
        assert all(a[1] <= b[0] for a, b in zip(ivs, ivs[1:]))  # sorted, disjoint
    bins = r.utilisation_bins(20)
    assert all(len(v) == 20 and all(0 <= x <= 1 for x in v) for v in bins.values())
    assert sum(bins["dma"]) / 20 == pytest.approx(r.engine_percent("dma") / 100, abs=0.05)
    with pytest.raises(ValueError):
        r.utilisation_bins(0)


def test_target_override_and_targets_differ():
    tr = matmul_trace()
    r1, r2, r3 = estimate(tr), estimate(tr, "trn2"), estimate(tr, "trn3")
    assert (r1.target, r2.target, r3.target) == ("trn1", "trn2", "trn3")
    # a DMA-bound kernel speeds up with the faster DMA engines of later generations
    assert r1.total_time > r2.total_time > r3.total_time


def test_empty_trace_gives_a_zero_record():
    from nkitui.emulator.trace import Trace
    r = estimate(Trace(target="trn2"))
    assert r.total_time == 0 and r.summary["mfu_estimated_percent"] == 0 and r.hotspots == []

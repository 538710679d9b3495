"""The list scheduler: overlap, dependencies, DMA, PSUM bank rotation, documented hardware rules."""

import pytest

from nkitui.emulator.trace import Access, Instruction, Trace
from nkitui.perf.hardware import TARGETS
from nkitui.perf.schedule import simulate
from nkitui.perf.synthetic import TraceBuilder

TRN1, TRN2 = TARGETS["trn1"], TARGETS["trn2"]
VEC_CLOCK = TRN1.clock_hz["vector"]
ACT_CLOCK = TRN1.clock_hz["scalar"]


def sim(b: TraceBuilder, spec=TRN1):
    return simulate(b.build(), spec)


def test_independent_engines_overlap():
    b = TraceBuilder("trn1")
    x, y = b.sbuf("x", (128, 1024), "float32"), b.sbuf("y", (128, 1024), "float32")
    u, v = b.sbuf("u", (128, 1024), "float32"), b.sbuf("v", (128, 1024), "float32")
    b.compute("vector", "tensor_copy", u.all(), x.all())
    b.compute("scalar", "activation", v.all(), y.all())
    s = sim(b)
    assert s.start == [0.0, 0.0]
    assert s.total_time == pytest.approx(max(1024 / VEC_CLOCK, 1024 / ACT_CLOCK))


def test_a_dependent_chain_serialises_with_the_dependency_latency():
    b = TraceBuilder("trn1")
    x, y, z = (b.sbuf(n, (128, 1024), "float32") for n in "xyz")
    b.compute("vector", "tensor_copy", y.all(), x.all())  # writes y
    b.compute("scalar", "activation", z.all(), y.all())  # reads y: RAW
    s = sim(b)
    latency = TRN1.cycles.dependency_latency / VEC_CLOCK
    assert s.start[1] == pytest.approx(s.end[0] + latency)
    # the consumer waited, so its static overhead is exposed
    assert s.end[1] - s.start[1] == pytest.approx((1024 + TRN1.cycles.static_overhead) / ACT_CLOCK)


def test_tiny_dependent_scalar_instructions_issue_every_264_cycles():
    # PERF Opt #5a: back-to-back dependent 1-element ScalarE instructions issue every ~189 ns on NC-v2
    b = TraceBuilder("trn1")
    tiles = [b.sbuf(f"t{i}", (128, 1), "float32") for i in range(11)]
    for i in range(10):
        b.compute("scalar", "activation", tiles[i + 1].all(), tiles[i].all())
    s = sim(b)
    periods = [s.start[i + 1] - s.start[i] for i in range(9)]
    # the first instruction did not wait, so its start-up overhead stays hidden: 64 + 100 cycles
    assert periods[0] == pytest.approx(164 / ACT_CLOCK)
    assert periods[1:] == pytest.approx([264 / ACT_CLOCK] * 8)  # 64 + 100 exposed + 100 latency
    assert periods[1] == pytest.approx(188.6e-9, rel=0.01)


def test_tiny_independent_instructions_run_at_the_min_ii_floor():
    b = TraceBuilder("trn1")
    src = b.sbuf("src", (128, 1), "float32")
    for i in range(10):
        b.compute("scalar", "activation", b.sbuf(f"d{i}", (128, 1), "float32").all(), src.all())
    assert sim(b).total_time == pytest.approx(10 * 64 / ACT_CLOCK)


def test_write_after_read_waits_for_the_reader():
    b = TraceBuilder("trn1")
    x, y, z = (b.sbuf(n, (128, 2048), "float32") for n in "xyz")
    b.compute("scalar", "activation", y.all(), x.all())  # long read of x on ScalarE
    b.compute("vector", "memset", x.region(None, (0, 16)), value=1)  # overwrites part of x: WAR
    b.compute("vector", "memset", z.all(), value=1)  # independent of x
    s = sim(b)
    assert s.start[1] >= s.end[0]
    b2 = TraceBuilder("trn1")
    x2, y2 = b2.sbuf("x", (128, 2048), "float32"), b2.sbuf("y", (128, 2048), "float32")
    b2.compute("scalar", "activation", y2.all(), x2.region(None, (0, 1024)))
    b2.compute("vector", "memset", x2.region(None, (1024, 2048)), value=1)  # disjoint bytes: no dependency
    assert sim(b2).start[1] == 0.0


def test_matmuls_accumulating_into_one_psum_tile_run_back_to_back():
    b = TraceBuilder("trn1")
    a, w = b.sbuf("a", (128, 128), "bfloat16"), b.sbuf("w", (128, 512), "bfloat16")
    ps = b.psum("ps", (128, 512))
    for k in range(4):
        b.matmul(ps.all(), a.all(), w.all(), accumulate=k > 0)
    s = sim(b)
    step = 512 / TRN1.clock_hz["tensor"]
    assert [s.start[i + 1] - s.start[i] for i in range(3)] == pytest.approx([step] * 3)


def tiled_matmul(b: TraceBuilder, tiles: int, evict_engine: str = "vector"):
    """Load, matmul and evict `tiles` independent [128, 512] output tiles."""
    lhs, rhs = b.hbm("lhs", (128, 128 * tiles), "bfloat16"), b.hbm("rhs", (128, 512 * tiles), "bfloat16")
    out = b.hbm("out", (128, 512 * tiles), "float32")
    for t in range(tiles):
        a, w = b.sbuf(f"a{t}", (128, 128), "bfloat16"), b.sbuf(f"w{t}", (128, 512), "bfloat16")
        b.load(a.all(), lhs.region(None, (128 * t, 128 * (t + 1))), line=1)
        b.load(w.all(), rhs.region(None, (512 * t, 512 * (t + 1))), line=2)
        ps = b.psum(f"ps{t}", (128, 512))
        b.matmul(ps.all(), a.all(), w.all(), line=3, accumulate=False)
        sb = b.sbuf(f"o{t}", (128, 512), "float32")
        b.compute(evict_engine, "tensor_copy", sb.all(), ps.all(), line=4)
        b.store(out.region(None, (512 * t, 512 * (t + 1))), sb.all(), line=5)


def test_dma_overlaps_compute_in_a_pipelined_loop():
    b = TraceBuilder("trn1")
    tiled_matmul(b, 8)
    tr = b.build()
    s = simulate(tr, TRN1)
    dma = sum(e - st for (e, st, i) in zip(s.end, s.start, tr.instructions) if i.engine == "dma")
    compute = sum(e - st for (e, st, i) in zip(s.end, s.start, tr.instructions) if i.engine != "dma")
    assert s.total_time < dma + compute  # overlapped
    loads = [i for i, x in enumerate(tr.instructions) if x.engine == "dma" and x.out_mem == "sbuf"]
    mms = [i for i, x in enumerate(tr.instructions) if x.engine == "tensor"]
    assert s.start[loads[2]] < s.end[mms[0]] + 1e-6  # tile 1 loads while tile 0 computes


def test_a_single_dma_pays_the_fixed_latency_plus_bandwidth():
    b = TraceBuilder("trn1")
    src, dst = b.hbm("src", (128, 2048), "bfloat16"), b.sbuf("dst", (128, 2048), "bfloat16")
    b.load(dst.all(), src.all())
    s = sim(b)
    issue = TRN1.cycles.min_ii / TRN1.clock_hz["sync"]
    assert s.start[0] == pytest.approx(issue + 1.3e-6)
    assert s.end[0] - s.start[0] == pytest.approx(128 * 4096 / (16 * 17e9))


def test_a_store_waiting_for_its_data_does_not_hold_back_later_loads():
    b = TraceBuilder("trn1")
    x = b.sbuf("x", (128, 4096), "float32")
    b.compute("scalar", "activation", x.all(), x.all())  # long compute (~2.9 µs)
    out, src = b.hbm("out", (128, 4096), "float32"), b.hbm("src", (128, 1024), "float32")
    b.store(out.all(), x.all())  # waits for the activation
    y = b.sbuf("y", (128, 1024), "float32")
    b.load(y.all(), src.all())  # independent: the DMA engines are idle meanwhile
    s = sim(b)
    assert s.start[2] < s.start[1]
    assert s.end[2] <= s.start[1] + 1e-12  # done before the store needs the engines


def test_psum_bank_rotation_stalls_tensor_engine_behind_slow_evictions():
    def run(tiles):
        b = TraceBuilder("trn1")
        a, w = b.sbuf("a", (128, 128), "bfloat16"), b.sbuf("w", (128, 512), "bfloat16")
        for t in range(tiles):
            ps = b.psum(f"ps{t}", (128, 512))
            b.matmul(ps.all(), a.all(), w.all(), accumulate=False)
            # a slow eviction: reciprocal costs 8N VectorE cycles
            b.compute("vector", "reciprocal", b.sbuf(f"r{t}", (128, 512), "float32").all(), ps.all())
        tr = b.build()
        return tr, simulate(tr, TRN1)
    tr8, s8 = run(8)
    mm8 = [i for i, x in enumerate(tr8.instructions) if x.engine == "tensor"]
    assert s8.psum_bank_stall == 0.0  # eight banks: every matmul finds a free one
    assert s8.start[mm8[-1]] == pytest.approx(7 * 512 / TRN1.clock_hz["tensor"])
    tr9, s9 = run(9)
    mm9 = [i for i, x in enumerate(tr9.instructions) if x.engine == "tensor"]
    first_eviction = mm9[0] + 1
    assert s9.start[mm9[8]] >= s9.end[first_eviction]  # the ninth tile reuses bank 0
    assert s9.psum_bank_stall > 0


def test_zero_fill_of_psum_before_matmuls_is_folded():
    b = TraceBuilder("trn1")
    a, w = b.sbuf("a", (128, 128), "bfloat16"), b.sbuf("w", (128, 512), "bfloat16")
    ps = b.psum("ps", (128, 512))
    b.compute("vector", "memset", ps.all(), value=0)
    b.matmul(ps.all(), a.all(), w.all())
    s = sim(b)
    assert s.end[0] == s.start[0] == 0.0 and s.start[1] == 0.0
    assert s.folded_psum_zeroing == 1 and "vector" not in {k for k in s.intervals}


def test_nc_v2_serialises_vector_and_gpsimd_on_the_sbuf_port():
    def run(spec):
        b = TraceBuilder(spec.name)
        x, y, u, v = (b.sbuf(n, (128, 1024), "float32") for n in "xyuv")
        b.compute("vector", "tensor_copy", u.all(), x.all())
        b.compute("gpsimd", "tensor_copy", v.all(), y.all())
        return simulate(b.build(), spec)
    s1, s2 = run(TRN1), run(TRN2)
    assert s1.start[1] == pytest.approx(s1.end[0])  # trn1: one after the other
    assert s2.start[1] == 0.0  # trn2 lifts the restriction


def test_trn2_tensor_engine_is_throttled_after_idle():
    def run(spec):
        b = TraceBuilder(spec.name)
        a, w = b.sbuf("a", (128, 128), "bfloat16"), b.sbuf("w", (128, 512), "bfloat16")
        ps = b.psum("ps", (128, 512))
        for _ in range(40):
            b.matmul(ps.all(), a.all(), w.all())
        return simulate(b.build(), spec)
    s2 = run(TRN2)
    first = s2.end[0] - s2.start[0]
    last = s2.end[-1] - s2.start[-1]
    assert first == pytest.approx(2 * last)  # starts at 50%
    assert last == pytest.approx(512 / TRN2.clock_hz["tensor"])  # full speed after ~3 µs
    assert s2.throttled_time > 0
    assert run(TRN1).throttled_time == 0


def test_cores_have_their_own_engines():
    t = Trace(target="trn2")
    for core in (0, 1):
        acc = (Access(10 + core, "sbuf", 0, 128, 0, 4096),)
        t.append(Instruction(core, "vector", "tensor_copy", 128, 1024, ("float32",), "float32", ("sbuf",), "sbuf",
                             reads=acc, writes=(Access(20 + core, "sbuf", 0, 128, 0, 4096),), core=core))
    s = simulate(t, TRN2)
    assert s.start == [0.0, 0.0] and s.cores == 2
    assert set(s.intervals) == {"vector", "vector@1"}


def test_unknown_engine_is_reported_with_its_location():
    t = Trace(target="trn1")
    t.append(Instruction(7, "warp", "shfl", 128, 1, (), "float32", (), "sbuf", file="k.py", line=3))
    with pytest.raises(ValueError, match=r"instruction 7 \(shfl at k.py:3\): unknown engine 'warp'"):
        simulate(t, TRN1)


def test_many_disjoint_writes_to_one_output_stay_correct_after_record_merging():
    b = TraceBuilder("trn1")
    out = b.hbm("out", (128, 512 * 100), "float32")
    tiles = []
    for t in range(100):
        sb = b.sbuf(f"s{t}", (128, 512), "float32")
        b.compute("vector", "memset", sb.all(), value=1)
        b.store(out.region(None, (512 * t, 512 * (t + 1))), sb.all())
        tiles.append(sb)
    chk = b.sbuf("chk", (128, 512), "float32")
    b.load(chk.all(), out.region(None, (0, 512)))  # reads what the first store wrote
    tr = b.build()
    s = simulate(tr, TRN1)
    assert s.start[-1] >= s.end[1]  # RAW on the first store survives the merging of old records


def test_dma_pool_fills_idle_gaps_without_preempting_booked_work():
    from nkitui.perf.schedule import _Calendar
    cal = _Calendar()
    assert cal.fill(0.0, 1.0) == (0.0, 1.0)
    assert cal.fill(3.0, 1.0) == (3.0, 4.0)
    # released at 0.5: 2 s of the work fill the gap [1, 3], the last 0.5 s runs after 4
    assert cal.fill(0.5, 2.5) == (1.0, 4.5)
    assert (cal.bs, cal.be) == ([0.0], [4.5])
    assert cal.fill(10.0, 0.0) == (10.0, 10.0)


def test_in_place_update_of_an_input_waits_for_its_earlier_reads():
    b = TraceBuilder("trn1")
    x = b.hbm("x", (128, 4096), "float32")  # kernel input: read first
    t0, t1 = b.sbuf("t0", (128, 2048), "float32"), b.sbuf("t1", (128, 2048), "float32")
    b.load(t0.all(), x.region(None, (0, 2048)))
    b.load(t1.all(), x.region(None, (2048, 4096)))
    b.store(x.region(None, (0, 2048)), t0.all())  # writes the input in place
    s = sim(b)
    assert s.start[2] >= max(s.end[0], s.end[1])  # conservatively after every earlier read of x


def test_hbm_bandwidth_caps_dma_when_it_is_the_lower_limit():
    # trn2: 16 x 23 B/ns = 368 GB/s of DMA engines but 2.9 TB/s / 8 = 362.5 GB/s of HBM per core
    b = TraceBuilder("trn2")
    src, dst = b.hbm("src", (128, 4096), "bfloat16"), b.sbuf("dst", (128, 4096), "bfloat16")
    b.load(dst.all(), src.all())
    s = sim(b, TRN2)
    nbytes = 128 * 4096 * 2
    assert s.end[0] - s.start[0] == pytest.approx(nbytes / (2.9e12 / 8))
    assert nbytes / (2.9e12 / 8) > nbytes / (16 * 23e9)


def test_instructions_with_list_valued_meta_are_costed_and_cached():
    b = TraceBuilder("trn1")
    x = b.sbuf("x", (128, 512), "float32")
    for i in range(3):
        b.compute("vector", "tensor_reduce", b.sbuf(f"r{i}", (128, 1), "float32").all(), x.all(),
                  op="add", axes=[1])
    s = sim(b)
    assert s.total_time == pytest.approx(3 * 512 / VEC_CLOCK)
    assert s.lane_count["vector"] == 3


def test_dma_triggered_from_scalar_engine_with_hardware_dge_occupies_it():
    b = TraceBuilder("trn2")
    src, dst = b.hbm("src", (128, 2048), "bfloat16"), b.sbuf("dst", (128, 2048), "bfloat16")
    x, y = b.sbuf("x", (128, 512), "float32"), b.sbuf("y", (128, 512), "float32")
    b.load(dst.all(), src.all(), queue="scalar", dge_mode="hwdge")
    b.compute("scalar", "activation", y.all(), x.all())  # queued behind the trigger on ScalarE
    s = sim(b, TRN2)
    assert s.start[0] == pytest.approx(0.6e-6 + 1.3e-6)  # issue on ScalarE, then the fixed latency
    assert s.start[1] == pytest.approx(0.6e-6)
    assert s.intervals["scalar"][0] == [0.0, pytest.approx(0.6e-6 + 512 / TRN2.clock_hz["scalar"])]
    assert "sync" not in s.intervals


def _two_stores(first_cols, second_cols):
    b = TraceBuilder("trn1")
    out = b.hbm("out", (8, 1024), "float32")  # 8 partitions: one DMA engine each, room for both
    s0, s1 = b.sbuf("s0", (8, 512), "float32"), b.sbuf("s1", (8, 512), "float32")
    b.store(out.region(None, first_cols), s0.all())
    b.store(out.region(None, second_cols), s1.all())
    return sim(b)


def test_stores_to_disjoint_column_tiles_of_one_row_band_are_independent():
    s = _two_stores((0, 512), (512, 1024))
    assert s.start[1] < s.end[0]  # side by side on the DMA engines: no write-after-write


def test_stores_to_overlapping_column_tiles_keep_their_order():
    s = _two_stores((0, 512), (256, 768))
    assert s.start[1] >= s.end[0]


def test_a_load_of_other_columns_does_not_wait_for_an_earlier_store():
    def run(load_cols):
        b = TraceBuilder("trn1")
        out = b.hbm("out", (8, 1024), "float32")
        x = b.sbuf("x", (8, 4096), "float32")
        b.compute("scalar", "activation", x.all(), x.all())  # the stored data takes a while
        b.store(out.region(None, (0, 512)), x.region(None, (0, 512)))
        y = b.sbuf("y", (8, 512), "float32")
        b.load(y.all(), out.region(None, load_cols))
        return sim(b)

    independent = run((512, 1024))
    assert independent.start[2] < independent.start[1]
    dependent = run((256, 768))
    assert dependent.start[2] >= dependent.end[1]  # read-after-write on the overlapping columns


def test_three_dimensional_hbm_regions_use_rows_of_the_last_dimension():
    b = TraceBuilder("trn1")
    t = b.hbm("t", (4, 8, 64), "float32")
    a = t.region((1, 2), (2 * 64 + 16, 2 * 64 + 32)).access()  # t[1, 2, 16:32]
    assert (a.p0, a.p1, a.b0, a.b1) == (1 * 8 + 2, 1 * 8 + 3, 16 * 4, 32 * 4)
    whole = t.all().access()
    assert (whole.p0, whole.p1, whole.b0, whole.b1) == (0, 32, 0, 64 * 4)


def test_many_immediates_from_one_line_are_looked_up_not_searched(monkeypatch):
    # A kernel writing one immediate per element from one source line gives thousands of instructions
    # under one signature, each with its own meta: a list searched for each made the schedule
    # quadratic (8192 memsets took 92 s, past a run's timeout). Metas are looked up by a hashable form.
    import nkitui.perf.schedule as schedule

    compared = []
    same_meta = schedule._same_meta
    monkeypatch.setattr(schedule, "_same_meta", lambda *a: compared.append(1) or same_meta(*a))
    b = TraceBuilder("trn1")
    t = b.sbuf("t", (128, 4), "float32")
    n = 2000
    for i in range(n):
        b.compute("vector", "memset", t.region((i % 128, i % 128 + 1), (0, 1)), line=7, value=float(i))
    for i in range(3):  # the same metas again: each found, each costed as before
        b.compute("vector", "memset", t.region((0, 1), (0, 1)), line=7, value=float(i))
    s = sim(b)
    assert s.lane_count["vector"] == n + 3
    assert len(compared) <= 3 * (n + 3), len(compared)

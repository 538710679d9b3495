"""The SBUF allocator (limited prefetch, spills, reloads), launch overhead, in-flight vs execution time, and
the partition broadcast's eviction: the model fixes of issue #16, each on a trace built to show it."""

import pytest

from nkitui.perf import estimate
from nkitui.perf.hardware import TARGETS
from nkitui.perf.schedule import simulate
from nkitui.perf.synthetic import TraceBuilder

TRN1 = TARGETS["trn1"]
KIB = 1024


def streaming_kernel(tiles: int, cols: int, target: str = "trn1", op: str = "tensor_scalar") -> TraceBuilder:
    """Load a [128, cols] fp32 tile, compute on it with VectorE, store it; `tiles` times (independent tiles)."""
    b = TraceBuilder(target)
    x = b.hbm("x", (128 * tiles, cols), "float32")
    y = b.hbm("y", (128 * tiles, cols), "float32")
    for t in range(tiles):
        a = b.sbuf(f"a{t}", (128, cols), "float32")
        o = b.sbuf(f"o{t}", (128, cols), "float32")
        rows = (128 * t, 128 * (t + 1))
        b.load(a.all(), x.region(rows=rows), line=1)
        b.compute("vector", op, o.all(), a.all(), line=2, op0="multiply")
        b.store(y.region(rows=rows), o.all(), line=3)
    return b


def test_prefetch_is_limited_by_the_sbuf_that_is_free():
    # 32 KiB tiles and slow compute (VectorE reciprocal, 8N): the loads would run far ahead, but only a few
    # tiles fit in trn1's 176 KiB, so later loads wait for earlier tiles to die
    tr = streaming_kernel(12, 8192, op="reciprocal").build()
    sched = simulate(tr, TRN1)
    loads = [i for i, ins in enumerate(tr.instructions) if ins.opcode == "dma_copy" and ins.in_mems == ("hbm",)]
    assert sched.sbuf_peak_bytes <= TRN1.sbuf_usable_bytes_per_partition
    assert sched.sbuf_alloc_stall > 0
    roomy = simulate(tr, TRN1.with_model().__class__(**{**TRN1.__dict__, "sbuf_usable_bytes_per_partition": 10**7}))
    assert sched.start[loads[-1]] > roomy.start[loads[-1]]  # with room for everything the last load starts early
    assert sched.dma.spill_save_bytes == sched.dma.spill_reload_bytes == 0  # waiting sufficed: no spill


def test_live_data_beyond_sbuf_spills_and_the_traffic_is_reported():
    # eight 32 KiB accumulators written by VectorE and all read at the end: 256 KiB of dirty data > 176 KiB
    b = TraceBuilder("trn1")
    src = b.sbuf("src", (128, 8192), "float32")
    b.compute("vector", "memset", src.all(), value=0.0)
    accs = [b.sbuf(f"acc{i}", (128, 8192), "float32") for i in range(8)]
    for acc in accs:
        b.compute("vector", "tensor_scalar", acc.all(), src.all(), op0="add")
    out = b.sbuf("out", (128, 8192), "float32")
    for acc in accs:
        b.compute("vector", "tensor_tensor", out.all(), out.all(), acc.all(), op="add")
    rec = estimate(b.build(), "trn1")
    s = rec.summary
    assert s["spill_save_bytes"] > 0 and s["spill_reload_bytes"] >= s["spill_save_bytes"]
    assert s["spill_save_bytes"] % (128 * 8192 * 4) == 0  # whole tiles go out and come back
    assert rec.extras["sbuf_demand_bytes_per_partition"] > TRN1.sbuf_usable_bytes_per_partition
    assert rec.extras["sbuf_peak_bytes_per_partition"] <= TRN1.sbuf_usable_bytes_per_partition
    assert any("spills" in n for n in rec.notes)


def test_clean_copies_of_hbm_data_are_reloaded_not_saved():
    # loaded tiles that do not fit are dropped and loaded again (the profiler's "input reloading"), no save
    b = TraceBuilder("trn1")
    x = b.hbm("x", (128 * 8, 8192), "float32")
    tiles = [b.sbuf(f"t{i}", (128, 8192), "float32") for i in range(8)]
    for i, t in enumerate(tiles):
        b.load(t.all(), x.region(rows=(128 * i, 128 * (i + 1))))
    out = b.sbuf("out", (128, 8192), "float32")
    b.compute("vector", "memset", out.all(), value=0.0)
    for t in tiles:
        b.compute("vector", "tensor_tensor", out.all(), out.all(), t.all(), op="add")
    s = estimate(b.build(), "trn1").summary
    assert s["spill_save_bytes"] == 0 and s["spill_reload_bytes"] > 0


def test_small_partition_tiles_share_a_byte_range():
    # a [1, F] tile may start at partition 0, 32, 64 or 96 [ARCH2]: four of them share one byte range
    from nkitui.perf.schedule import _SbufTiles

    b = TraceBuilder("trn1")
    row = b.sbuf("row", (1, 8192), "float32")
    full = b.sbuf("full", (128, 8192), "float32")
    b.compute("vector", "memset", row.all(), value=0.0)
    b.compute("vector", "memset", full.all(), value=0.0)
    tr = b.build()
    tiles = _SbufTiles(tr)
    sizes, rows = tiles.sizes, tiles.rows
    assert sizes[row.storage] == 32 * KIB // 4 and sizes[full.storage] == 32 * KIB
    assert rows[row.storage] == 1


def test_launch_overhead_is_reported_apart_from_the_core_time():
    rec = estimate(streaming_kernel(2, 512).build(), "trn1")
    assert rec.launch_overhead == TRN1.launch_overhead_s > 0
    assert rec.total_time == pytest.approx(rec.core_time + rec.launch_overhead)
    assert rec.summary["total_time"] == rec.total_time
    assert rec.extras["core_time"] == rec.core_time
    # engine percentages are of the core time, as the profiler's core-execution selection shows them
    dma = rec.engines["dma"]
    assert dma.active_time_percent == pytest.approx(100 * dma.active_time / rec.core_time)
    none = estimate(streaming_kernel(2, 512).build(), TRN1.with_model(launch_overhead_s=0.0))
    assert none.total_time == pytest.approx(rec.core_time)


def test_active_counts_in_flight_dma_and_execution_only_is_reported_too():
    rec = estimate(streaming_kernel(4, 512).build(), "trn1")
    dma = rec.engines["dma"]
    # a transfer is in flight from the head of its queue: its ~1.3 us descriptor/semaphore latency counts
    assert dma.active_time > dma.execution_time > 0
    vec = rec.engines["vector"]
    assert vec.execution_time <= vec.active_time  # exposed start-up overhead counts as active, not executing
    assert vec.execution_time_percent == pytest.approx(100 * vec.execution_time / rec.core_time)
    back = type(rec).from_json(rec.to_json())
    assert back.engines["dma"].execution_time == dma.execution_time and back.core_time == rec.core_time


def test_a_wide_partition_broadcast_is_evicted_to_sbuf_by_vectore():
    def kernel(cols: int):
        b = TraceBuilder("trn1")
        row, out = b.sbuf("row", (1, cols), "float32"), b.sbuf("bc", (128, cols), "float32")
        b.compute("vector", "memset", row.all(), value=0.0)
        b._append(engine="tensor", opcode="nc_matmul", partitions=1, free=cols, in_dtypes=("float32",),
                  out_dtype="float32", in_mems=("sbuf",), out_mem="sbuf", reads=(row.all().access(),),
                  writes=(out.all().access(),), meta={"purpose": "partition_broadcast", "K": 1, "M": 128, "N": cols})
        return b.build()
    narrow, wide = simulate(kernel(512), TRN1), simulate(kernel(1024), TRN1)
    # one PSUM bank (512 fp32) is used in place; a wider row needs a PSUM -> SBUF copy on VectorE
    assert narrow.lane_count["vector"] == 1 and wide.lane_count["vector"] == 2
    assert wide.lane_exec_time["vector"] > 1024 / TRN1.clock_hz["vector"]

"""Per-instruction cost formulas against nki-spec.md §4.1, §6 and §7."""

import math

import pytest

from nkitui.emulator.trace import Instruction
from nkitui.perf.costs import compute_cost, dma_plan, matmul_cost
from nkitui.perf.hardware import TARGETS, dtype_class, get_target, itemsize

TRN1, TRN2, TRN3 = TARGETS["trn1"], TARGETS["trn2"], TARGETS["trn3"]
C2 = TRN1.cycles.vector_two_input_per_element  # fitted on the Mamba tutorial (docs/costmodel.md)


def ins(engine, opcode, free, *, p=128, in_dtypes=("float32",), out_dtype="float32", in_mems=("sbuf",),
        out_mem="sbuf", meta=None, **kw):
    return Instruction(0, engine, opcode, p, free, tuple(in_dtypes), out_dtype, tuple(in_mems), out_mem,
                       meta=dict(meta or {}), **kw)


def mm(free=512, m=128, k=128, dtype="bfloat16", **meta):
    return ins("tensor", "nc_matmul", free, p=k, in_dtypes=(dtype, dtype), in_mems=("sbuf", "sbuf"),
               out_mem="psum", flops=2 * k * m * free, meta={"K": k, "M": m, "N": free, **meta})


# ---- TensorE ----

def test_full_bf16_matmul_takes_one_cycle_per_moving_column():
    c = matmul_cost(mm(), TRN1)
    assert c.cycles == 512  # max(min(64, 128), 512)
    assert c.hardware_flops == 2 * 128 * 128 * 512
    assert not c.transpose


def test_short_moving_is_floored_at_the_64_cycle_initiation_latency():
    assert matmul_cost(mm(free=1), TRN1).cycles == 64  # matrix-vector, big stationary
    assert matmul_cost(mm(free=128, m=1), TRN1).cycles == 128  # vector as stationary


def test_fp32_matmul_is_four_times_slower_and_onezero_halves_that():
    assert matmul_cost(mm(dtype="float32"), TRN1).cycles == 4 * 512
    assert matmul_cost(mm(dtype="float32", is_moving_onezero=True), TRN1).cycles == 2 * 512


def test_adjusted_flops_follow_the_profiler_multipliers():
    assert matmul_cost(mm(dtype="float32"), TRN1).adjusted_flops == 4 * 2 * 128 * 128 * 512
    assert matmul_cost(mm(dtype="float8_e4m3"), TRN1).adjusted_flops == 2 * 128 * 128 * 512
    assert matmul_cost(mm(dtype="float8_e4m3"), TRN2).adjusted_flops == 0.5 * 2 * 128 * 128 * 512


def test_tensor_engine_transpose_cost_and_flops():
    t = ins("tensor", "nc_transpose", 128, p=128, in_dtypes=("bfloat16",), out_mem="psum")
    c = matmul_cost(t, TRN1)
    assert c.transpose and c.cycles == 128  # max(P, min(64, F))
    assert c.hardware_flops == 2 * 128 * 128 * 128
    small = ins("tensor", "nc_transpose", 16, p=32, in_dtypes=("bfloat16",), out_mem="psum")
    assert matmul_cost(small, TRN1).cycles == 32
    # the emulator marks a transpose done through nc_matmul with meta["transpose"]
    assert matmul_cost(mm(transpose=True), TRN1).transpose


def test_peak_and_ridge_match_the_published_numbers():
    assert TRN1.tensor_peak_flops == pytest.approx(91.75e12, rel=1e-3)  # "92 TFLOPS" [ARCH2]
    assert TRN2.tensor_peak_flops == pytest.approx(78.6e12, rel=1e-3)
    assert TRN1.ridge("bfloat16") == pytest.approx(222, rel=0.02)  # L-MM: 222 FLOP/B on NC-v2
    assert TRN2.peak_flops("float8_e4m3") == 2 * TRN2.tensor_peak_flops
    assert TRN1.peak_flops("float32") == TRN1.tensor_peak_flops / 4


# ---- Vector / Scalar / GpSimd ----

@pytest.mark.parametrize("opcode,in_mems,in_dtypes,expected", [
    ("tensor_tensor", ("sbuf", "sbuf"), ("float32", "float32"), C2 * 512),  # fitted, not [L-ISA]'s 2N
    ("tensor_tensor", ("psum", "sbuf"), ("float32", "float32"), 512),  # N with one PSUM input
    ("tensor_scalar", ("sbuf",), ("float32",), 512),
    ("activation", ("sbuf",), ("float32",), 512),
    ("activation_reduce", ("sbuf",), ("float32",), 576),  # N + MIN_II
    ("tensor_tensor_scan", ("sbuf", "sbuf"), ("float32", "float32"), C2 * 512),
    ("reciprocal", ("sbuf",), ("float32",), 4096),  # 8N
    ("bn_stats", ("sbuf",), ("float32",), 512),
    ("tensor_copy", ("sbuf",), ("float32",), 512),
])
def test_vector_scalar_formulas(opcode, in_mems, in_dtypes, expected):
    engine = "scalar" if opcode.startswith("activation") else "vector"
    c = compute_cost(ins(engine, opcode, 512, in_mems=in_mems, in_dtypes=in_dtypes), TRN1)
    assert c.cycles == expected
    assert c.documented


def test_small_instructions_are_floored_at_min_ii():
    assert compute_cost(ins("vector", "tensor_scalar", 1), TRN1).cycles == 64
    assert compute_cost(ins("scalar", "activation", 10), TRN1).cycles == 64


def test_bf16_special_cases():
    red = ins("vector", "tensor_reduce", 1024, in_dtypes=("bfloat16",), out_dtype="bfloat16", meta={"op": "add"})
    assert compute_cost(red, TRN1).cycles == 512  # N/2
    zero = ins("vector", "memset", 1024, in_dtypes=(), in_mems=(), out_dtype="bfloat16", meta={"value": 0})
    assert compute_cost(zero, TRN1).cycles == 512
    ones = ins("vector", "memset", 1024, in_dtypes=(), in_mems=(), out_dtype="bfloat16", meta={"value": 1})
    assert compute_cost(ones, TRN1).cycles == 1024
    agg = ins("vector", "bn_aggr", 12)
    assert compute_cost(agg, TRN1).cycles == 64  # max(MIN_II, 13 * 12 / 3 = 52)


def test_gpsimd_start_cost_and_lane_widths():
    assert compute_cost(ins("gpsimd", "iota", 512, in_dtypes=(), in_mems=(), out_dtype="int32"), TRN1).cycles == 662
    i8 = ins("gpsimd", "tensor_tensor", 512, in_dtypes=("int8", "int8"), out_dtype="int8", in_mems=("sbuf", "sbuf"))
    assert compute_cost(i8, TRN1).cycles == C2 * 512 / 4  # 64 int8 lanes per processor instead of 16
    rsqrt = ins("gpsimd", "tensor_scalar", 512, meta={"op0": "rsqrt"})
    assert compute_cost(rsqrt, TRN1).cycles == 4 * 512


def test_vector_performance_modes_on_nc_v3_only():
    copy = ins("vector", "tensor_copy", 1024, in_dtypes=("bfloat16",), out_dtype="bfloat16")
    assert compute_cost(copy, TRN1).cycles == 1024 and compute_cost(copy, TRN1).perf_mode is None
    c2 = compute_cost(copy, TRN2)
    assert (c2.cycles, c2.perf_mode) == (256, "4x")
    evict = ins("vector", "tensor_copy", 1024, in_dtypes=("bfloat16",), out_dtype="bfloat16", in_mems=("psum",))
    assert (compute_cost(evict, TRN2).cycles, compute_cost(evict, TRN2).perf_mode) == (512, "2x")
    fp32 = ins("vector", "tensor_copy", 1024)
    assert compute_cost(fp32, TRN2).perf_mode is None
    scalar = ins("scalar", "tensor_copy", 1024, in_dtypes=("bfloat16",), out_dtype="bfloat16")
    assert compute_cost(scalar, TRN2).perf_mode is None and compute_cost(scalar, TRN3).perf_mode == "2x"


def test_unknown_opcode_uses_the_generic_rule_and_says_so():
    c = compute_cost(ins("vector", "frobnicate", 300, in_mems=("sbuf", "sbuf"), in_dtypes=("float32",) * 2), TRN1)
    assert c.cycles == C2 * 300 and not c.documented


def test_two_input_cost_follows_the_fitted_constant_not_a_hard_coded_2n():
    tt = ins("vector", "tensor_tensor", 512, in_mems=("sbuf", "sbuf"), in_dtypes=("float32",) * 2)
    assert compute_cost(tt, TRN1.with_model(vector_two_input_per_element=2.0)).cycles == 1024  # [L-ISA]'s 2N
    assert compute_cost(tt, TRN1.with_model(vector_two_input_per_element=1.25)).cycles == 640
    assert 0.8 <= C2 <= 1.5  # what the Mamba data allow (VectorE-bound mamba_v2: 1.61 ms at 99.63%)


# ---- DMA ----

def test_dma_efficiency_curve_shape():
    for spec in (TRN1, TRN2, TRN3):
        curve = spec.dma_curve
        first = curve.knots[0][1]
        assert curve.efficiency(64) == pytest.approx(first / 4)  # below 256 B: a descriptor costs a 256-B one
        assert curve.efficiency(4096) == curve.efficiency(65536) == 1.0  # >= 4 KiB saturates [DMABW]
        effs = [curve.efficiency(b) for b in (256, 512, 1024, 2048, 3072, 4096)]
        assert effs == sorted(effs)  # never worse with longer descriptors
    assert TRN1.dma_curve.efficiency(1024) < TRN2.dma_curve.efficiency(1024)  # trn2 has its own fit


def test_dma_curve_is_log_linear_between_knots():
    from nkitui.perf.hardware import DmaCurve

    curve = DmaCurve(((256.0, 0.4), (1024.0, 0.4), (4096.0, 1.0)))
    assert curve.efficiency(2048) == pytest.approx(0.7)  # halfway in log between 1 KiB and 4 KiB
    assert curve.efficiency(512) == pytest.approx(0.4)


def load(p, free, dtype="bfloat16", **meta):
    nbytes = p * free * itemsize(dtype)
    return ins("dma", "dma_copy", free, p=p, in_dtypes=(dtype,), out_dtype=dtype, in_mems=("hbm",), out_mem="sbuf",
               bytes_read=nbytes, bytes_written=nbytes, hbm_read=nbytes, meta=meta)


def test_dma_plan_for_a_tile_load():
    plan = dma_plan(load(128, 512), TRN1)  # 1 KiB per partition
    assert plan.engines == 16 and plan.nbytes == 128 * 1024 and plan.hbm_bytes == 128 * 1024
    assert plan.seconds == pytest.approx(128 * 1024 / (16 * 17e9 * TRN1.dma_curve.efficiency(1024)))
    big = dma_plan(load(128, 2048), TRN1)  # 4 KiB per partition: full bandwidth
    assert big.seconds == pytest.approx(128 * 4096 / (16 * 17e9))
    assert dma_plan(load(8, 2048), TRN1).engines == 1  # 8 partitions per DMA engine
    assert dma_plan(load(128, 512, contiguous_bytes=64), TRN1).run_bytes == 64


def test_dma_efficiency_is_keyed_to_bytes_per_partition_not_the_hbm_run():
    # a [128, 512] fp32 tile of a contiguous HBM block: one 256 KiB run in HBM, but 2 KiB per partition,
    # and a descriptor moves one partition's run [ARCH2, DMA]
    whole = dma_plan(load(128, 512, "float32", contiguous_bytes=128 * 2048), TRN1)
    assert whole.run_bytes == 2048
    assert whole.efficiency == pytest.approx(TRN1.dma_curve.efficiency(2048)) and whole.efficiency < 1.0


def test_strided_dma_per_generation():
    # 4-byte runs (a column of a row-major matrix): NC-v2 pays a descriptor per element, NC-v3 walks the
    # access pattern in hardware and costs the bytes per partition (at the friendly-pattern 90%)
    col1 = dma_plan(load(128, 64, "float32", contiguous_bytes=4), TRN1)
    col2 = dma_plan(load(128, 64, "float32", contiguous_bytes=4), TRN2)
    assert col1.efficiency == pytest.approx(TRN1.dma_curve.efficiency(4))
    assert col2.efficiency == pytest.approx(0.9 * TRN2.dma_curve.efficiency(256))
    assert col1.seconds > 20 * col2.seconds


def test_partition_broadcast_is_onezero_matmuls_per_psum_bank_not_one_fp32_matmul():
    row = ins("tensor", "nc_matmul", 2048, p=1, in_dtypes=("float32",), out_mem="sbuf",
              meta={"purpose": "partition_broadcast", "K": 1, "M": 128, "N": 2048})
    c = matmul_cost(row, TRN1)
    # four matmuls of 512 moving columns, fp32 at 2x (is_stationary_onezero) instead of 4x [L-ISA, ARCH2]
    assert c.cycles == 4 * 512 * 2
    plain_fp32 = matmul_cost(mm(free=2048, dtype="float32"), TRN1).cycles
    assert c.cycles < plain_fp32


def test_dma_transposes_are_slower():
    plain = dma_plan(load(128, 128), TRN1).seconds
    tr1 = dma_plan(ins("dma", "dma_transpose", 128, in_dtypes=("bfloat16",), out_dtype="bfloat16",
                       in_mems=("hbm",), bytes_read=32768, bytes_written=32768), TRN1).seconds
    assert tr1 > 50 * plain  # NC-v2: one element per descriptor
    tr2 = dma_plan(ins("dma", "dma_transpose", 128, in_dtypes=("bfloat16",), out_dtype="bfloat16",
                       in_mems=("hbm",), bytes_read=32768, bytes_written=32768), TRN2)
    assert tr2.efficiency == pytest.approx(0.9 * TRN2.dma_curve.efficiency(256))  # ~90% of a plain load [ARCH3]
    sb = dma_plan(ins("dma", "dma_transpose", 128, in_dtypes=("bfloat16",), out_dtype="bfloat16",
                      in_mems=("sbuf",), bytes_read=32768, bytes_written=32768), TRN2)
    assert sb.efficiency == pytest.approx(0.5 * TRN2.dma_curve.efficiency(256))  # SBUF -> SBUF 50% [ARCH3]


def test_targets_resolve_aliases_and_reject_unknown_names():
    assert get_target("inf2") is TRN1 and get_target("gen3") is TRN2 and get_target(" TRN3 ") is TRN3
    with pytest.raises(ValueError, match="unknown target 'trn9'.*trn1, trn2, trn3"):
        get_target("trn9")
    assert dtype_class("float8_e5m2") == "fp8" and dtype_class("tfloat32") == "bf16"
    with pytest.raises(ValueError, match="unknown dtype 'complex64'"):
        itemsize("complex64")
    assert math.isclose(TRN2.memory_bytes_per_s, min(16 * 23e9, 2.9e12 / 8))

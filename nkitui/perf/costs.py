"""Per-instruction costs: engine cycles for compute instructions, a transfer plan for DMAs.

Formulas are the legacy "Estimated instruction cost" table (nki-spec.md §4.1, [L-ISA]) in
cycles of the executing engine, with N = elements per partition of the main input and the
MIN_II ≈ 64-cycle floor; TensorE follows the initiation-interval model of §7.2; DMA follows
§6.4/§7.3 (per-engine bandwidth x efficiency of the contiguous run length). NC-v3/v4 formulas
were never published, so the NC-v2 cycle counts are applied to every target with that
target's clocks and the documented performance modes (§7.1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from nkitui.emulator.trace import Instruction
from nkitui.perf.hardware import TargetSpec, dtype_class, itemsize

SIXTEEN_BIT = frozenset({"bfloat16", "float16"})
FP8 = frozenset({"float8_e4m3", "float8_e4m3fn", "float8_e5m2"})

MATMUL_OPCODES = frozenset({"nc_matmul", "matmul", "nc_matmul_mx"})
TRANSPOSE_OPCODES = frozenset({"nc_transpose", "transpose"})
DMA_TRANSPOSE_OPCODES = frozenset({"dma_transpose", "load_transpose2d"})


def _meta_op(ins: Instruction, *keys: str) -> str:
    for k in keys:
        v = ins.meta.get(k)
        if v is not None:
            return str(v).lower()
    return ""


# Every formula below takes (instruction, N, c2): c2 is the VectorE cycles per element of a two-input
# instruction with both operands in SBUF, where [L-ISA] prints 2 and the Mamba data imply about 1
# (CycleCosts.vector_two_input_per_element, fitted; docs/costmodel.md "Vector engine").


def _two_inputs(ins: Instruction, n: int, c2: float) -> float:
    """VectorE rule: ≈N cycles reading one tensor, ≈c2·N reading two (spec §7.1), N with one in PSUM."""
    mems = ins.in_mems
    tensors = sum(1 for m in mems if m in ("sbuf", "psum"))
    if tensors < 2:
        return n
    return n if ("psum" in mems and "sbuf" in mems) else c2 * n


def _tensor_tensor(ins: Instruction, n: int, c2: float) -> float:
    mems = ins.in_mems
    one_psum = "psum" in mems and "sbuf" in mems
    dts = set(ins.in_dtypes) | {ins.out_dtype}
    fast_bf16 = (dts == {"bfloat16"} and all(m == "sbuf" for m in mems)
                 and _meta_op(ins, "op", "op0") in ("add", "multiply", "subtract")
                 and ins.meta.get("contiguous", True))
    return n if (one_psum or fast_bf16) else c2 * n


def _scalar_tensor_tensor(ins: Instruction, n: int, c2: float) -> float:
    special = (set(ins.in_dtypes) <= {"bfloat16"} and _meta_op(ins, "op0") == "subtract"
               and _meta_op(ins, "op1") == "multiply" and n % 2 == 0)
    return n if special else c2 * n


def _tensor_reduce(ins: Instruction, n: int, c2: float) -> float:
    bf16 = set(ins.in_dtypes) | {ins.out_dtype} == {"bfloat16"}
    return n // 2 if bf16 and _meta_op(ins, "op") in ("add", "max") else n


def _memset(ins: Instruction, n: int, c2: float) -> float:
    zero = ins.meta.get("value", 0) in (0, 0.0)
    return n // 2 if zero and ins.out_dtype in SIXTEEN_BIT else n


def _copy_predicated(ins: Instruction, n: int, c2: float) -> float:
    return n if "psum" in ins.in_mems else c2 * n


def _activation(ins: Instruction, n: int, c2: float) -> float:
    # reading the reduce result out of the accumulator adds ActReadAccumulator ≈ 64 cycles [ARCH2]
    return n + (64 if ins.meta.get("reduce_res") or ins.meta.get("reduce") else 0)


def _topk(ins: Instruction, n: int, c2: float) -> float:
    return 4 * int(ins.meta.get("k", ins.meta.get("n", 8))) + n  # 4*n + K [N-ISA]


def _local_gather(ins: Instruction, n: int, c2: float) -> float:
    valid = int(ins.meta.get("num_valid_indices", n))
    elem = int(ins.meta.get("num_elem_per_idx", 1))
    size = itemsize(ins.in_dtypes[0]) if ins.in_dtypes else 4
    t = 4
    c = ((28 + t * elem) / (t * elem)) / min(4 / size, elem)
    return 150 + int(valid * elem / c)  # [L-ISA]


# opcode -> cycles before the MIN_II floor; (cycles, already_has_start_cost)
_VECTORISH: dict[str, Callable[[Instruction, int, float], float]] = {
    "tensor_tensor": _tensor_tensor,
    "tensor_scalar": lambda i, n, c2: n,
    "activation": _activation,
    "activate": _activation,
    "activate2": lambda i, n, c2: n,  # NOT FOUND; assumed like activation (inferred)
    "activation_reduce": lambda i, n, c2: n + 64,
    "scalar_tensor_tensor": _scalar_tensor_tensor,
    "tensor_scalar_reduce": lambda i, n, c2: n + 64,
    "tensor_scalar_cumulative": lambda i, n, c2: n,  # NOT FOUND; like tensor_scalar (inferred)
    "tensor_reduce": _tensor_reduce,
    "tensor_tensor_scan": lambda i, n, c2: c2 * n,
    "tensor_copy": lambda i, n, c2: n,
    "copy": lambda i, n, c2: n,
    "tensor_copy_dynamic_src": lambda i, n, c2: max(600, n),
    "tensor_copy_dynamic_dst": lambda i, n, c2: max(600, n),
    "tensor_copy_predicated": _copy_predicated,
    "memset": _memset,
    "range_select": lambda i, n, c2: n,
    "select_reduce": lambda i, n, c2: c2 * n,  # NOT FOUND; two tensor inputs (inferred)
    "bn_stats": lambda i, n, c2: n,
    "bn_aggr": lambda i, n, c2: 13 * n // 3,
    "reciprocal": lambda i, n, c2: 8 * n,
    "exponential": lambda i, n, c2: n,  # NOT FOUND (inferred)
    "dropout": lambda i, n, c2: n,
    "nc_stream_shuffle": lambda i, n, c2: n,
    "max8": lambda i, n, c2: n,
    "nc_find_index8": lambda i, n, c2: n,
    "nc_match_replace8": lambda i, n, c2: n,
    "quantize_mx": lambda i, n, c2: max(1, n // 4),  # VectorE 4 elements/partition/cycle [ARCH4]
    "nc_transpose": lambda i, n, c2: n,  # VectorE 32x32 transpose: max(MIN_II, N)
    "transpose": lambda i, n, c2: n,
}

_GPSIMD_START: dict[str, Callable[[Instruction, int, float], float]] = {
    "iota": lambda i, n, c2: 150 + n,
    "affine_select": lambda i, n, c2: 150 + n,
    "local_gather": _local_gather,
    "nc_n_gather": lambda i, n, c2: 150 + n,  # NOT FOUND (inferred)
    "tensor_partition_reduce": lambda i, n, c2: 150 + n,  # NOT FOUND (inferred)
    "topk": _topk,
    "sequence_bounds": lambda i, n, c2: 150 + n,  # NOT FOUND (inferred)
}


@dataclass(slots=True)
class ComputeCost:
    cycles: float  # engine cycles the instruction occupies its engine
    perf_mode: str | None = None  # "2x" / "4x" like the profiler's performance_mode
    documented: bool = True  # False when the opcode has no published formula


def _perf_mode(ins: Instruction, spec: TargetSpec, opcode: str) -> tuple[float, str | None]:
    """Throughput multiplier from the documented NC-v3/v4 performance modes (spec §7.1)."""
    eng = ins.engine
    narrow = SIXTEEN_BIT | (FP8 if spec.nc_version >= 4 else frozenset())
    dts = set(ins.in_dtypes) | {ins.out_dtype}
    if not dts or not dts <= narrow:
        return 1.0, None
    mems = set(ins.in_mems) | {ins.out_mem}
    contiguous = bool(ins.meta.get("contiguous", True))
    if eng == "vector" and spec.vector_perf_mode:
        if opcode in ("tensor_copy", "copy", "tensor_scalar"):
            if mems == {"sbuf"} and contiguous:
                return 4.0, "4x"
            return 2.0, "2x"
        if opcode == "tensor_tensor" and set(ins.in_mems) == {"sbuf"}:
            return 2.0, "2x"
    if eng == "scalar" and spec.scalar_16bit_2x and opcode in ("tensor_copy", "copy", "tensor_scalar"):
        return 2.0, "2x"
    return 1.0, None


def compute_cost(ins: Instruction, spec: TargetSpec) -> ComputeCost:
    """Cycles of a Vector / Scalar / GpSimd / Sync instruction on its engine."""
    opcode = ins.opcode
    n = max(int(ins.free), 1)
    min_ii = spec.cycles.min_ii
    eng = ins.engine
    c2 = spec.cycles.vector_two_input_per_element
    if opcode in _GPSIMD_START:
        return ComputeCost(float(_GPSIMD_START[opcode](ins, n, c2)))
    fn = _VECTORISH.get(opcode)
    documented = fn is not None
    if eng == "sync" and fn is None:
        return ComputeCost(float(min_ii))  # barriers, semaphores, register moves (inferred)
    cycles = float(fn(ins, n, c2) if fn is not None else _two_inputs(ins, n, c2))
    speed, mode = _perf_mode(ins, spec, opcode)
    cycles /= speed
    if eng == "gpsimd":
        cycles /= _gpsimd_lane_factor(ins)
        if _meta_op(ins, "op0", "op") == "rsqrt":
            cycles *= 4  # GpSimd rsqrt: 4x lower throughput than ScalarE [L-COMMON]
    return ComputeCost(max(float(min_ii), cycles), mode, documented)


def _gpsimd_lane_factor(ins: Instruction) -> float:
    """GpSimd lanes: 16 x 32-bit, 32 x 16-bit, 64 x 8-bit per processor [ARCH2]."""
    dts = list(ins.in_dtypes) + [ins.out_dtype]
    try:
        widest = max(itemsize(d) for d in dts)
    except ValueError:
        return 1.0
    return {1: 4.0, 2: 2.0}.get(widest, 1.0)


@dataclass(slots=True)
class MatmulCost:
    cycles: float  # initiation interval with the stationary already loaded in the background
    load_stationary: float  # LoadStationary cycles (exposed only when TensorE waited)
    hardware_flops: float  # 2 x active rows x active cols x moving elements
    adjusted_flops: float  # BF16-equivalent [NX-SCHEMA]
    transpose: bool


def _mm_dtype_factor(ins: Instruction, spec: TargetSpec) -> float:
    classes = {dtype_class(d) for d in ins.in_dtypes} or {"bf16"}
    if "fp32" in classes:
        onezero = ins.meta.get("is_stationary_onezero") or ins.meta.get("is_moving_onezero")
        return spec.cycles.fp32_matmul_factor / (2 if onezero else 1)  # onezero 2x for fp32 [L-ISA]
    return 1.0


def adjusted_flops_factor(ins: Instruction, spec: TargetSpec) -> float:
    """BF16-equivalent multiplier: FP32 4.0, FP8 1.0 (trn1) / 0.5 (trn2/3), MX 0.25 [NX-SCHEMA]."""
    classes = {dtype_class(d) for d in ins.in_dtypes} or {"bf16"}
    if "fp32" in classes:
        return 4.0
    if "mx" in classes:
        return 0.25
    if "fp8" in classes:
        return 1.0 if spec.nc_version == 2 else 0.5
    if "int" in classes:
        return 0.5
    return 1.0


def matmul_cost(ins: Instruction, spec: TargetSpec) -> MatmulCost:
    """TensorE matmul or transpose (spec §4.1 / §7.2)."""
    meta = ins.meta
    n_moving = max(int(meta.get("N", ins.free) or ins.free), 1)
    m_stat = int(meta.get("M", 128) or 128)
    k = int(meta.get("K", ins.partitions) or ins.partitions)
    min64 = spec.cycles.mm_init_latency
    factor = _mm_dtype_factor(ins, spec)
    transpose = (ins.opcode in TRANSPOSE_OPCODES or bool(meta.get("is_transpose"))
                 or meta.get("transpose") is True)
    if transpose:
        p, f = ins.partitions, max(int(ins.free), 1)
        cycles = float(max(p, min(min64, f)))  # max(P, min(64, F)) [L-ISA]
        if factor > 1 and spec.nc_version >= 3:
            factor /= 2  # NC-v3 transpose mode doubles FP32 transpose speed [ARCH3]
        cycles *= factor
        hw = 2.0 * p * f * p  # identity matmul: data [P,F] stationary, identity [P,P] moving
        ls = math.ceil(f / spec.cycles.load_stationary_speedup) * factor
        return MatmulCost(cycles, ls, hw, hw * adjusted_flops_factor(ins, spec), True)
    if meta.get("purpose") == "partition_broadcast":
        # [1, F] broadcast over M partitions: matmuls of a ones stationary [1, M] (is_stationary_onezero,
        # 2x for fp32 [L-ISA]) with the row as moving, one PSUM bank (gemm_moving_fmax) at a time [ARCH2]
        chunk = max(int(spec.hardware.gemm_moving_fmax) if spec.hardware else 512, 1)
        full, rest = divmod(n_moving, chunk)
        def per(f: float) -> float:
            return float(max(min(min64, m_stat), f))

        onezero = spec.cycles.fp32_matmul_factor / 2 if factor > 1 else 1.0
        cycles = (full * per(chunk) + (per(rest) if rest else 0.0)) * onezero
        ls = math.ceil(m_stat / spec.cycles.load_stationary_speedup) * onezero
        hw = 2.0 * k * m_stat * n_moving
        return MatmulCost(cycles, ls, hw, hw * adjusted_flops_factor(ins, spec), False)
    cycles = float(max(min(min64, m_stat), n_moving)) * factor  # max(min(64, N_stat), N_mov) [L-ISA]
    tile = meta.get("tile_size")
    if tile:
        rows, cols = int(tile[0]), int(tile[1])
        # PE tiling runs up to four sub-matmuls concurrently; charge the occupied share (inferred)
        cycles *= (rows * cols) / float(spec.pe_rows * spec.pe_cols)
    ls = math.ceil(m_stat / spec.cycles.load_stationary_speedup) * factor
    hw = float(ins.flops) if ins.flops else 2.0 * k * m_stat * n_moving
    return MatmulCost(cycles, ls, hw, hw * adjusted_flops_factor(ins, spec), False)


@dataclass(slots=True)
class DmaPlan:
    nbytes: int  # bytes moved
    engines: int  # DMA engines the transfer is spread over
    run_bytes: float  # bytes per descriptor (one contiguous run of one partition)
    efficiency: float  # fraction of per-engine peak
    seconds: float  # engine busy time once started (all engines in parallel)
    hbm_bytes: int  # bytes crossing the HBM interface


def dma_plan(ins: Instruction, spec: TargetSpec) -> DmaPlan:
    """How a DMA transfer uses the 16 DMA engines (spec §6.4, §7.3), descriptor by descriptor.

    A descriptor moves one contiguous run of one partition [ARCH2: each contiguous run is a separate DMA
    buffer]: the shorter of the run on the HBM side (`meta["contiguous_bytes"]`, recorded by the
    emulator; a gather of whole rows by index has row-sized runs) and the bytes per partition on the
    on-chip side. Its efficiency comes from the target's curve. Transposing and element-strided
    transfers follow the documented per-generation behaviour (see `_layout_efficiency`).
    """
    nbytes = max(int(ins.bytes_read), int(ins.bytes_written))
    p = max(int(ins.partitions), 1)
    if nbytes <= 0:
        size = itemsize(ins.out_dtype) if ins.out_dtype else 4
        nbytes = p * max(int(ins.free), 0) * size
    on_chip = ins.out_mem in ("sbuf", "psum") or any(m in ("sbuf", "psum") for m in ins.in_mems)
    per_partition = nbytes / p if on_chip else float(nbytes)
    recorded = ins.meta.get("contiguous_bytes")
    run = per_partition if recorded is None else min(float(recorded), per_partition)
    if on_chip:
        engines = min(spec.dma_engines, max(1, math.ceil(p / (spec.partitions / spec.dma_engines))))
    else:  # HBM->HBM: split in >= 32 KiB pieces (older guidance, [PERF Opt #9])
        engines = min(spec.dma_engines, max(1, math.ceil(nbytes / 32768)))
    eff = _layout_efficiency(ins, spec, run, per_partition)
    seconds = nbytes / (engines * spec.dma_engine_bytes_per_s * eff) if nbytes else 0.0
    hbm = int(ins.hbm_read) + int(ins.hbm_write)
    return DmaPlan(nbytes, engines, run, eff, seconds, hbm)


def _layout_efficiency(ins: Instruction, spec: TargetSpec, run: float, per_partition: float) -> float:
    """DMA efficiency of a transfer's layout on `spec`'s generation.

    * NC-v2 walks every contiguous run as its own descriptor [ARCH2], so an element-strided transfer pays
      the per-descriptor cost per element, and a DMA transpose moves one element per descriptor ("much
      slower" [PERF Opt #10], inferred);
    * NC-v3+ DMA engines walk access patterns themselves (descriptor generation in hardware [DGE]): a
      transpose runs at 90% (HBM source) / 50% (SBUF source) of a plain transfer of the same bytes per
      partition [ARCH3]; a strided or small-window transfer is costed per partition row like a plain
      one, at the 90% a friendly transpose pattern reaches [ARCH3] when its runs are shorter than the row
      (inferred: no number for strided reads is published).
    """
    curve = spec.dma_curve
    transpose = ins.opcode in DMA_TRANSPOSE_OPCODES or bool(ins.meta.get("transpose"))
    if spec.nc_version == 2:
        if transpose:
            size = itemsize(ins.out_dtype) if ins.out_dtype else 2
            return curve.efficiency(size)
        return curve.efficiency(run)
    eff = curve.efficiency(per_partition)
    if transpose:
        return eff * (0.9 if "hbm" in ins.in_mems else 0.5)
    return eff * 0.9 if run < per_partition else eff

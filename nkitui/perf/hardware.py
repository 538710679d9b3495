"""Per-target NeuronCore constants for the cost model, each tagged with its source.

Numbers come from ../shared/reference/nki-spec.md (section numbers and source IDs such as
[ARCH2] refer to that document). "derived" marks arithmetic on sourced numbers, "inferred" an
interpretation we made, "fitted" a constant calibrated on the published anchors (see
docs/costmodel.md for the fit). Everything the scheduler and the cost formulas need about a
target is in one frozen `TargetSpec`, so a model run never consults globals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GHZ = 1e9
KIB = 1024

# Engine names used by the trace contract (nkitui.emulator.trace.ENGINES) that are compute
# sequencers with their own in-order instruction stream.
COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


@dataclass(frozen=True)
class CycleCosts:
    """Engine-cycle constants of the legacy cost formulas (NC-v2 values, used for all targets)."""

    min_ii: int = 64  # MIN_II: floor for small tiles [L-ISA, spec §4]
    gpsimd_start: int = 150  # GPSIMD_START [L-ISA]
    min_ii_dynamic: int = 600  # MIN_II_DYNAMIC, dynamic-offset copies [L-ISA]
    static_overhead: int = 100  # exposed when an instruction waits on a dependency [ARCH2, spec §7.1]
    # Latency from a producer's last cycle to its result being usable by a dependent
    # instruction. Derived: dependent 1-element ScalarE instructions issue every 264 cycles
    # [PERF Opt #5a] = MIN_II 64 + static overhead 100 + this 100. It also covers the ~60-cycle
    # SBUF/PSUM access start-up overhead [ARCH2].
    dependency_latency: int = 100
    mm_init_latency: int = 64  # MM_INIT_LATENCY, TensorE cycles [ARCH2, spec §7.2]
    fp32_matmul_factor: int = 4  # FP32 matmul 4x slower (two FP32_LO_HI passes) [ARCH2, NX-SCHEMA]
    load_stationary_speedup: int = 4  # Fast LoadStationary ~4x an MM of the same free size [PERF Opt #7]


@dataclass(frozen=True)
class DmaCurve:
    """DMA efficiency against contiguous bytes per descriptor (one partition's run).

    Shape from [DMA, DMABW] (spec §6.4): < 256 B severely overhead-bound, ≥ 2 KiB recommended,
    ≥ 4 KiB saturates. The plateau value is *fitted* on the three DMA-bound kernels of the trn1
    matmul tutorial [L-MM], which run at 103-105 GB/s whether half their bytes move in 256 B runs
    (Original) or nearly all in 1 KiB runs (Optimizations 1 and 2); see docs/costmodel.md.
    """

    floor_bytes: int = 256  # below this a descriptor costs as much as a floor_bytes one
    plateau: float = 0.38  # fitted efficiency from floor_bytes up to knee_bytes
    knee_bytes: int = 1 * KIB  # last size of the plateau (largest run in the DMA-bound anchors)
    saturate_bytes: int = 4 * KIB  # efficiency 1.0 from here [DMABW]

    def efficiency(self, run_bytes: float) -> float:
        """Fraction of per-engine peak bandwidth reached with runs of `run_bytes` bytes."""
        if run_bytes <= 0:
            return self.plateau
        if run_bytes < self.floor_bytes:
            return self.plateau * run_bytes / self.floor_bytes
        if run_bytes <= self.knee_bytes:
            return self.plateau
        if run_bytes >= self.saturate_bytes:
            return 1.0
        # log-linear from the plateau at the knee to 1.0 at saturation
        frac = math.log(run_bytes / self.knee_bytes) / math.log(self.saturate_bytes / self.knee_bytes)
        return self.plateau + (1.0 - self.plateau) * frac


@dataclass(frozen=True)
class TargetSpec:
    name: str  # "trn1" | "trn2" | "trn3"
    nc_version: int  # 2, 3, 4
    clock_hz: dict[str, float]  # per compute engine
    base_clock_hz: float  # profiler "NeuronCore base clock" for neuroncore_cycle_count
    pe_rows: int
    pe_cols: int
    fp8_speedup: float  # FP8 TensorE throughput relative to BF16 (double_row on v3+)
    mx_speedup: float  # MX (nc_matmul_mx) relative to BF16 (v4 only; 0 = unsupported)
    dma_engines: int
    dma_engine_bytes_per_s: float
    dma_fixed_latency_s: float
    hwdge_issue_s: float  # issue cost of a hardware-DGE DMA on its issuing engine (0 = n/a)
    hbm_core_bytes_per_s: float  # per-NeuronCore share of chip HBM bandwidth (model limit)
    hbm_stack_bytes_per_s: float  # one HBM stack (the profiler's MBU denominator)
    sbuf_bytes_per_partition: int
    sbuf_usable_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    partitions: int
    vector_perf_mode: bool  # NC-v3+: 2x/4x VectorE modes for 16-bit data [ARCH3]
    scalar_16bit_2x: bool  # NC-v4: ScalarE 2x for bf16/fp16 [ARCH4]
    port_serialization: bool  # NC-v2: Vector+GpSimd share SBUF, Vector+Scalar share PSUM [ARCH2]
    tensor_throttle: bool  # trn2/trn3 TensorE ramps from 50% after idle [NX-SUM]
    cycles: CycleCosts = field(default_factory=CycleCosts)
    dma_curve: DmaCurve = field(default_factory=DmaCurve)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def tensor_peak_flops(self) -> float:
        """Dense BF16 peak: 2 x PE count x TensorE clock (profiler convention [NX-SCHEMA])."""
        return 2.0 * self.pe_rows * self.pe_cols * self.clock_hz["tensor"]

    def peak_flops(self, dtype: str) -> float:
        """TensorE peak for matmul inputs of `dtype` (numpy-style name)."""
        cls = dtype_class(dtype)
        if cls == "fp32":
            return self.tensor_peak_flops / self.cycles.fp32_matmul_factor
        if cls == "fp8":
            return self.tensor_peak_flops * self.fp8_speedup
        if cls == "mx":
            return self.tensor_peak_flops * (self.mx_speedup or 1.0)
        return self.tensor_peak_flops

    @property
    def dma_peak_bytes_per_s(self) -> float:
        return self.dma_engines * self.dma_engine_bytes_per_s

    @property
    def memory_bytes_per_s(self) -> float:
        """Best sustained HBM<->SBUF rate of one core: DMA engines or HBM, whichever is lower."""
        return min(self.dma_peak_bytes_per_s, self.hbm_core_bytes_per_s)

    def ridge(self, dtype: str = "bfloat16") -> float:
        """FLOP per HBM byte where TensorE peak meets the per-core HBM bandwidth (the published
        convention: 222 FLOP/B on NC-v2 [L-MM])."""
        return self.peak_flops(dtype) / self.hbm_core_bytes_per_s

    def ridge_dma(self, dtype: str = "bfloat16") -> float:
        """Same, against what 16 DMA engines can actually move (min of DMA and HBM bandwidth)."""
        return self.peak_flops(dtype) / self.memory_bytes_per_s

    def vector_elements_per_s(self) -> float:
        """Aggregate element rate of Vector + Scalar + GpSimd (128 lanes each, 1 element/lane/cycle)."""
        lanes = self.partitions
        return lanes * (self.clock_hz["vector"] + self.clock_hz["scalar"] + self.clock_hz["gpsimd"])


def dtype_class(dtype: str) -> str:
    """Throughput class of a dtype name: "fp32", "bf16" (16-bit and tf32), "fp8", "mx", "int"."""
    d = dtype.lower()
    if d.endswith("_x4") or d.startswith("float4"):
        return "mx"
    if d.startswith("float8") or d.startswith("fp8"):
        return "fp8"
    if d in ("float32", "fp32", "float"):
        return "fp32"
    if d in ("bfloat16", "float16", "bf16", "fp16", "tfloat32", "tf32", "half"):
        return "bf16"
    return "int"


_ITEMSIZE = {
    "float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4, "float64": 8, "int64": 8,
    "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2,
    "int8": 1, "uint8": 1, "bool_": 1, "bool": 1,
}


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name (fp8 = 1, packed x4 types = 4)."""
    d = dtype.lower()
    if d in _ITEMSIZE:
        return _ITEMSIZE[d]
    if d.endswith("_x4"):
        return 4
    if d.startswith("float8") or d.startswith("fp8"):
        return 1
    raise ValueError(f"unknown dtype {dtype!r}: expected a numpy-style name such as 'bfloat16'")


_COMMON_SOURCES = {
    "clock_hz.tensor": "ARCH2/ARCH3/ARCH4 §6.1",
    "clock_hz.vector": "ARCH2/ARCH3/ARCH4 §6.1",
    "clock_hz.scalar": "ARCH2/ARCH3/ARCH4 §6.1",
    "clock_hz.gpsimd": "ARCH2/ARCH3/ARCH4 §6.1",
    "clock_hz.sync": "inferred: profiler base clock [NX-SCHEMA]",
    "pe_rows/pe_cols": "ARCH2 128x128 PE array §6.1",
    "dma_engines": "DMA 16 engines per NC §6.4",
    "dma_engine_bytes_per_s": "DMA/DMABW tables 17/23/33 B/ns §6.4",
    "dma_fixed_latency_s": "DMABW ~1300 ns semaphore-to-start §6.4",
    "psum_banks/psum_bank_bytes": "ARCH2 8 x 2 KiB §2.1",
    "dma_curve.plateau": "fitted on L-MM anchors §9.1 (docs/costmodel.md)",
    "dma_curve.floor_bytes/saturate_bytes": "DMA/DMABW efficiency guidance §6.4",
    "cycles": "L-ISA/ARCH2/PERF §4, §7",
}

TARGETS: dict[str, TargetSpec] = {
    "trn1": TargetSpec(
        name="trn1",
        nc_version=2,
        clock_hz={"tensor": 2.8 * GHZ, "vector": 1.12 * GHZ, "scalar": 1.4 * GHZ,
                  "gpsimd": 1.4 * GHZ, "sync": 1.4 * GHZ},
        base_clock_hz=1.4 * GHZ,  # [NX-SCHEMA]
        pe_rows=128, pe_cols=128,
        fp8_speedup=1.0,  # cFP8 at BF16 rate [ARCH2]
        mx_speedup=0.0,
        dma_engines=16,
        dma_engine_bytes_per_s=17e9,
        dma_fixed_latency_s=1.3e-6,
        hwdge_issue_s=0.0,  # no hardware DGE on NC-v2 [DGE]
        hbm_core_bytes_per_s=410e9,  # 820 GB/s per chip / 2 cores (derived §6.3)
        hbm_stack_bytes_per_s=410e9,  # 2 stacks per chip [ARCH2]
        sbuf_bytes_per_partition=192 * KIB,
        sbuf_usable_bytes_per_partition=176 * KIB,  # [L-ALLOC]
        psum_banks=8, psum_bank_bytes=2 * KIB,
        partitions=128,
        vector_perf_mode=False,
        scalar_16bit_2x=False,
        port_serialization=True,
        tensor_throttle=False,
        sources={**_COMMON_SOURCES, "hbm_core_bytes_per_s": "HW-TRN1 820 GB/s / 2 NC (derived)"},
    ),
    "trn2": TargetSpec(
        name="trn2",
        nc_version=3,
        clock_hz={"tensor": 2.4 * GHZ, "vector": 0.96 * GHZ, "scalar": 1.2 * GHZ,
                  "gpsimd": 1.2 * GHZ, "sync": 1.2 * GHZ},
        base_clock_hz=1.2 * GHZ,
        pe_rows=128, pe_cols=128,
        fp8_speedup=2.0,  # double-FP8 158 TFLOPS [ARCH3]
        mx_speedup=0.0,
        dma_engines=16,
        dma_engine_bytes_per_s=23e9,
        dma_fixed_latency_s=1.3e-6,
        hwdge_issue_s=0.6e-6,  # [ARCH3, DGE]
        hbm_core_bytes_per_s=2.9e12 / 8,  # HW-TRN2 (derived per core)
        hbm_stack_bytes_per_s=2.9e12 / 4,  # 4 stacks [ARCH3]
        sbuf_bytes_per_partition=224 * KIB,
        sbuf_usable_bytes_per_partition=224 * KIB - 16384 - 8 - 256,  # nki-lib budget [R-LIB]
        psum_banks=8, psum_bank_bytes=2 * KIB,
        partitions=128,
        vector_perf_mode=True,
        scalar_16bit_2x=False,
        port_serialization=False,
        tensor_throttle=True,
        sources={**_COMMON_SOURCES, "hbm_core_bytes_per_s": "HW-TRN2 2.9 TB/s / 8 NC (derived)"},
    ),
    "trn3": TargetSpec(
        name="trn3",
        nc_version=4,
        clock_hz={"tensor": 2.4 * GHZ, "vector": 1.2 * GHZ, "scalar": 1.2 * GHZ,
                  "gpsimd": 1.2 * GHZ, "sync": 1.2 * GHZ},
        base_clock_hz=1.2 * GHZ,  # NOT FOUND for trn3; inferred equal to trn2
        pe_rows=128, pe_cols=128,
        fp8_speedup=2.0,  # double_row on v3/v4 [ARCH3]
        mx_speedup=4.0,  # MXFP8/MXFP4 315 TFLOPS = 4x BF16 [ARCH4]
        dma_engines=16,
        dma_engine_bytes_per_s=33e9,
        dma_fixed_latency_s=1.3e-6,
        hwdge_issue_s=0.6e-6,  # measured on NC-v3; assumed for NC-v4 (inferred)
        hbm_core_bytes_per_s=4.9e12 / 8,  # HW-TRN3 (derived per core)
        hbm_stack_bytes_per_s=4.9e12 / 4,  # stack count NOT FOUND; 4 assumed as on trn2 (inferred)
        sbuf_bytes_per_partition=256 * KIB,  # 32 MiB / 128 (derived) [ARCH4]
        sbuf_usable_bytes_per_partition=240 * KIB,  # minus 16 KiB as on v2 (inferred)
        psum_banks=8, psum_bank_bytes=2 * KIB,
        partitions=128,
        vector_perf_mode=True,
        scalar_16bit_2x=True,
        port_serialization=False,
        tensor_throttle=True,
        sources={**_COMMON_SOURCES, "hbm_core_bytes_per_s": "HW-TRN3 4.9 TB/s / 8 NC (derived)"},
    ),
}

ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
           "trn3": "trn3", "gen4": "trn3"}


def get_target(name: str | TargetSpec) -> TargetSpec:
    """Resolve a target name (trn1/trn2/trn3 or inf2/gen2/gen3/gen4) to its spec."""
    if isinstance(name, TargetSpec):
        return name
    key = ALIASES.get(str(name).strip().lower())
    if key is None:
        raise ValueError(f"unknown target {name!r}: use one of trn1, trn2, trn3 (or inf2, gen2, gen3, gen4)")
    return TARGETS[key]

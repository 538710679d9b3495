"""What the cost model knows about a target: the hardware table (nkitui.common.hardware, one source
of truth with the emulator) plus the model's own constants, each with its source.

Model constants are published cycle formulas [L-ISA] or *fitted* on the published tutorial numbers
(benchmarks/calibration.py; docs/costmodel.md writes every fit down). Everything the scheduler and the
cost formulas need about a target is in one frozen `TargetSpec`, so a model run never consults
globals; `TargetSpec.with_model(...)` gives a variant with other constants (the calibration fits).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from nkitui.common.hardware import TARGETS as HW_TARGETS
from nkitui.common.hardware import HardwareTarget, resolve_target

GHZ = 1e9
KIB = 1024

# Engine names used by the trace contract (nkitui.emulator.trace.ENGINES) that are compute
# sequencers with their own in-order instruction stream.
COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


@dataclass(frozen=True)
class CycleCosts:
    """Engine-cycle constants of the cost formulas (NC-v2 values, used for all targets)."""

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
    # VectorE cycles per element of a two-input instruction (tensor_tensor, tensor_tensor_scan, ...) whose
    # operands are 32-bit and both in SBUF. [L-ISA] prints 2N; the Mamba tutorial's VectorE-bound kernels
    # (mamba_v2 at 4096 channels: 1.61 ms at 99.63% VectorE) leave room for only ~N: *fitted*
    # (benchmarks/calibration.py, docs/costmodel.md "Vector engine").
    vector_two_input_per_element: float = 1.2


@dataclass(frozen=True)
class DmaCurve:
    """DMA efficiency (fraction of the per-engine peak) against the bytes one descriptor moves.

    A descriptor moves one contiguous run of one partition: the shorter of the run in HBM and the bytes
    per partition on the on-chip side [ARCH2: each contiguous run is a separate DMA buffer; DMA: each
    engine serves 8 of the 128 partitions]. The curve is log-linear between its knots (bytes,
    efficiency); below the first knot a descriptor costs as much as one of the first knot's size (the
    fixed per-descriptor cost), above the last the last knot's efficiency holds. The shape is the
    documented one [DMA, DMABW]: < 256 B severely overhead-bound, >= 2 KiB recommended, >= 4 KiB
    saturates; the levels are per target and fitted (docs/costmodel.md "DMA").
    """

    knots: tuple[tuple[float, float], ...] = ((256.0, 0.38), (1024.0, 0.38), (4096.0, 1.0))
    fitted: str = ""  # which published numbers fixed the levels

    def efficiency(self, run_bytes: float) -> float:
        """Fraction of per-engine peak bandwidth reached with descriptors of `run_bytes` bytes."""
        knots = self.knots
        b0, e0 = knots[0]
        if run_bytes <= 0:
            return e0
        if run_bytes < b0:
            return e0 * run_bytes / b0
        for (b1, e1) in knots[1:]:
            if run_bytes <= b1:
                frac = math.log(run_bytes / b0) / math.log(b1 / b0) if b1 > b0 else 1.0
                return e0 + (e1 - e0) * frac
            b0, e0 = b1, e1
        return e0


# Per-target DMA efficiency curves (see DmaCurve; the fits are in docs/costmodel.md "DMA").
# trn1: the three DMA-bound kernels of the matmul tutorial move 256 B and 1 KiB descriptors at 0.40 of
# peak [L-MM]; mamba_v1 at 4096 channels moves 2 KiB descriptors at 0.45 [MAMBA]; the saturation at 4 KiB
# and above [DMABW] is taken as is (no trn1 kernel in the suite is bound by large descriptors).
TRN1_DMA = DmaCurve(((256.0, 0.40), (1024.0, 0.40), (2048.0, 0.45), (4096.0, 1.0)),
                    fitted="256 B-1 KiB: matmul tutorial; 2 KiB: mamba_v1 (4096 channels)")
# trn2: the walkthrough's DMA-bound fp32 kernels keep TensorE 87-99.9% busy [KOPT]: 512 B and 2 KiB
# descriptors run at 0.90 of the 23 B/ns tables; saturation at 4 KiB [DMABW].
TRN2_DMA = DmaCurve(((256.0, 0.90), (2048.0, 0.90), (4096.0, 1.0)),
                    fitted="256 B-2 KiB: trn2 kernel-optimization walkthrough")
# trn3: nothing published; trn2's curve (the newest measured DMA engines) is assumed (inferred).
TRN3_DMA = dataclasses.replace(TRN2_DMA, fitted="assumed equal to trn2's (inferred; nothing published for trn3)")
# The documented shape alone, before any fit: the prior of the calibration's leave-one-family-out runs.
DOCUMENTED_DMA = DmaCurve(((256.0, 0.25), (2048.0, 0.75), (4096.0, 1.0)),
                          fitted="none: documented shape only [DMA, DMABW]")


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
    hbm_core_bytes_per_s: float  # per-NeuronCore share of chip HBM bandwidth
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
    # Fixed cost of one kernel launch on the device (NEFF start-up and tear-down), outside the kernel's
    # core time and reported apart from it, as the profiler shows it [MAMBA]: *fitted* on the Mamba
    # tutorial's toy shape (docs/costmodel.md "Launch overhead").
    launch_overhead_s: float = 0.0
    sources: dict[str, str] = field(default_factory=dict)
    hardware: HardwareTarget | None = None

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

    def with_model(self, **changes: Any) -> "TargetSpec":
        """This target with other model constants: `dma_curve=`, `launch_overhead_s=`, or any
        `CycleCosts` field (e.g. `vector_two_input_per_element=1.2`)."""
        cycle_fields = {f.name for f in dataclasses.fields(CycleCosts)}
        cyc = {k: changes.pop(k) for k in list(changes) if k in cycle_fields}
        if cyc:
            changes["cycles"] = dataclasses.replace(self.cycles, **cyc)
        return dataclasses.replace(self, **changes)


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


_MODEL_SOURCES = {
    "cycles": "L-ISA/ARCH2/PERF §4, §7",
    "cycles.vector_two_input_per_element": "fitted on the Mamba tutorial [MAMBA] (docs/costmodel.md)",
    "dma_curve": "shape [DMA, DMABW] §6.4; levels fitted per target (docs/costmodel.md)",
    "launch_overhead_s": "fitted on the Mamba tutorial's toy shape [MAMBA] (docs/costmodel.md)",
    "clock_hz.sync": "inferred: profiler base clock [NX-SCHEMA]",
}

# Launch overhead, fitted once (trn1, Mamba toy shape) and used for every target (inferred).
LAUNCH_OVERHEAD_S = 20e-6

_DMA_CURVES = {"trn1": TRN1_DMA, "trn2": TRN2_DMA, "trn3": TRN3_DMA}


def _spec(hw: HardwareTarget) -> TargetSpec:
    sources = {f"hardware.{k}": v for k, v in hw.sources.items()}
    sources.update(_MODEL_SOURCES)
    return TargetSpec(
        name=hw.name,
        nc_version=hw.nc_version,
        clock_hz={"tensor": hw.tensor_hz, "vector": hw.vector_hz, "scalar": hw.scalar_hz,
                  "gpsimd": hw.gpsimd_hz, "sync": hw.base_clock_hz},
        base_clock_hz=hw.base_clock_hz,
        pe_rows=hw.pe_rows, pe_cols=hw.pe_cols,
        fp8_speedup=hw.fp8_speedup, mx_speedup=hw.mx_speedup,
        dma_engines=hw.dma_engines, dma_engine_bytes_per_s=hw.dma_engine_bytes_per_s,
        dma_fixed_latency_s=hw.dma_fixed_latency_s, hwdge_issue_s=hw.hwdge_issue_s,
        hbm_core_bytes_per_s=hw.hbm_core_bytes_per_s, hbm_stack_bytes_per_s=hw.hbm_stack_bytes_per_s,
        sbuf_bytes_per_partition=hw.sbuf_bytes_per_partition,
        sbuf_usable_bytes_per_partition=hw.sbuf_usable_bytes_per_partition,
        psum_banks=hw.psum_banks, psum_bank_bytes=hw.psum_bank_bytes, partitions=hw.partitions,
        vector_perf_mode=hw.vector_perf_mode, scalar_16bit_2x=hw.scalar_16bit_2x,
        port_serialization=hw.port_serialization, tensor_throttle=hw.tensor_throttle,
        dma_curve=_DMA_CURVES[hw.name], launch_overhead_s=LAUNCH_OVERHEAD_S,
        sources=sources, hardware=hw,
    )


TARGETS: dict[str, TargetSpec] = {name: _spec(hw) for name, hw in HW_TARGETS.items()}


def get_target(name: str | TargetSpec) -> TargetSpec:
    """Resolve a target name (trn1/trn2/trn3 or inf2/gen2/gen3/gen4) to its spec."""
    if isinstance(name, TargetSpec):
        return name
    return TARGETS[resolve_target(name).name]

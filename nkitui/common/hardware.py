"""The NeuronCore generations nkitui knows, as one table: every number with the note of where it
comes from. The emulator validates against it (SBUF and PSUM capacity, matmul limits) and the cost
model runs on it (clocks, DMA, HBM), so the two never disagree about a target.

Source tags such as [ARCH2] refer to ../shared/reference/nki-spec.md §0 (section numbers likewise);
"derived" marks arithmetic on sourced numbers, "inferred" an interpretation of ours (verify before
relying on it), "NOT FOUND" a number no source gives, with the value we assume.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from nkitui.common.names import TARGET_ALIASES, TARGET_NAMES

KIB = 1024
GHZ = 1e9

PMAX = 128  # partitions of SBUF/PSUM, the partition-dimension limit of every tile [L-PM, TILE]
GEMM_STATIONARY_FMAX = 128  # matmul stationary free size [L-PM, TILE]
BN_STATS_FMAX = 512  # bn_stats free size [L-ISA]

# Names accepted for a target (NEURON_PLATFORM_TARGET_OVERRIDE spellings, spec §1.3): the vocabulary's.
ALIASES: Mapping[str, str] = TARGET_ALIASES


@dataclass(frozen=True, slots=True)
class HardwareTarget:
    """One NeuronCore generation. `source(field)` says where a number comes from."""

    name: str  # "trn1" | "trn2" | "trn3"
    nc_version: int  # 2 (NC-v2), 3 (NC-v3), 4 (NC-v4)
    # engine clocks (Hz) and the profiler's base clock for cycle counts
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float
    base_clock_hz: float
    pe_rows: int
    pe_cols: int
    # on-chip memories, per partition
    sbuf_bytes_per_partition: int  # physical
    sbuf_usable_bytes_per_partition: int  # what kernels may allocate (the compiler keeps the rest)
    psum_banks: int
    psum_bank_bytes: int
    psum_tile_max_bytes: int  # largest PSUM tile per partition per block (= one matmul result)
    gemm_moving_fmax: int  # matmul moving free size limit with an fp32 PSUM result
    # data movement
    dma_engines: int
    dma_engine_bytes_per_s: float
    dma_fixed_latency_s: float  # descriptor setup + semaphore-to-start, per transfer
    hwdge_issue_s: float  # issue cost of a hardware-DGE DMA on its issuing engine (0: no hardware DGE)
    hbm_core_bytes_per_s: float  # this core's share of the chip's HBM bandwidth
    hbm_stack_bytes_per_s: float  # one HBM stack (the profiler's MBU denominator)
    # throughput modes and engine features
    fp8_speedup: float  # FP8 TensorE rate relative to BF16
    mx_speedup: float  # MX (nc_matmul_mx) rate relative to BF16; 0 = unsupported
    vector_perf_mode: bool  # VectorE 2x/4x modes for 16-bit data
    scalar_16bit_2x: bool  # ScalarE 2x for 16-bit tensor_scalar/tensor_copy
    port_serialization: bool  # Vector+GpSimd share SBUF, Vector+Scalar share PSUM
    tensor_throttle: bool  # TensorE restarts at 50% after idle gaps
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes

    @property
    def partitions(self) -> int:
        return PMAX

    def source(self, name: str) -> str:
        """Where the number in field `name` comes from."""
        if name not in {f.name for f in fields(self)}:
            raise KeyError(f"{self.name} has no field {name!r}")
        return self.sources.get(name, "")


def _target(name: str, nc_version: int, rows: dict[str, tuple[object, str]]) -> HardwareTarget:
    values = {k: v for k, (v, _) in rows.items()}
    notes = {k: s for k, (_, s) in rows.items()}
    return HardwareTarget(name=name, nc_version=nc_version, sources=MappingProxyType(notes), **values)  # type: ignore[arg-type]  # values typed by the field rows above


TARGETS: Mapping[str, HardwareTarget] = MappingProxyType({
    "trn1": _target("trn1", 2, {
        "tensor_hz": (2.8 * GHZ, "[ARCH2] §6.1"),
        "vector_hz": (1.12 * GHZ, "[ARCH2] §6.1"),
        "scalar_hz": (1.4 * GHZ, "[ARCH2] §6.1"),
        "gpsimd_hz": (1.4 * GHZ, "[ARCH2] §6.1"),
        "base_clock_hz": (1.4 * GHZ, "profiler NeuronCore base clock, Trn1 [NX-SCHEMA] §6.1"),
        "pe_rows": (128, "128x128 PE array [ARCH2] §6.1"),
        "pe_cols": (128, "128x128 PE array [ARCH2] §6.1"),
        "sbuf_bytes_per_partition": (192 * KIB, "24 MiB = 128 x 192 KiB [ARCH2] §2.1"),
        "sbuf_usable_bytes_per_partition": (176 * KIB, "192 KiB minus the 16 KiB the compiler reserves [L-ALLOC] §2.1"),
        "psum_banks": (8, "8 banks x 2 KiB per partition [ARCH2] §2.1"),
        "psum_bank_bytes": (2 * KIB, "8 banks x 2 KiB per partition [ARCH2] §2.1"),
        "psum_tile_max_bytes": (2 * KIB, "a matmul result fits one bank on NC-v2/v3 [ARCH2, N-ISA] §5.1 C2"),
        "gemm_moving_fmax": (512, "moving free size <= 512 on NC-v2/v3 [L-ISA, TILE] §2.3"),
        "dma_engines": (16, "16 DMA engines per NeuronCore [ARCH2, DMA] §6.4"),
        "dma_engine_bytes_per_s": (17e9, "17 B/ns per engine on Trn1, DMA/DMABW tables §6.4 (the text's 27 GiB/s disagrees, §12)"),
        "dma_fixed_latency_s": (1.3e-6, "~1300 ns semaphore-to-start per transfer [DMABW] §6.4"),
        "hwdge_issue_s": (0.0, "no hardware DGE on NC-v2 [DGE] §6.4"),
        "hbm_core_bytes_per_s": (410e9, "820 GB/s per chip / 2 NeuronCores [HW-TRN1, ARCH2] §6.3 (derived)"),
        "hbm_stack_bytes_per_s": (410e9, "820 GB/s over 2 HBM stacks [ARCH2] §6.3 (derived)"),
        "fp8_speedup": (1.0, "cFP8 at the BF16 rate [ARCH2] §6.2"),
        "mx_speedup": (0.0, "no MX matmul before NC-v4 [ARCH4] §6.2"),
        "vector_perf_mode": (False, "performance modes arrive with NC-v3 [ARCH3] §7.1"),
        "scalar_16bit_2x": (False, "NC-v4 only [ARCH4] §7.1"),
        "port_serialization": (True, "Vector+GpSimd share SBUF, Vector+Scalar share PSUM on NC-v2 [ARCH2] §6.5"),
        "tensor_throttle": (False, "throttling documented for Trn2/Trn3 [NX-SUM] §7.2"),
    }),
    "trn2": _target("trn2", 3, {
        "tensor_hz": (2.4 * GHZ, "[ARCH3] §6.1"),
        "vector_hz": (0.96 * GHZ, "[ARCH3] §6.1"),
        "scalar_hz": (1.2 * GHZ, "[ARCH3] §6.1"),
        "gpsimd_hz": (1.2 * GHZ, "[ARCH3] §6.1"),
        "base_clock_hz": (1.2 * GHZ, "profiler NeuronCore base clock, Trn2 [NX-SCHEMA] §6.1"),
        "pe_rows": (128, "128x128 PE array [ARCH3] §6.1"),
        "pe_cols": (128, "128x128 PE array [ARCH3] §6.1"),
        "sbuf_bytes_per_partition": (224 * KIB, "28 MiB = 128 x 224 KiB [ARCH3] §2.1"),
        "sbuf_usable_bytes_per_partition": (
            208 * KIB, "224 KiB minus a 16 KiB compiler reserve as documented for NC-v2 [L-ALLOC] (inferred for "
            "NC-v3); nki-library budgets a further 264 B for its own use, 212,728 B [R-LIB] §2.1"),
        "psum_banks": (8, "8 banks x 2 KiB per partition [ARCH3] §2.1"),
        "psum_bank_bytes": (2 * KIB, "8 banks x 2 KiB per partition [ARCH3] §2.1"),
        "psum_tile_max_bytes": (2 * KIB, "a matmul result fits one bank on NC-v2/v3 [ARCH2, N-ISA] §5.1 C2"),
        "gemm_moving_fmax": (512, "moving free size <= 512 on NC-v2/v3 [L-ISA, N-ISA] §2.3"),
        "dma_engines": (16, "16 DMA engines per NeuronCore [ARCH3, DMA] §6.4"),
        "dma_engine_bytes_per_s": (23e9, "23 B/ns per engine on Trn2, DMA/DMABW tables §6.4"),
        "dma_fixed_latency_s": (1.3e-6, "~1300 ns semaphore-to-start per transfer [DMABW] §6.4"),
        "hwdge_issue_s": (0.6e-6, "~600 ns to issue a hardware-DGE DMA on NC-v3 [ARCH3, DGE] §6.4"),
        "hbm_core_bytes_per_s": (2.9e12 / 8, "2.9 TB/s per chip / 8 NeuronCores [HW-TRN2] §6.3 (derived)"),
        "hbm_stack_bytes_per_s": (2.9e12 / 4, "2.9 TB/s over 4 HBM stacks [HW-TRN2, ARCH3] §6.3 (derived)"),
        "fp8_speedup": (2.0, "double-FP8 158 TFLOPS = 2x BF16 [ARCH3] §6.2"),
        "mx_speedup": (0.0, "no MX matmul before NC-v4 [ARCH4] §6.2"),
        "vector_perf_mode": (True, "VectorE 2x/4x modes for 16-bit data [ARCH3] §7.1"),
        "scalar_16bit_2x": (False, "NC-v4 only [ARCH4] §7.1"),
        "port_serialization": (False, "NC-v3 lifts the NC-v2 port restrictions [ARCH3] §6.5"),
        "tensor_throttle": (True, "TensorE ramps from 50% after idle [NX-SUM] §7.2"),
    }),
    "trn3": _target("trn3", 4, {
        "tensor_hz": (2.4 * GHZ, "[ARCH4] §6.1"),
        "vector_hz": (1.2 * GHZ, "[ARCH4] §6.1"),
        "scalar_hz": (1.2 * GHZ, "[ARCH4] §6.1"),
        "gpsimd_hz": (1.2 * GHZ, "[ARCH4] §6.1"),
        "base_clock_hz": (1.2 * GHZ, "NOT FOUND for Trn3; assumed equal to Trn2's [NX-SCHEMA] §6.1 (inferred)"),
        "pe_rows": (128, "128x128 PE array [ARCH4] §6.1"),
        "pe_cols": (128, "128x128 PE array [ARCH4] §6.1"),
        "sbuf_bytes_per_partition": (256 * KIB, "32 MiB / 128 partitions [ARCH4] §2.1 (derived)"),
        "sbuf_usable_bytes_per_partition": (
            240 * KIB, "256 KiB minus a 16 KiB compiler reserve as on NC-v2 [L-ALLOC] §2.1 (inferred)"),
        "psum_banks": (8, "8 banks x 2 KiB per partition [ARCH4] §2.1"),
        "psum_bank_bytes": (2 * KIB, "8 banks x 2 KiB per partition [ARCH4] §2.1"),
        "psum_tile_max_bytes": (16 * KIB, "NC-v4 moving F up to 8 banks [ARCH4] §6.1"),
        "gemm_moving_fmax": (4096, "moving free size <= 4096 with an fp32 result on NC-v4 [ARCH4, N-ISA] §5.1 C3"),
        "dma_engines": (16, "16 DMA engines per NeuronCore [DMA, DMABW] §6.4"),
        "dma_engine_bytes_per_s": (33e9, "33 B/ns per engine on Trn3, DMA/DMABW tables §6.4"),
        "dma_fixed_latency_s": (1.3e-6, "~1300 ns semaphore-to-start per transfer [DMABW] §6.4"),
        "hwdge_issue_s": (0.6e-6, "measured on NC-v3 [ARCH3, DGE]; assumed for NC-v4 (inferred)"),
        "hbm_core_bytes_per_s": (4.9e12 / 8, "4.9 TB/s per chip / 8 NeuronCores [HW-TRN3] §6.3 (derived)"),
        "hbm_stack_bytes_per_s": (4.9e12 / 4, "4.9 TB/s [HW-TRN3] over 4 stacks; stack count NOT FOUND, 4 as on Trn2 (inferred) §6.3"),
        "fp8_speedup": (2.0, "double_row on NC-v3/v4 [ARCH3] §6.2"),
        "mx_speedup": (4.0, "MXFP8/MXFP4 315 TFLOPS = 4x BF16 [ARCH4] §6.2"),
        "vector_perf_mode": (True, "VectorE 2x/4x modes for 16-bit data [ARCH3, ARCH4] §7.1"),
        "scalar_16bit_2x": (True, "ScalarE up to 2x for BF16/FP16 tensor_scalar/tensor_copy [ARCH4] §7.1"),
        "port_serialization": (False, "NC-v3+ lifts the NC-v2 port restrictions [ARCH3] §6.5"),
        "tensor_throttle": (True, "TensorE ramps from 50% after idle on Trn2/Trn3 [NX-SUM] §7.2"),
    }),
})


def resolve_target(name: str | HardwareTarget) -> HardwareTarget:
    """A target by name (trn1/trn2/trn3 or inf2/gen2/gen3/gen4); ValueError names the choices."""
    if isinstance(name, HardwareTarget):
        return name
    key = ALIASES.get(str(name).strip().lower())
    if key is None:
        others = ", ".join(alias for alias in ALIASES if alias not in TARGET_NAMES)
        raise ValueError(f"unknown target {name!r}: use one of {', '.join(TARGET_NAMES)} (or {others})")
    return TARGETS[key]

"""Per-target NeuronCore parameters used for validation (numbers from nki-spec.md §2, §6)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    name: str  # "trn1" | "trn2" | "trn3"
    nc_version: int  # 2 (NC-v2), 3 (NC-v3), 4 (NC-v4)
    sbuf_bytes_per_partition: int  # physical
    sbuf_usable_bytes_per_partition: int  # minus the 16 KiB the compiler reserves
    psum_banks: int
    psum_bank_bytes: int
    psum_tile_max_bytes: int  # largest PSUM tile (per partition, per block) / matmul result
    gemm_moving_fmax: int  # moving free size limit with an fp32 PSUM result

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes


KIB = 1024
TARGETS: dict[str, Target] = {
    "trn1": Target("trn1", 2, 192 * KIB, 176 * KIB, 8, 2 * KIB, 2 * KIB, 512),
    "trn2": Target("trn2", 3, 224 * KIB, 208 * KIB, 8, 2 * KIB, 2 * KIB, 512),
    "trn3": Target("trn3", 4, 256 * KIB, 240 * KIB, 8, 2 * KIB, 16 * KIB, 4096),
}

# Names accepted for NEURON_PLATFORM_TARGET_OVERRIDE (spec §1.3).
ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
           "trn3": "trn3", "gen4": "trn3"}

PMAX = 128
GEMM_STATIONARY_FMAX = 128
BN_STATS_FMAX = 512


def resolve_target(name: str) -> Target:
    key = ALIASES.get(str(name).strip().lower())
    if key is None:
        raise ValueError(f"unknown target {name!r}: use one of trn1, trn2, trn3 (or inf2, gen2, gen3, gen4)")
    return TARGETS[key]

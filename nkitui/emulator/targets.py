"""Per-target NeuronCore parameters used for validation: a view of the one hardware table,
nkitui.common.hardware (which gives the source of every number)."""

from __future__ import annotations

from nkitui.common.hardware import (
    ALIASES,
    BN_STATS_FMAX,
    GEMM_STATIONARY_FMAX,
    KIB,
    PMAX,
    TARGETS,
    resolve_target,
)
from nkitui.common.hardware import HardwareTarget as Target

__all__ = ["ALIASES", "BN_STATS_FMAX", "GEMM_STATIONARY_FMAX", "KIB", "PMAX", "TARGETS", "Target", "resolve_target"]

"""`nki.isa.constants`: the enumerations of the `nki.isa` API (also exported by `nki.isa`)."""

from __future__ import annotations

import enum

# the engine and NeuronCore-version enums are the legacy namespace's too (`x as x`: re-exported)
from nkitui.emulator.frontend_common import engine as engine
from nkitui.emulator.frontend_common import engine_name as engine_name
from nkitui.emulator.frontend_common import nc_version as nc_version
from nkitui.emulator.frontend_common import gpsimd_engine as gpsimd_engine
from nkitui.emulator.frontend_common import scalar_engine as scalar_engine
from nkitui.emulator.frontend_common import sync_engine as sync_engine
from nkitui.emulator.frontend_common import tensor_engine as tensor_engine
from nkitui.emulator.frontend_common import unknown_engine as unknown_engine
from nkitui.emulator.frontend_common import vector_engine as vector_engine


class reduce_cmd(enum.IntEnum):
    """Engine accumulator-register commands."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.IntEnum):
    """Descriptor Generation Engine mode."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.IntEnum):
    """Out-of-bounds handling of indirect (dynamic) accesses."""

    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    """Tensor Engine performance mode."""

    none = "none"
    double_row = "double_row"
    double_row_gen3 = "double_row_gen3"


class dma_engine(enum.IntEnum):
    """DMA transfer engine of `sendrecv`."""

    dma = 0
    gpsimd_dma = 1


dma_engine_ = engine.dma

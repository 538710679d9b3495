"""`nki.isa.constants`: the enumerations of the `nki.isa` API (also exported by `nki.isa`)."""

from __future__ import annotations

import enum


class engine(enum.IntEnum):
    """Neuron Device engines."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


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


class nc_version(enum.IntEnum):
    """NeuronCore version: gen2 (trn1/inf2), gen3 (trn2), gen4 (trn3)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(enum.IntEnum):
    """DMA transfer engine of `sendrecv`."""

    dma = 0
    gpsimd_dma = 1


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown
dma_engine_ = engine.dma
sync_engine = engine.sync

_ENGINE_NAMES = {engine.unknown: None, engine.tensor: "tensor", engine.scalar: "scalar", engine.gpsimd: "gpsimd",
                 engine.dma: "dma", engine.vector: "vector", engine.sync: "sync"}


def engine_name(e) -> str | None:
    """An engine constant (this module's, the legacy one, or a name) -> engine name; None = let the
    emulator choose (engine.unknown)."""
    if e is None:
        return None
    if isinstance(e, str):
        return None if e in ("", "unknown") else e
    name = getattr(e, "name", None)
    if isinstance(name, str):
        return None if name == "unknown" else name
    try:
        return _ENGINE_NAMES.get(engine(int(e)))
    except (ValueError, TypeError):
        return None

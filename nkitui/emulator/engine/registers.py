"""Sequencer register instructions: `register_load`, `register_store`, `register_move`.

Registers are 32-bit integers held by the engine sequencers; the emulator keeps their value in the
`VirtualRegister` object. Loads and stores move one element between a register and SBUF/HBM and
are recorded on the sync engine (they occupy the sequencer, not a compute engine).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from nkitui.emulator.engine.common import current, hbm_or_sbuf, write
from nkitui.emulator.errors import OperandShapeError
from nkitui.emulator.tensor import Tensor


class Register(Protocol):
    """A sequencer register as the front end holds it (the `nki` namespace's VirtualRegister)."""

    @property
    def value(self) -> int: ...

    def set(self, value: int) -> None: ...


def _one(t: Tensor, api: str, role: str) -> None:
    if not isinstance(t, Tensor):
        raise OperandShapeError(f"{api}: '{role}' must be a tensor with one element, got {type(t).__name__}")
    hbm_or_sbuf(t, api, role)
    if t.size != 1:
        raise OperandShapeError(f"{api}: '{role}' must hold exactly one element (shape [1] or [1, 1]), got {t.shape}")
    if t.storage.dtype.itemsize > 4:
        raise OperandShapeError(f"{api}: registers are 32 bits wide; '{role}' is {t.storage.dtype.name}")


def register_load(reg: Register, src: Tensor, *, api: str = "register_load") -> None:
    run = current()
    _one(src, api, "src")
    run.record("sync", "register_load", (src,), (), partitions=1, free=1, meta={"api": api})
    if run.execute:
        v = np.asarray(src.array()).reshape(-1)[0]
        reg.set(int(np.asarray(v).astype(np.float64)) if src.storage.dtype.is_float else int(v))


def register_store(dst: Tensor, reg: Register, *, api: str = "register_store") -> None:
    run = current()
    _one(dst, api, "dst")
    run.record("sync", "register_store", (), (dst,), partitions=1, free=1, meta={"api": api})
    write(run, dst, np.full(dst.shape, reg.value, dtype=np.int64) if run.execute else None)


def register_move(reg: Register, value: int, *, api: str = "register_move") -> None:
    run = current()
    run.record("sync", "register_move", (), (), partitions=1, free=0, meta={"api": api})
    reg.set(value)

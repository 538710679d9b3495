"""Helpers shared by the legacy `nl` and `nisa` modules (return-style calls over the engine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from nkitui.emulator import dtypes as dt
from nkitui.emulator import lowering as _lowering
from nkitui.emulator.api_types import DTypeLike
from nkitui.emulator.errors import OperandShapeError
from nkitui.emulator.frontend_common import hbm_operand_error
from nkitui.emulator.legacy.indexing import NO_MASK, MaskPlan, narrow, plan_mask
from nkitui.emulator.legacy.tile import LegacyTensor
from nkitui.emulator.runtime import Run, current
from nkitui.emulator.tensor import Tensor

__all__ = ["LegacyTensor", "MaskPlan", "as_tile", "dtype_or", "fresh", "mark", "narrow", "plan_mask",
           "current", "Run", "dt", "np", "Tensor", "sbuf_operand"]


def as_tile(x: object, api: str, role: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise OperandShapeError(f"operand '{role}' of {api} must be a tile, got {type(x).__name__} {x!r}")
    if x.storage.memory == "hbm":
        raise hbm_operand_error(api, role)
    return x


def sbuf_operand(run: Run, t: Tensor, api: str, role: str) -> Tensor:
    """A TensorE operand in SBUF (`lowering.sbuf_operand`: a PSUM tile is copied to a fresh SBUF tile, as
    the legacy compiler does; AWS's flash-attention backward passes `nisa.nc_transpose` results straight
    to `nisa.nc_matmul`)."""
    if t.storage.memory != "psum":
        return t
    return _lowering.sbuf_operand(t, lambda shape, dtype: fresh(run, shape, dtype, NO_MASK), api, role)


def dtype_or(dtype: DTypeLike, default: dt.DType) -> dt.DType:
    return default if dtype is None else dt.dtype_of(dtype)


def fresh(run: Run, shape: Sequence[int], dtype: dt.DType, plan: MaskPlan, memory: str = "sbuf",
          track: bool = True, name: str = "") -> LegacyTensor:
    """A new result tile; pre-filled with sentinels only when a mask leaves parts unwritten."""
    partial = plan.partial
    if shape and shape[0] <= 128 and type(shape) is tuple:
        st = run.new_storage(shape, dtype, memory, name, 0, partial, "", track)
    else:  # the slow path reports an oversized partition dimension
        st = run.allocate(shape, dtype, memory, name=name, fill=partial, what="result tile", track=track)
    t = LegacyTensor.whole(st)
    if partial:
        t._written = plan.for_output(t.shape)
    elif memory != "hbm" and len(shape) >= 2:
        t._tile_checked = True  # a whole on-chip tile with a valid partition dim: engine.common.tile() has nothing to check
    return t


def mark(run: Run, tile: Tensor, ref: object = None) -> LegacyTensor:
    """Remember that `tile` is the fresh output of the latest instruction (for assignment retargeting);
    it inherits the index-grid axes of `ref`, the operand that defined its iteration space."""
    t: LegacyTensor = tile  # type: ignore[assignment]  # made by fresh() (directly, or by a lowering through _new_tile); no cast(): a call per instruction
    t._producer = run.instructions
    g = getattr(ref, "_grid_axes", None)
    if g is not None and getattr(ref, "shape") == t.shape:  # noqa: B009  (ref has grid axes: a tensor)
        t._grid_axes = g
    return t


def align(value: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """Match `value` and `dst` dimension by dimension when both come from the same index grids in a
    different order (e.g. storing a (d, q) tile through `out[q_idx, d_idx]`): the HBM side (or
    else the value) is re-laid out. Returns (value, dst)."""
    gv = getattr(value, "_grid_axes", None)
    gd = getattr(dst, "_grid_axes", None)
    if (gv is None or gd is None or gv == gd or sorted(gv) != sorted(gd) or -1 in gv
            or not isinstance(value, Tensor)):
        return value, dst
    if dst.storage.memory == "hbm":
        return value, _permute(dst, gd, gv)
    return _permute(value, gv, gd), dst


def _permute(t: Tensor, have: Sequence[int], want: Sequence[int]) -> LegacyTensor:
    specs = [("r", 0, 1, n, want.index(a)) for a, n in zip(have, t.shape)]
    shape = tuple(t.shape[have.index(a)] for a in want)
    out = cast(LegacyTensor, t.compose(specs, shape))  # the legacy front end's views are LegacyTensors
    out._grid_axes = tuple(want)
    return out

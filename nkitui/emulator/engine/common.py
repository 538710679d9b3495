"""Validation and data helpers shared by the instruction implementations."""

from __future__ import annotations

import math

import numpy as np

from nkitui.emulator import dtypes as dt
from nkitui.emulator.errors import (
    EngineMemoryError,
    OperandShapeError,
    PartitionDimError,
)
from nkitui.emulator.runtime import Run, current
from nkitui.emulator.targets import PMAX
from nkitui.emulator.tensor import Tensor

__all__ = ["current", "Run", "tile", "hbm_or_sbuf", "same_partitions", "fits", "values", "scalar_or_vector",
           "free_size", "no_gpsimd_psum", "not_both_psum"]


def tile(t, api: str, role: str) -> Tensor:
    """An on-chip operand: in SBUF/PSUM, partition dim first and <= 128, inside its bounds."""
    if getattr(t, "_ok", False):
        return t
    if not isinstance(t, Tensor):
        raise OperandShapeError(f"operand '{role}' of {api} must be a tile, got {type(t).__name__} {t!r}")
    st = t.st
    if st.pax < 0:
        raise EngineMemoryError(f"Expected operand '{role}' of '{api}' to be in address space 'psum|sbuf', "
                                f"but got a tensor in 'hbm' (load it into SBUF first)")
    if t.fancy is None and t.ent[st.pax][3] != 0 and len(t.shape) > 0:
        raise PartitionDimError(f"operand '{role}' of {api}: the partition dimension must be the first "
                                f"dimension of a tile (view shape {t.shape}); index the block dimensions first")
    if t.shape and t.shape[0] > PMAX:
        raise PartitionDimError(f"partition dimension {t.shape[0]} exceeds {PMAX} in operand '{role}' of {api}")
    if len(t.shape) < 2:
        raise PartitionDimError(f"operand '{role}' of {api} must have at least 2 dimensions "
                                f"(partition, free); got shape {t.shape}")
    t.check_bounds(api)
    t._ok = True
    return t


def hbm_or_sbuf(t, api: str, role: str, allow_psum: bool = False) -> Tensor:
    if not isinstance(t, Tensor):
        raise OperandShapeError(f"operand '{role}' of {api} must be a tensor, got {type(t).__name__}")
    if t.st.memory == "psum" and not allow_psum:
        raise EngineMemoryError(f"DMA cannot access PSUM: operand '{role}' of {api} is a PSUM tile; "
                                "copy it to SBUF first (nisa.tensor_copy)")
    if t.st.pax >= 0:
        tile(t, api, role)
    else:
        t.check_bounds(api)
    return t


def same_partitions(api: str, *named) -> None:
    p0, r0 = named[0][0].shape[0], named[0][1]
    for t, r in named[1:]:
        if t.shape[0] != p0:
            raise OperandShapeError(f"{api}: number of partitions mismatch between '{r0}' ({p0}) and "
                                    f"'{r}' ({t.shape[0]})")


def free_size(t: Tensor) -> int:
    return math.prod(t.shape[1:])


def fits(src_shape: tuple[int, ...], dst_shape: tuple[int, ...]) -> bool:
    """Equal shapes, NumPy-broadcastable to dst, or same partitions and elements per partition."""
    if src_shape == dst_shape:
        return True
    if len(src_shape) <= len(dst_shape) and all(
            s == d or s == 1 for s, d in zip(src_shape[::-1], dst_shape[::-1])):
        return True
    return src_shape[:1] == dst_shape[:1] and math.prod(src_shape[1:]) == math.prod(dst_shape[1:])


def check_fits(api: str, t: Tensor, role: str, dst: Tensor) -> None:
    if not fits(t.shape, dst.shape):
        raise OperandShapeError(f"{api}: operand '{role}' of shape {t.shape} does not match the output "
                                f"shape {dst.shape} (same partitions and elements per partition, or broadcastable)")


def values(t: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """fp32 values of `t` laid out for an instruction writing `shape`."""
    a = t.read_f32()
    if a.shape == shape or (a.ndim <= len(shape) and all(
            s == d or s == 1 for s, d in zip(a.shape[::-1], shape[::-1]))):
        return a
    return a.reshape(shape)


def raw(t: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    a = t.array()
    if a.shape == shape or (a.ndim <= len(shape) and all(
            s == d or s == 1 for s, d in zip(a.shape[::-1], shape[::-1]))):
        return a
    return a.reshape(shape)


def scalar_or_vector(x, api: str, role: str, partitions: int, ndim: int):
    """A per-partition operand: a Python/numpy scalar or a (P, 1) tile. Returns (value, tensor|None)."""
    if isinstance(x, Tensor):
        tile(x, api, role)
        if x.shape[0] != partitions or math.prod(x.shape[1:]) != 1:
            raise OperandShapeError(f"{api}: operand '{role}' must be a scalar or a tile of shape "
                                    f"({partitions}, 1); got {x.shape}")
        return x, x
    if isinstance(x, (bool, int, float, np.integer, np.floating)):
        return x, None
    if isinstance(x, np.ndarray) and x.size == 1:
        return x.reshape(()).item(), None
    raise OperandShapeError(f"{api}: operand '{role}' must be a scalar or a ({partitions}, 1) tile, "
                            f"got {type(x).__name__}")


def operand_values(x, t: Tensor | None, ndim: int) -> np.ndarray | float:
    """fp32 values of a scalar-or-vector operand, shaped (P, 1, ..., 1) to broadcast over free dims."""
    if t is None:
        return np.float32(x)
    return t.read_f32().reshape((t.shape[0],) + (1,) * (ndim - 1))


def no_gpsimd_psum(api: str, engine: str, *named) -> None:
    if engine != "gpsimd":
        return
    for t, r in named:
        if isinstance(t, Tensor) and t.st.memory == "psum":
            raise EngineMemoryError(f"GpSimd engine cannot access PSUM: operand '{r}' of {api} is in psum; "
                                    "use the vector or scalar engine, or copy the tile to SBUF")


def not_both_psum(api: str, a, ra: str, b, rb: str) -> None:
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.st.memory == "psum" and b.st.memory == "psum":
        raise EngineMemoryError(f"{api}: operands '{ra}' and '{rb}' cannot both be in PSUM")


def write(run: Run, dst: Tensor, result: np.ndarray, where=None, accumulate: bool = False) -> None:
    run.note_write(dst, accumulate)
    if run.execute:
        if result.shape != dst.shape and result.size == dst.size and not _bcast(result.shape, dst.shape):
            result = result.reshape(dst.shape)
        dst.write(result, where)


def _bcast(a, b) -> bool:
    return len(a) <= len(b) and all(s == d or s == 1 for s, d in zip(a[::-1], b[::-1]))


def dname(d: dt.DType) -> str:
    return d.name

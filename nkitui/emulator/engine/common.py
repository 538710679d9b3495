"""Validation and data helpers shared by the instruction implementations."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import alu, replaylog as _replaylog
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
           "free_size", "no_gpsimd_psum", "not_both_psum", "Scalar", "Operand", "Mask", "Op"]

# The operand types of the instructions (the front ends pass what the kernel wrote):
Scalar = bool | int | float | np.bool_ | np.integer[Any] | np.floating[Any]
# a scalar-or-vector operand: a Python/numpy scalar, a one-element array, or a (P, 1) tile
Operand = Tensor | Scalar | np.ndarray
# `where=`: a boolean mask over the destination (legacy predicates), None for every element
Mask = NDArray[np.bool_] | None
# an ALU operator or activation function as the kernel names it: an NKI name, a front end's function or a numpy
# ufunc (alu.resolve_binary / resolve_activation say which)
Op = object


def tile(t: object, api: str, role: str) -> Tensor:
    """An on-chip operand: in SBUF/PSUM, partition dim first and <= 128, inside its bounds."""
    if getattr(t, "_tile_checked", False):
        return t  # type: ignore[return-value]  # only a Tensor has _tile_checked (the fast path: no isinstance)
    if not isinstance(t, Tensor):
        raise OperandShapeError(f"operand '{role}' of {api} must be a tile, got {type(t).__name__} {t!r}")
    st = t.storage
    if st.partition_dim < 0:
        raise EngineMemoryError(f"Expected operand '{role}' of '{api}' to be in address space 'psum|sbuf', "
                                f"but got a tensor in 'hbm' (load it into SBUF first)")
    if t.gather_indices is None and t.dims[st.partition_dim][3] != 0 and len(t.shape) > 0:
        raise PartitionDimError(f"operand '{role}' of {api}: the partition dimension must be the first "
                                f"dimension of a tile (view shape {t.shape}); index the block dimensions first")
    if t.shape and t.shape[0] > PMAX:
        raise PartitionDimError(f"partition dimension {t.shape[0]} exceeds {PMAX} in operand '{role}' of {api}")
    if len(t.shape) < 2:
        raise PartitionDimError(f"operand '{role}' of {api} must have at least 2 dimensions "
                                f"(partition, free); got shape {t.shape}")
    t.check_bounds(api)
    t._tile_checked = True
    return t


def elementwise_operands(api: str, dst: Tensor, src: Tensor, role: str) -> None:
    """Validate an instruction reading `src` element by element into `dst`: both on-chip tiles with
    the same partitions, `src` the output's shape (or broadcastable to it)."""
    tile(dst, api, "dst")
    tile(src, api, role)
    same_partitions(api, (dst, "dst"), (src, role))
    check_fits(api, src, role, dst)


def reduce_outputs(api: str, dst: Tensor, reduce_res: Tensor | None, partitions: int) -> tuple[Tensor, ...]:
    """The instruction's outputs: `dst`, and `reduce_res` (checked to be a (P, 1) tile) when given."""
    if reduce_res is None:
        return (dst,)
    tile(reduce_res, api, "reduce_res")
    if reduce_res.shape[0] != partitions or reduce_res.size != partitions:
        raise OperandShapeError(f"{api}: reduce_res must have shape ({partitions}, 1), got {reduce_res.shape}")
    return (dst, reduce_res)


def accumulators(run: Run, engine: str) -> np.ndarray:
    """The engine's 128 per-partition accumulator registers, zero until first used: ScalarE's
    (`activation` reductions, `activate2`) or VectorE's (shared by its accumulating instructions)."""
    if engine == "scalar":
        if run.act_acc is None:
            run.act_acc = np.zeros(PMAX, dtype=np.float32)
        return run.act_acc
    if run.vec_acc is None:
        run.vec_acc = np.zeros(PMAX, dtype=np.float32)
    return run.vec_acc


def row_reduction(op: alu.BinaryOp, y: np.ndarray, partitions: int, where: Mask = None) -> np.ndarray:
    """`op`'s reduction of each partition's row of `y` (fp32, shape (P,)); elements outside the
    boolean mask `where` count as the operator's identity."""
    flat = y.reshape(partitions, -1)
    if where is not None:
        m = np.broadcast_to(where, y.shape).reshape(partitions, -1)
        flat = np.where(m, flat, np.float32(op.identity if op.identity is not None else 0))
    assert op.reduce is not None, op.name  # the callers resolved a reducing operator
    return np.asarray(op.reduce(flat, (1,)), dtype=np.float32).reshape(partitions)


def hbm_or_sbuf(t: object, api: str, role: str, allow_psum: bool = False) -> Tensor:
    if not isinstance(t, Tensor):
        raise OperandShapeError(f"operand '{role}' of {api} must be a tensor, got {type(t).__name__}")
    if t.storage.memory == "psum" and not allow_psum:
        raise EngineMemoryError(f"DMA cannot access PSUM: operand '{role}' of {api} is a PSUM tile; "
                                "copy it to SBUF first (nisa.tensor_copy)")
    if t.storage.partition_dim >= 0:
        if not getattr(t, "_tile_checked", False):  # (tile()'s own fast path, without its call)
            tile(t, api, role)
    elif not t._in_bounds:  # (check_bounds' own fast path, without its call)
        t.check_bounds(api)
    return t


def same_partitions(api: str, *named: tuple[Tensor, str]) -> None:
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
    if _bcast(src_shape, dst_shape):
        return True
    return src_shape[:1] == dst_shape[:1] and math.prod(src_shape[1:]) == math.prod(dst_shape[1:])


def check_fits(api: str, t: Tensor, role: str, dst: Tensor) -> None:
    if not fits(t.shape, dst.shape):
        raise OperandShapeError(f"{api}: operand '{role}' of shape {t.shape} does not match the output "
                                f"shape {dst.shape} (same partitions and elements per partition, or broadcastable)")


def values(t: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """fp32 values of `t` laid out for an instruction writing `shape`."""
    a = t.read_f32()
    if a.shape == shape or _bcast(a.shape, shape):
        return a
    return a.reshape(shape)


def raw(t: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """The stored values of `t` (no conversion) laid out for an instruction writing `shape`."""
    a = t.array()
    if a.shape == shape or _bcast(a.shape, shape):
        return a
    return a.reshape(shape)


def scalar_or_vector(x: object, api: str, role: str, partitions: int,
                     ndim: int) -> tuple[Tensor | Scalar, Tensor | None]:
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
        item: Scalar = x.reshape(()).item()
        return item, None
    raise OperandShapeError(f"{api}: operand '{role}' must be a scalar or a ({partitions}, 1) tile, "
                            f"got {type(x).__name__}")


def operand_values(x: Tensor | Scalar, t: Tensor | None, ndim: int) -> np.ndarray | np.float32:
    """fp32 values of a scalar-or-vector operand, shaped (P, 1, ..., 1) to broadcast over free dims."""
    if t is None:
        return np.float32(x)  # type: ignore[arg-type]  # t is None: scalar_or_vector returned x as a Scalar
    return t.read_f32().reshape((t.shape[0],) + (1,) * (ndim - 1))


def no_gpsimd_psum(api: str, engine: str, *named: tuple[object, str]) -> None:
    if engine != "gpsimd":
        return
    for t, r in named:
        if isinstance(t, Tensor) and t.storage.memory == "psum":
            raise EngineMemoryError(f"GpSimd engine cannot access PSUM: operand '{r}' of {api} is in psum; "
                                    "use the vector or scalar engine, or copy the tile to SBUF")


def not_both_psum(api: str, a: object, ra: str, b: object, rb: str) -> None:
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.storage.memory == "psum" and b.storage.memory == "psum":
        raise EngineMemoryError(f"{api}: operands '{ra}' and '{rb}' cannot both be in PSUM")


def write(run: Run, dst: Tensor, result: np.ndarray | None, where: Mask = None,
          accumulate: bool = False) -> None:
    """Round `result` into `dst` (None in shape-only runs, which only note the write)."""
    run.note_write(dst, accumulate)
    if _replaylog._rec is not None:  # a write the replayable log must account for (a put at depth 0)
        _replaylog.direct_write(dst, result, where, accumulate)
    if run.execute:
        assert result is not None, "an executing run computes every result"
        if result.shape != dst.shape and result.size == dst.size and not _bcast(result.shape, dst.shape):
            result = result.reshape(dst.shape)
        dst.write(result, where, by=run)  # the instruction's write (task code has no `run` to pass)


def _bcast(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """NumPy broadcasting of shape `a` to shape `b`."""
    return len(a) <= len(b) and all(s == d or s == 1 for s, d in zip(a[::-1], b[::-1]))


def dname(d: dt.DType) -> str:
    return d.name

"""GpSimdE instructions: iota, affine_select, cross-partition reduce."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import SupportsInt

import numpy as np

from nkitui.emulator import alu
from nkitui.emulator.engine.common import Mask, Op, Scalar, check_fits, current, raw, tile, values, write
from nkitui.emulator.errors import EngineMemoryError, EngineOpError, OperandShapeError
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
Pattern = Sequence[Sequence[SupportsInt]]  # an access pattern: [[step, count], ...] over the free dimensions


def _sbuf_only(api: str, *named: tuple[object, str]) -> None:
    for t, r in named:
        if isinstance(t, Tensor) and t.storage.memory != "sbuf":
            raise EngineMemoryError(f"GpSimd engine cannot access PSUM: operand '{r}' of {api} is in "
                                    f"{t.storage.memory}; GpSimd reads and writes SBUF only")


def affine_values(shape: tuple[int, ...], pattern: Pattern | None, offset: int = 0,
                  channel_multiplier: int = 0) -> np.ndarray:
    """offset + p * channel_multiplier + sum_k step_k * idx_k over a [[step, num], ...] pattern."""
    P = shape[0]
    pat = [(int(s), int(n)) for s, n in pattern] if pattern else []
    F = math.prod(n for _, n in pat) if pat else math.prod(shape[1:])
    if pat and F != math.prod(shape[1:]):
        raise OperandShapeError(f"pattern {pattern} covers {F} elements per partition but the tile holds "
                                f"{math.prod(shape[1:])}")
    v = np.full((P,) + tuple(n for _, n in pat), int(offset), dtype=np.int64)
    v += (np.arange(P, dtype=np.int64) * int(channel_multiplier)).reshape((P,) + (1,) * len(pat))
    for k, (step, num) in enumerate(pat):
        shp = [1] * (len(pat) + 1)
        shp[k + 1] = num
        v += (np.arange(num, dtype=np.int64) * step).reshape(shp)
    return v.reshape(shape)


def iota(dst: Tensor, pattern: Pattern | None = None, offset: int = 0, channel_multiplier: int = 0, *,
         values_grid: np.ndarray | None = None, where: Mask = None, api: str = "iota") -> None:
    """Integer index values (int32 math, then cast to dst's dtype). `values_grid` gives precomputed
    values (legacy affine expressions) instead of a pattern."""
    run = current()
    tile(dst, api, "dst")
    _sbuf_only(api, (dst, "dst"))
    run.record("gpsimd", "iota", (), (dst,), partitions=dst.shape[0], free=math.prod(dst.shape[1:]),
               meta={"api": api})
    if not run.execute:
        return write(run, dst, None, where)
    if values_grid is not None:
        v = np.broadcast_to(np.asarray(values_grid, dtype=np.int64), dst.shape)
    else:
        v = affine_values(dst.shape, pattern, offset, channel_multiplier)
    v = v.astype(np.int32).astype(np.int64)  # int32 math wraps
    write(run, dst, v if dst.storage.dtype.is_int else v.astype(_F32), where)


def affine_select(dst: Tensor, on_true: Tensor, on_false_value: Scalar, *,
                  predicate: np.ndarray | None = None, pattern: Pattern | None = None,
                  channel_multiplier: int = 0, offset: int = 0, cmp_op: Op = "greater_equal",
                  where: Mask = None, api: str = "affine_select") -> None:
    """dst = pred ? on_true : on_false_value, where pred is a boolean grid (legacy affine predicate)
    or cmp_op(offset + p * channel_multiplier + sum step_k * idx_k, 0) (pattern form)."""
    run = current()
    tile(dst, api, "dst")
    tile(on_true, api, "on_true_tile")
    check_fits(api, on_true, "on_true_tile", dst)
    _sbuf_only(api, (dst, "dst"), (on_true, "on_true_tile"))
    if isinstance(on_false_value, Tensor) or np.ndim(on_false_value) != 0:
        raise OperandShapeError(f"{api}: on_false_value must be a scalar (fp32) constant")
    run.record("gpsimd", "affine_select", (on_true,), (dst,), partitions=dst.shape[0],
               free=math.prod(dst.shape[1:]), meta={"api": api})
    if not run.execute:
        return write(run, dst, None, where)
    shape = dst.shape
    if predicate is None:
        cmp = alu.resolve_binary(cmp_op, "cmp_op")
        v = affine_values(shape, pattern, offset, channel_multiplier).astype(_F32)
        pred = cmp.fn(v, np.float32(0)) != 0
    else:
        pred = np.broadcast_to(np.asarray(predicate, dtype=bool), shape)
    if on_true.storage.dtype is dst.storage.dtype and not dst.storage.dtype.is_float:
        t = raw(on_true, shape)
        out = np.where(pred, t, np.asarray(on_false_value).astype(t.dtype))
    else:
        out = np.where(pred, values(on_true, shape), np.float32(on_false_value)).astype(_F32)
    write(run, dst, np.broadcast_to(out, shape), where)


def tensor_partition_reduce(dst: Tensor, op: Op, data: Tensor, *, where: Mask = None,
                            api: str = "tensor_partition_reduce") -> None:
    """Reduce across partitions: dst[1, F] = op over p of data[p, F] (GpSimd)."""
    run = current()
    tile(dst, api, "dst")
    tile(data, api, "data")
    _sbuf_only(api, (dst, "dst"), (data, "data"))
    opr = alu.resolve_binary(op)
    if opr.name not in ("add", "maximum", "minimum", "bitwise_or", "bitwise_and", "multiply"):
        raise EngineOpError(f"{api}: supported reductions are add, maximum, minimum, bitwise_or, bitwise_and")
    F = math.prod(data.shape[1:])
    if math.prod(dst.shape[1:]) != F:
        raise OperandShapeError(f"{api}: output shape {dst.shape} must keep the free size {F} of {data.shape}")
    run.record("gpsimd", "tensor_partition_reduce", (data,), (dst,), partitions=data.shape[0], free=F,
               meta={"api": api, "op": opr.name})
    if not run.execute:
        return write(run, dst, None, where)
    x = raw(data, data.shape) if opr.kind == "bitvec" else values(data, data.shape)
    assert opr.reduce is not None  # every operator allowed above reduces
    r = np.asarray(opr.reduce(x.reshape(data.shape[0], -1).T, (1,))).reshape(1, F)
    write(run, dst, np.broadcast_to(r.reshape((1,) + dst.shape[1:]), dst.shape), where)

"""`neuronxcc.nki.isa` (nisa) on the emulator: return-style ISA calls over the shared engine."""

from __future__ import annotations

import enum
import math
import types
from collections.abc import Callable, Sequence
from typing import NoReturn, SupportsInt

import numpy as np

from nkitui.emulator import engine as _eng
from nkitui.emulator.api_types import Axis, DTypeLike, Op, Operand, Scalar
from nkitui.emulator.engine.tensor_engine import check_matmul
from nkitui.emulator import dtypes as _dt
from nkitui.emulator.engine.vector import _axes as _norm_axes, reduced_shape as _reduced_shape
from nkitui.emulator.errors import EngineDtypeError, OperandShapeError
from nkitui.emulator.frontend_common import engine, nc_version  # noqa: F401  (public names, shared with nki.isa)
from nkitui.emulator.frontend_common import (  # noqa: F401
    gpsimd_engine, scalar_engine, sync_engine, tensor_engine, unknown_engine, vector_engine)
from nkitui.emulator.frontend_common import engine_name as _engine_name
from nkitui.emulator.legacy._support import as_tile, dtype_or, fresh, mark, sbuf_operand
from nkitui.emulator.legacy.indexing import NO_MASK, IndexExpr, Mask, Predicate, _on_axes, narrow, plan_mask
from nkitui.emulator.legacy.tile import LegacyTensor
from nkitui.emulator.runtime import current
from nkitui.emulator.tensor import Tensor

dma_engine = engine.dma


class reduce_cmd(enum.Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class oob_mode(enum.Enum):
    error = 0
    skip = 1


class dge_mode(enum.Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


constants = types.SimpleNamespace(engine=engine, reduce_cmd=reduce_cmd, oob_mode=oob_mode, dge_mode=dge_mode,
                                  nc_version=nc_version, matmul_perf_mode=matmul_perf_mode)


# the legacy ISA calls' default `engine=0` (engine.unknown: the emulator picks), tested by identity on the
# hot path instead of a call of engine_name, which maps it to None as well
_DEFAULT_ENGINE = 0


def get_nc_version() -> nc_version:
    return nc_version(current().target.nc_version)


# -- TensorE --------------------------------------------------------------------------------------
def nc_matmul(stationary: Tensor, moving: Tensor, *, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, tile_position: Sequence[int] = (),
              tile_size: Sequence[int] = (), perf_mode: str | None = None, mask: Mask = None,
              **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.nc_matmul"
    stationary = as_tile(stationary, api, "stationary")
    moving = as_tile(moving, api, "moving")
    if stationary.storage.memory == "psum":  # (sbuf_operand's test, without its call in the common case)
        stationary = sbuf_operand(run, stationary, api, "stationary")
    if moving.storage.memory == "psum":
        moving = sbuf_operand(run, moving, api, "moving")
    checked = check_matmul(stationary, moving, perf_mode=perf_mode, api=api)
    shape = (checked[1], checked[2])
    d = stationary.storage.dtype if is_transpose else _dt.float32
    plan = plan_mask(mask, shape)
    out = fresh(run, shape, d, plan, memory="psum", track=False)
    run.alloc.matmul_result(out.storage)
    if plan.skip:
        return out
    _eng.nc_matmul(out, stationary, moving, is_transpose=bool(is_transpose), perf_mode=perf_mode,
                   where=plan.where, api=api, checked=checked,
                   meta={k: v for k, v in (("is_stationary_onezero", is_stationary_onezero),
                                           ("is_moving_onezero", is_moving_onezero),
                                           ("tile_position", tuple(tile_position) or None),
                                           ("tile_size", tuple(tile_size) or None)) if v}
                   if run.recording else None)  # (trace metadata: the engine reads it only while recording)
    out._matmul_instruction = run.trace.instructions[-1] if run.trace is not None else True  # (recording)
    return mark(run, out)


def nc_transpose(data: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
                 engine: engine | int = 0, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.nc_transpose"
    data = as_tile(data, api, "data")
    P, F = data.shape[0], math.prod(data.shape[1:])
    eng = _engine_name(engine)
    if eng is None:
        eng = "vector" if (P <= 32 and F <= 32) else "tensor"
    mem = "psum" if eng == "tensor" else "sbuf"
    out = fresh(run, (F, P), dtype_or(dtype, data.storage.dtype), NO_MASK, memory=mem)
    _eng.nc_transpose(out, data, engine=eng, api=api)
    return mark(run, out)


# -- ScalarE --------------------------------------------------------------------------------------
def activation(op: Op, data: Tensor, *, bias: Tensor | None = None, scale: Operand = 1.0,
               reduce_op: Op | None = None, reduce_res: Tensor | None = None,
               reduce_cmd: reduce_cmd | str | None = None, mask: Mask = None,
               dtype: DTypeLike = None, **kwargs: object) -> LegacyTensor:
    return _activation("nisa.activation", op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, mask, dtype)


def activation_reduce(op: Op, data: Tensor, *, reduce_op: Op, reduce_res: Tensor, bias: Tensor | None = None,
                      scale: Operand = 1.0, mask: Mask = None, dtype: DTypeLike = None,
                      **kwargs: object) -> LegacyTensor:
    return _activation("nisa.activation_reduce", op, data, bias, scale, reduce_op, reduce_res, "reset_reduce", mask,
                       dtype)


def _activation(api: str, op: Op, data: Tensor, bias: Tensor | None, scale: Operand, reduce_op: Op | None,
                reduce_res: Tensor | None, reduce_cmd: reduce_cmd | str | None, mask: Mask,
                dtype: DTypeLike) -> LegacyTensor:
    run = current()
    data = as_tile(data, api, "data")
    plan = plan_mask(mask, data)
    out = fresh(run, data.shape, dtype_or(dtype, data.storage.dtype), plan)
    if plan.skip:
        return out
    _eng.activation(narrow(out, plan.box), op, narrow(data, plan.box), bias=narrow(bias, plan.box),
                    scale=narrow(scale, plan.box), reduce_op=reduce_op, reduce_res=narrow(reduce_res, plan.box),
                    reduce_cmd=reduce_cmd, where=plan.where, api=api)
    return mark(run, out, data)


# -- VectorE / GpSimd -----------------------------------------------------------------------------
def tensor_tensor(data1: Tensor, data2: Tensor, op: Op, *, dtype: DTypeLike = None,
                  mask: Mask = None, engine: engine | int = 0, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_tensor"
    data1 = as_tile(data1, api, "data1")
    data2 = as_tile(data2, api, "data2")
    data1, data2, out_shape = _eng.tensor_tensor_operands(api, data1, data2, per_partition_broadcast=True)
    d = dtype_or(dtype, _dt.promote(data1.storage.dtype, data2.storage.dtype))
    plan = plan_mask(mask, data1)
    out = fresh(run, out_shape, d, plan)
    if not plan.skip:
        _eng.tensor_tensor(narrow(out, plan.box), narrow(data1, plan.box), narrow(data2, plan.box), op,
                           engine=_engine_name(engine), where=plan.where, api=api)
    return mark(run, out, data1)


def tensor_scalar(data: Tensor, op0: Op, operand0: Operand, reverse0: bool = False, op1: Op | None = None,
                  operand1: Operand | None = None, reverse1: bool = False, *, dtype: DTypeLike = None,
                  mask: Mask = None, engine: engine | int = 0, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_scalar"
    data = as_tile(data, api, "data")
    plan = NO_MASK if mask is None else plan_mask(mask, data)  # (no call for the common unmasked instruction)
    out = fresh(run, data.shape, data.storage.dtype if dtype is None else dtype_or(dtype, data.storage.dtype), plan)
    if plan.box is None and not plan.skip:
        _eng.tensor_scalar(out, data, op0, operand0, reverse0, op1, operand1, reverse1,
                           engine=None if engine is _DEFAULT_ENGINE else _engine_name(engine), where=plan.where,
                           api=api)
    elif not plan.skip:
        _eng.tensor_scalar(narrow(out, plan.box), narrow(data, plan.box), op0, narrow(operand0, plan.box),
                           reverse0, op1, narrow(operand1, plan.box), reverse1, engine=_engine_name(engine),
                           where=plan.where, api=api)
    return mark(run, out, data)


def scalar_tensor_tensor(*, data: Tensor, op0: Op, operand0: Operand, op1: Op, operand1: Tensor,
                         reverse0: bool = False, reverse1: bool = False, dtype: DTypeLike = None,
                         mask: Mask = None, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.scalar_tensor_tensor"
    data = as_tile(data, api, "data")
    plan = plan_mask(mask, data)
    out = fresh(run, data.shape, dtype_or(dtype, _dt.promote(data.storage.dtype, operand1.storage.dtype)), plan)
    if not plan.skip:
        _eng.scalar_tensor_tensor(narrow(out, plan.box), narrow(data, plan.box), op0, narrow(operand0, plan.box),
                                  op1, narrow(operand1, plan.box), reverse0, reverse1, where=plan.where, api=api)
    return mark(run, out, data)


def tensor_scalar_reduce(*, data: Tensor, op0: Op, operand0: Operand, reduce_op: Op, reduce_res: Tensor,
                         reverse0: bool = False, dtype: DTypeLike = None, mask: Mask = None,
                         **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_scalar_reduce"
    data = as_tile(data, api, "data")
    plan = plan_mask(mask, data)
    out = fresh(run, data.shape, dtype_or(dtype, data.storage.dtype), plan)
    if not plan.skip:
        _eng.tensor_scalar_reduce(narrow(out, plan.box), narrow(data, plan.box), op0, narrow(operand0, plan.box),
                                  reduce_op, narrow(reduce_res, plan.box), reverse0, where=plan.where, api=api)
    return mark(run, out, data)


def tensor_scalar_cumulative(*, src: Tensor, dst: Tensor, op0: Op, op1: Op, imm0: Operand,
                             imm1: Scalar | None = None, reduce_cmd: reduce_cmd | str | None = None,
                             mask: Mask = None, **kwargs: object) -> Tensor:
    """Statement style (as legacy kernels call it): writes the running scan into `dst`."""
    current()
    api = "nisa.tensor_scalar_cumulative"
    plan = plan_mask(mask, dst)
    if not plan.skip:
        _eng.tensor_scalar_cumulative(narrow(dst, plan.box), narrow(as_tile(src, api, "src"), plan.box), op0, op1,
                                      imm0, imm1, reduce_cmd if reduce_cmd is not None else "reset_reduce",
                                      where=plan.where, api=api)
    return dst


def tensor_reduce(op: Op, data: Tensor, axis: Axis, *, mask: Mask = None, dtype: DTypeLike = None,
                  negate: bool = False, keepdims: bool = False, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_reduce"
    data = as_tile(data, api, "data")
    axes = _norm_axes(axis, len(data.shape), api)
    shape = _reduced_shape(data.shape, axes, keepdims)
    plan = plan_mask(mask, data)
    out = fresh(run, shape, dtype_or(dtype, data.storage.dtype), plan)
    if plan.skip:
        return out
    o = out
    if plan.box is not None:
        o = out.narrow((plan.box[0],) + tuple((0, n) for n in shape[1:]))
    _eng.tensor_reduce(o, op, narrow(data, plan.box), axes, negate=negate, keepdims=keepdims, where=plan.where,
                       api=api)
    return mark(run, out)


def tensor_partition_reduce(op: Op, data: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
                            **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_partition_reduce"
    data = as_tile(data, api, "data")
    out = fresh(run, (1,) + data.shape[1:], dtype_or(dtype, data.storage.dtype), NO_MASK)
    _eng.tensor_partition_reduce(out, op, data, api=api)
    return mark(run, out)


def tensor_tensor_scan(data0: Tensor, data1: Tensor, initial: Operand, op0: Op, op1: Op, reverse0: bool = False,
                       reverse1: bool = False, *, dtype: DTypeLike = None, mask: Mask = None,
                       **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_tensor_scan"
    data0 = as_tile(data0, api, "data0")
    data1 = as_tile(data1, api, "data1")
    plan = plan_mask(mask, data0)
    out = fresh(run, data0.shape, dtype_or(dtype, _dt.promote(data0.storage.dtype, data1.storage.dtype)), plan)
    if not plan.skip:
        _eng.tensor_tensor_scan(narrow(out, plan.box), narrow(data0, plan.box), narrow(data1, plan.box),
                                narrow(initial, plan.box), op0, op1, reverse0, reverse1, where=plan.where, api=api)
    return mark(run, out, data0)


def tensor_copy(src: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
                engine: engine | int = 0, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.tensor_copy"
    src = as_tile(src, api, "src")
    plan = plan_mask(mask, src)
    out = fresh(run, src.shape, dtype_or(dtype, src.storage.dtype), plan)
    if not plan.skip:
        _eng.tensor_copy(narrow(out, plan.box), narrow(src, plan.box), engine=_engine_name(engine),
                         where=plan.where, api=api)
    return mark(run, out, src)


def tensor_copy_dynamic_src(src: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
                            **kwargs: object) -> LegacyTensor:
    """Copy from a view with dynamic (indirect) free-dim offsets: the view already gathers them here."""
    return tensor_copy(src, mask=mask, dtype=dtype)


def tensor_copy_dynamic_dst(*, dst: Tensor, src: Tensor, mask: Mask = None,
                            dtype: DTypeLike = None, **kwargs: object) -> Tensor:
    current()
    _eng.tensor_copy(as_tile(dst, "nisa.tensor_copy_dynamic_dst", "dst"),
                     as_tile(src, "nisa.tensor_copy_dynamic_dst", "src"), api="nisa.tensor_copy_dynamic_dst")
    return dst


def tensor_copy_predicated(*, src: Tensor, predicate: Tensor, dst: Tensor, reverse_pred: bool = False,
                           mask: Mask = None, **kwargs: object) -> Tensor:
    current()
    api = "nisa.tensor_copy_predicated"
    plan = plan_mask(mask, dst)
    if not plan.skip:
        _eng.tensor_copy_predicated(narrow(dst, plan.box), narrow(src, plan.box), narrow(predicate, plan.box),
                                    reverse_pred, where=plan.where, api=api)
    return dst


def reciprocal(data: Tensor, *, dtype: DTypeLike = None, mask: Mask = None,
               engine: engine | int = 0, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.reciprocal"
    data = as_tile(data, api, "data")
    plan = plan_mask(mask, data)
    out = fresh(run, data.shape, dtype_or(dtype, data.storage.dtype), plan)
    if not plan.skip:
        _eng.reciprocal(narrow(out, plan.box), narrow(data, plan.box), engine=_engine_name(engine),
                        where=plan.where, api=api)
    return mark(run, out, data)


def iota(expr: IndexExpr | int, dtype: DTypeLike, *, mask: Mask = None,
         **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.iota"
    if isinstance(expr, (int, np.integer)):
        grid = np.asarray(expr).reshape(1, 1)
    elif isinstance(expr, IndexExpr):
        grid = expr.grid()
        dense = getattr(expr, "dense", None)
        if dense is not None and len(dense) == grid.ndim:
            grid = np.broadcast_to(grid, dense)  # nl.mgrid components are dense grids
    else:
        raise OperandShapeError(f"{api}: expr must be an affine expression of nl.arange indices, got "
                                f"{type(expr).__name__}")
    if grid.ndim < 2:
        grid = grid.reshape(grid.shape + (1,) * (2 - grid.ndim))
    shape = grid.shape
    plan = plan_mask(mask, shape)
    out = fresh(run, shape, _dt.dtype_of(dtype), plan)
    if not plan.skip:
        g = grid if plan.box is None else grid[tuple(slice(lo, hi) for lo, hi in plan.box)]
        _eng.iota(narrow(out, plan.box), values_grid=g, where=plan.where, api=api)
    return mark(run, out)


def affine_select(pred: Predicate | IndexExpr, on_true_tile: Tensor, on_false_value: Scalar, *,
                  mask: Mask = None, dtype: DTypeLike = None, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nisa.affine_select"
    on_true_tile = as_tile(on_true_tile, api, "on_true_tile")
    if isinstance(pred, Predicate):
        grid = pred.arr
    elif isinstance(pred, IndexExpr):
        grid = pred.grid() > 0
    else:
        raise OperandShapeError(f"{api}: pred must be an affine predicate of nl.arange indices (e.g. i_p >= i_f)")
    if on_true_tile.storage.memory == "psum":
        # GpSimd cannot read PSUM: the compiler evacuates the tile to SBUF first
        tmp = fresh(run, on_true_tile.shape, on_true_tile.storage.dtype, NO_MASK)
        _eng.tensor_copy(tmp, on_true_tile, api=api + " (psum->sbuf)")
        tmp._grid_axes = getattr(on_true_tile, "_grid_axes", None)
        on_true_tile = tmp
    shape = on_true_tile.shape
    plan = plan_mask(mask, on_true_tile)
    out = fresh(run, shape, dtype_or(dtype, on_true_tile.storage.dtype), plan)
    if not plan.skip:
        gaxes = getattr(on_true_tile, "_grid_axes", None)
        if gaxes is not None and len(gaxes) == len(shape):
            g = _on_axes(grid, gaxes, shape)
        else:
            g = grid.reshape((1,) * (len(shape) - grid.ndim) + grid.shape) if grid.ndim < len(shape) else grid
            while g.ndim > len(shape) and g.shape[0] == 1:
                g = g[0]
        g = np.broadcast_to(g, shape)
        if plan.box is not None:
            g = g[tuple(slice(lo, hi) for lo, hi in plan.box)]
        _eng.affine_select(narrow(out, plan.box), narrow(on_true_tile, plan.box), on_false_value, predicate=g,
                           where=plan.where, api=api)
    return mark(run, out, on_true_tile)


def memset(shape: Sequence[SupportsInt], value: Scalar, dtype: DTypeLike, *, mask: Mask = None,
           engine: engine | int = 0, **kwargs: object) -> LegacyTensor:
    run = current()
    dims = tuple(int(s) for s in shape)
    plan = plan_mask(mask, dims)
    out = fresh(run, dims, _dt.dtype_of(dtype), plan)
    if not plan.skip:
        _eng.memset(narrow(out, plan.box), value, engine=_engine_name(engine), where=plan.where, api="nisa.memset")
    return mark(run, out)


def bn_stats(data: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
             **kwargs: object) -> LegacyTensor:
    return _per_partition_stats(_eng.bn_stats, 6, "nisa.bn_stats", data, mask, dtype)


def bn_aggr(data: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
            **kwargs: object) -> LegacyTensor:
    return _per_partition_stats(_eng.bn_aggr, 2, "nisa.bn_aggr", data, mask, dtype)


def _per_partition_stats(instruction: Callable[..., None], width: int, api: str, data: Tensor, mask: Mask,
                         dtype: DTypeLike) -> LegacyTensor:
    """bn_stats / bn_aggr: `width` statistics per partition of the (masked) data."""
    run = current()
    data = as_tile(data, api, "data")
    plan = plan_mask(mask, data)
    out = fresh(run, (data.shape[0], width), dtype_or(dtype, data.storage.dtype), plan)
    if not plan.skip:
        o = out if plan.box is None else out.narrow((plan.box[0], (0, width)))
        instruction(o, narrow(data, plan.box), where=plan.where, api=api)
    return mark(run, out)


def dropout(data: Tensor, prob: Operand, *, mask: Mask = None, dtype: DTypeLike = None,
            **kwargs: object) -> LegacyTensor:
    run = current()
    data = as_tile(data, "nisa.dropout", "data")
    plan = plan_mask(mask, data)
    out_dtype = dtype_or(dtype, data.storage.dtype)
    if data.storage.dtype.kind in ("i", "u") and out_dtype is not data.storage.dtype:
        raise EngineDtypeError(f"nisa.dropout: dtype {out_dtype.name} must be the dtype of data "
                               f"({data.storage.dtype.name}) for integer data (nki.isa.dropout docs: 'The output data "
                               "type must match the input data type of data if input data type is any of the integer "
                               "types')")
    out = fresh(run, data.shape, out_dtype, plan)
    if not plan.skip:
        _eng.dropout(narrow(out, plan.box), narrow(data, plan.box), narrow(prob, plan.box), where=plan.where,
                     api="nisa.dropout")
    return mark(run, out)


def max8(*, src: Tensor, mask: Mask = None, dtype: DTypeLike = None,
         **kwargs: object) -> LegacyTensor:
    run = current()
    src = as_tile(src, "nisa.max8", "src")
    out = fresh(run, (src.shape[0], 8), dtype_or(dtype, src.storage.dtype), NO_MASK)
    _eng.max8(out, src, api="nisa.max8")
    return mark(run, out)


def nc_find_index8(*, data: Tensor, vals: Tensor, mask: Mask = None, dtype: DTypeLike = None,
                   **kwargs: object) -> LegacyTensor:
    run = current()
    data = as_tile(data, "nisa.nc_find_index8", "data")
    out = fresh(run, (data.shape[0], 8), dtype_or(dtype, _dt.uint32), NO_MASK)
    _eng.nc_find_index8(out, data, as_tile(vals, "nisa.nc_find_index8", "vals"), api="nisa.nc_find_index8")
    return mark(run, out)


def nc_match_replace8(*, data: Tensor, vals: Tensor, imm: Scalar, dst_idx: Tensor | None = None,
                      mask: Mask = None, dtype: DTypeLike = None,
                      **kwargs: object) -> LegacyTensor:
    run = current()
    data = as_tile(data, "nisa.nc_match_replace8", "data")
    vals = as_tile(vals, "nisa.nc_match_replace8", "vals")
    out = fresh(run, data.shape, dtype_or(dtype, data.storage.dtype), NO_MASK)
    if dst_idx is not None:
        _eng.nc_find_index8(as_tile(dst_idx, "nisa.nc_match_replace8", "dst_idx"), data, vals,
                            api="nisa.nc_match_replace8")
    _eng.nc_match_replace8(out, data, vals, imm, api="nisa.nc_match_replace8")
    return mark(run, out)


def nc_stream_shuffle(src: Tensor, dst: Tensor, shuffle_mask: Sequence[int], *, mask: Mask = None,
                      **kwargs: object) -> Tensor:
    current()
    _eng.nc_stream_shuffle(as_tile(dst, "nisa.nc_stream_shuffle", "dst"), as_tile(src, "nisa.nc_stream_shuffle", "src"),
                           shuffle_mask, api="nisa.nc_stream_shuffle")
    return dst


def range_select(*, on_true_tile: Tensor, comp_op0: Op, comp_op1: Op, bound0: Tensor, bound1: Tensor,
                 reduce_cmd: reduce_cmd | str | None = None, reduce_res: Tensor | None = None,
                 reduce_op: Op = np.maximum, range_start: float = 0.0, on_false_value: float | None = None,
                 mask: Mask = None, dtype: DTypeLike = None, **kwargs: object) -> LegacyTensor:
    run = current()
    on_true_tile = as_tile(on_true_tile, "nisa.range_select", "on_true_tile")
    out = fresh(run, on_true_tile.shape, dtype_or(dtype, on_true_tile.storage.dtype), NO_MASK)
    fill = float(np.finfo(np.float32).min) if on_false_value is None else on_false_value
    _eng.range_select(out, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_res=reduce_res,
                      reduce_op=reduce_op, range_start=range_start, on_false_value=fill, api="nisa.range_select")
    return mark(run, out)


def select_reduce(*, dst: Tensor, predicate: Tensor, on_true: Tensor, on_false: Operand,
                  reduce_res: Tensor | None = None, reduce_cmd: reduce_cmd | str | None = None,
                  reduce_op: Op = np.maximum, reverse_pred: bool = False, mask: Mask = None,
                  dtype: DTypeLike = None, **kwargs: object) -> Tensor:
    current()
    _eng.select_reduce(dst, predicate, on_true, on_false, reduce_res=reduce_res, reduce_op=reduce_op,
                       reverse_pred=reverse_pred, api="nisa.select_reduce")
    return dst


# -- DMA ------------------------------------------------------------------------------------------
def dma_copy(*args: Tensor, dst: Tensor | None = None, src: Tensor | None = None, mask: Mask = None,
             dst_rmw_op: Op | None = None, oob_mode: oob_mode | None = None, dge_mode: dge_mode | None = None,
             **kwargs: object) -> None:
    current()
    if args:  # the oldest signature took (src, dst) positionally
        if len(args) == 2 and dst is None and src is None:
            src, dst = args
        else:
            raise OperandShapeError("nisa.dma_copy: pass dst= and src= as keywords")
    if dst is None or src is None:
        raise OperandShapeError("nisa.dma_copy needs dst= and src=")
    plan = plan_mask(mask, dst)
    if plan.skip:
        return None
    _eng.dma_copy(narrow(dst, plan.box), narrow(src, plan.box), where=plan.where, dst_rmw_op=dst_rmw_op,
                  oob_mode=oob_mode, api="nisa.dma_copy",
                  meta={"dge_mode": getattr(dge_mode, "name", dge_mode)} if dge_mode is not None else None)
    return None


def dma_transpose(src: Tensor, *, axes: Sequence[int] | None = None, mask: Mask = None,
                  dtype: DTypeLike = None, **kwargs: object) -> LegacyTensor:
    run = current()
    nd = len(src.shape)
    perm = axes or {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(nd)
    if perm is None:
        raise OperandShapeError(f"nisa.dma_transpose: 2-D to 4-D sources only, got {src.shape}")
    shape = tuple(src.shape[a] for a in perm)
    out = fresh(run, shape, dtype_or(dtype, src.storage.dtype), NO_MASK)
    _eng.dma_transpose(out, src, perm, api="nisa.dma_transpose")
    return mark(run, out)


def builtin_custom_op(*args: object, **kwargs: object) -> NoReturn:
    from nkitui.emulator.errors import UnsupportedError
    raise UnsupportedError("nisa.builtin_custom_op runs vendor microcode and cannot be emulated")


"""VectorE (and the Vector/GpSimd/Scalar ALU) instructions."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, SupportsInt

import numpy as np

from nkitui.emulator import alu
from nkitui.emulator.engine.common import (
    Mask,
    Op,
    Operand,
    Scalar,
    accumulators,
    check_fits,
    current,
    elementwise_operands,
    no_gpsimd_psum,
    not_both_psum,
    operand_values,
    raw,
    reduce_outputs,
    row_reduction,
    same_partitions,
    scalar_or_vector,
    tile,
    values,
    write,
)
from nkitui.emulator.errors import (
    EngineDtypeError,
    EngineOpError,
    OperandShapeError,
    ReductionAxisError,
)
from nkitui.emulator.targets import BN_STATS_FMAX
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
Axes = SupportsInt | list[SupportsInt] | tuple[SupportsInt, ...]  # one free axis or several
_UFUNCS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
           "maximum": np.maximum, "minimum": np.minimum, "power": np.power}
_INT_EXACT = ("add", "subtract", "multiply", "maximum", "minimum")


def _free(t: Tensor) -> int:
    return math.prod(t.shape[1:])


def _meta(api: str, **kw: Any) -> dict[str, Any]:
    kw["api"] = api
    return kw


def _require_int(api: str, opname: str, *named: tuple[object, str]) -> None:
    for t, r in named:
        if isinstance(t, Tensor) and not t.storage.dtype.is_int:
            raise EngineDtypeError(f"{api}: bit-vector operator {opname} needs integer data types, but operand "
                                   f"'{r}' is {t.storage.dtype.name}")


_ENGINES = ("vector", "gpsimd", "scalar")


def _pick_engine(engine: str | None, default: str = "vector") -> str:
    return engine if engine in _ENGINES else default


def tensor_tensor_operands(api: str, data1: Tensor, data2: Tensor, *, per_partition_broadcast: bool
                           ) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    """The operand rule of the `tensor_tensor` ISA call, for both namespaces: the two tiles have the
    same partition axis size and the same number of elements per partition (the API docs of
    `neuronxcc.nki.isa` and `nki.isa` say so in the same words). Returns the operands as the
    instruction reads them and the shape of its result (the larger operand's).

    `per_partition_broadcast` is where the two APIs differ in practice: the legacy toolchain also
    reads an operand with one element per partition ((P, 1)) through a zero-stride free access
    pattern, which AWS's tested double-row matmul sample relies on (it scales (P, F) tiles by (P, 1)
    ones); for the `nki` namespace there is no such evidence, so it keeps the documented rule
    (broadcast with a view, or use tensor_scalar)."""
    n1, n2 = math.prod(data1.shape[1:]), math.prod(data2.shape[1:])
    out_shape = data1.shape
    if per_partition_broadcast and data1.shape[0] == data2.shape[0] and n1 != n2 and 1 in (n1, n2):
        if n2 == 1:
            data2 = _free_broadcast(data2, n1)
        else:
            out_shape, data1 = data2.shape, _free_broadcast(data1, n2)
    elif data1.shape[0] != data2.shape[0] or n1 != n2:
        hint = ("a (P, 1) operand broadcasts along the free dimension; or use tensor_scalar" if per_partition_broadcast
                else "use tensor_scalar to broadcast a (P, 1) operand")
        raise OperandShapeError(f"{api}: data1 {data1.shape} and data2 {data2.shape} must have the same number of "
                                f"partitions and elements per partition ({hint})")
    return data1, data2, out_shape


def _free_broadcast(t: Tensor, n: int) -> Tensor:
    """A (P, 1...) tile seen as (P, n): every free element reads the partition's one value."""
    grids = [np.arange(t.shape[0])[:, None]] + [0] * (len(t.shape) - 1)
    return t.gather_index(grids, (t.shape[0], n))


def tensor_tensor(dst: Tensor, data1: Tensor, data2: Tensor, op: Op, *, engine: str | None = None,
                  where: Mask = None, api: str = "tensor_tensor") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(data1, api, "data1")
    tile(data2, api, "data2")
    if data1.shape != dst.shape or data2.shape != dst.shape:  # the common case needs no checks
        same_partitions(api, (dst, "dst"), (data1, "data1"), (data2, "data2"))
        check_fits(api, data1, "data1", dst)
        check_fits(api, data2, "data2", dst)
    opr = alu.resolve_binary(op)
    int_args = data1.storage.dtype.is_int and data2.storage.dtype.is_int
    if opr.name == "power":
        engine = "gpsimd"
    elif engine is None:
        # integer-only 32-bit arithmetic runs exactly on GpSimd (VectorE would go through fp32)
        engine = "gpsimd" if (int_args and data1.storage.dtype.itemsize == 4 and data2.storage.dtype.itemsize == 4
                              and opr.kind == "arith" and dst.storage.memory == "sbuf"
                              and data1.storage.memory == "sbuf" and data2.storage.memory == "sbuf") else "vector"
    engine = _pick_engine(engine)
    if engine != "gpsimd":
        not_both_psum(api, data1, "data1", data2, "data2")
    if engine == "gpsimd":  # the check builds its arguments: only when it can fail
        no_gpsimd_psum(api, engine, (dst, "dst"), (data1, "data1"), (data2, "data2"))
    if opr.kind == "bitvec":
        _require_int(api, opr.name, (data1, "data1"), (data2, "data2"), (dst, "dst"))
    run.record(engine, "tensor_tensor", (data1, data2), (dst,), partitions=dst.shape[0], free=_free(dst),
               meta=_meta(api, op=opr.name) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    shape = dst.shape
    if opr.kind == "bitvec":
        res = opr.fn(raw(data1, shape), raw(data2, shape))
    elif engine == "gpsimd" and int_args and opr.name in _INT_EXACT:
        res = _UFUNCS[opr.name](raw(data1, shape).astype(np.int64), raw(data2, shape).astype(np.int64))
        res = res.astype(np.int64)
        res = np.broadcast_to(res, shape)
        write(run, dst, res, where)
        return
    else:
        res = opr.fn(values(data1, shape), values(data2, shape))
    write(run, dst, np.broadcast_to(res, shape) if res.shape != shape else res, where)


def _apply_scalar_op(opr: alu.BinaryOp, a: np.ndarray, x: alu.Arg, reverse: bool) -> np.ndarray:
    return opr.fn(x, a) if reverse else opr.fn(a, x)


def tensor_scalar(dst: Tensor, data: Tensor, op0: Op, operand0: Operand, reverse0: bool = False,
                  op1: Op | None = None, operand1: Operand | None = None, reverse1: bool = False, *,
                  engine: str | None = None, where: Mask = None, api: str = "tensor_scalar") -> None:
    run = current()
    # tile()'s own fast path (a tile checked once: views are immutable) tested here, without the two
    # calls per instruction; tile() runs the checks and raises for anything not yet checked
    if not getattr(dst, "_tile_checked", False):
        tile(dst, api, "dst")
    if not getattr(data, "_tile_checked", False):
        tile(data, api, "data")
    if data.shape != dst.shape:  # the common case needs neither check
        same_partitions(api, (dst, "dst"), (data, "data"))
        check_fits(api, data, "data", dst)
    o0 = alu.resolve_binary(op0, "op0")
    o1 = alu.resolve_binary(op1, "op1") if op1 is not None else None
    P = data.shape[0]
    x0: Tensor | Scalar
    t0: Tensor | None
    if type(operand0) is float:  # the common immediate
        x0, t0 = operand0, None
    else:
        x0, t0 = scalar_or_vector(operand0, api, "operand0", P, dst.ndim)
    x1: Tensor | Scalar = 0.0  # (read only with op1)
    t1: Tensor | None = None
    if o1 is not None:
        x1, t1 = scalar_or_vector(operand1, api, "operand1", P, dst.ndim)
    bitvec = o0.kind == "bitvec"
    if o1 is not None and (o1.kind == "bitvec") != bitvec:
        raise EngineOpError(f"{api}: op0 ({o0.name}) and op1 ({o1.name}) must both be bit-vector or both "
                            "arithmetic operators")
    if engine not in _ENGINES:  # (_pick_engine, inlined: once per instruction)
        engine = "vector"
    if engine == "scalar":
        pair = (o0.name, o1.name if o1 else None)
        if run.target.nc_version < 3:
            raise EngineOpError(f"{api}: tensor_scalar on the Scalar engine needs NeuronCore-v3 (trn2) or "
                                f"later; target is {run.target.name} (use the vector engine)")
        if pair not in (("multiply", "add"), ("multiply", None), ("add", None)):
            raise EngineOpError(f"{api}: the Scalar engine only supports (multiply, add), (multiply, None) and "
                                f"(add, None) operator pairs, got {pair}")
    if bitvec:
        if engine != "vector":
            raise EngineOpError(f"{api}: bit-vector operators run only on the vector engine")
        _require_int(api, o0.name, (data, "data"), (dst, "dst"))
    if engine == "gpsimd":
        no_gpsimd_psum(api, engine, (dst, "dst"), (data, "data"), (t0, "operand0"), (t1, "operand1"))
    ins = (data,) if t0 is None and t1 is None else tuple(t for t in (data, t0, t1) if t is not None)
    run.record(engine, "tensor_scalar", ins, (dst,), partitions=P, free=math.prod(dst.shape[1:]),  # (_free)
               meta=_meta(api, op0=o0.name, op1=o1.name if o1 else None) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    shape = dst.shape
    if bitvec:
        a = raw(data, shape)
        v0 = t0.array().reshape((P,) + (1,) * (len(shape) - 1)) if t0 is not None else np.asarray(x0).astype(a.dtype)
        r = _apply_scalar_op(o0, a, v0, reverse0)
        if o1 is not None:
            v1 = t1.array().reshape((P,) + (1,) * (len(shape) - 1)) if t1 is not None else np.asarray(x1).astype(a.dtype)
            r = _apply_scalar_op(o1, r, v1, reverse1)
    else:
        a = values(data, shape)
        # (the common immediate without operand_values' call; t0 is None: x0 is a Scalar, as there)
        x = _F32(x0) if t0 is None else operand_values(x0, t0, len(shape))  # type: ignore[arg-type]  # x0 a Scalar here
        r = o0.fn(x, a) if reverse0 else o0.fn(a, x)  # (_apply_scalar_op, inlined)
        if o1 is not None:
            r = _apply_scalar_op(o1, r, operand_values(x1, t1, len(shape)), reverse1)
    write(run, dst, np.broadcast_to(r, shape) if r.shape != shape else r, where)


def _axes(axis: Axes, ndim: int, api: str) -> tuple[int, ...]:
    if isinstance(axis, (list, tuple)):
        axes = tuple(int(a) for a in axis)
    else:
        axes = (int(axis),)
    axes = tuple(a + ndim if a < 0 else a for a in axes)
    if 0 in axes:
        raise ReductionAxisError(f"{api}: reduction over the partition axis (axis 0) is not supported; reduce "
                                 "free axes only, or transpose first (nc_transpose) or use nc_matmul with a ones "
                                 "vector to sum across partitions")
    s = tuple(sorted(set(axes)))
    if not s or any(a >= ndim or a < 0 for a in s):
        raise ReductionAxisError(f"{api}: reduction axes {list(axes)} are not free axes of a {ndim}-D tile "
                                 f"(use axes 1..{ndim - 1})")
    # The API docs ask for trailing contiguous axes, but AWS's own pooling tutorial reduces axes
    # [2, 4] of a 5-D view, so any set of free axes is accepted.
    return s


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    out = tuple(n for i, n in enumerate(shape) if i not in axes)
    return out if len(out) >= 2 else out + (1,)


def tensor_reduce(dst: Tensor, op: Op, data: Tensor, axis: Axes, *, negate: bool = False,
                  keepdims: bool = False, where: Mask = None, api: str = "tensor_reduce",
                  engine: str = "vector") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(data, api, "data")
    same_partitions(api, (dst, "dst"), (data, "data"))
    opr = alu.resolve_binary(op)
    if opr.reduce is None:
        raise EngineOpError(f"{api}: {opr.name} is not a reduction operator (use add, multiply, maximum, "
                            "minimum, bitwise_and/or/xor, logical_and/or)")
    axes = _axes(axis, data.ndim, api)
    kept = math.prod(n for i, n in enumerate(data.shape) if i not in axes)
    if dst.size != kept:
        raise OperandShapeError(f"{api}: output shape {dst.shape} does not hold the reduction result of "
                                f"shape {reduced_shape(data.shape, axes, keepdims)}")
    if opr.kind == "bitvec":
        _require_int(api, opr.name, (data, "data"), (dst, "dst"))
    run.record(engine, "tensor_reduce", (data,), (dst,), partitions=data.shape[0], free=_free(data),
               meta=_meta(api, op=opr.name, axes=list(axes), negate=bool(negate)) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    x = raw(data, data.shape) if opr.kind == "bitvec" else values(data, data.shape)
    out_where = None
    if where is not None:
        m = np.broadcast_to(where, data.shape)
        ident = opr.identity if opr.identity is not None else 0
        x = np.where(m, x, np.asarray(ident).astype(x.dtype))
        out_where = np.any(m, axis=axes).reshape(dst.shape)
    r = np.asarray(opr.reduce(x, axes))  # (a numpy scalar when every free axis is reduced)
    if negate and opr.kind != "bitvec":
        r = -r
    write(run, dst, np.asarray(r).reshape(dst.shape), out_where)


def tensor_copy(dst: Tensor, src: Tensor, *, engine: str | None = None, where: Mask = None,
                api: str = "tensor_copy", accumulate: bool = False) -> None:
    run = current()
    tile(dst, api, "dst")
    tile(src, api, "src")
    if src.shape != dst.shape:
        same_partitions(api, (dst, "dst"), (src, "src"))
        check_fits(api, src, "src", dst)
    engine = _pick_engine(engine)
    if engine == "gpsimd":
        no_gpsimd_psum(api, engine, (dst, "dst"), (src, "src"))
    run.record(engine, "tensor_copy", (src,), (dst,), partitions=dst.shape[0], free=_free(dst), meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where, accumulate)
    through_f32 = engine == "scalar" and run.target.nc_version < 3
    if src.storage.dtype is dst.storage.dtype and not through_f32:
        res = raw(src, dst.shape)  # bit-exact copy
    else:
        res = values(src, dst.shape)
    write(run, dst, np.broadcast_to(res, dst.shape) if res.shape != dst.shape else res, where, accumulate)


def memset(dst: Tensor, value: Scalar, *, engine: str | None = None, where: Mask = None,
           api: str = "memset") -> None:
    run = current()
    tile(dst, api, "dst")
    engine = _pick_engine(engine)
    if engine == "gpsimd":
        no_gpsimd_psum(api, engine, (dst, "dst"))
    if isinstance(value, Tensor) or np.ndim(value) != 0:
        raise OperandShapeError(f"{api}: value must be a scalar constant, got {type(value).__name__}")
    run.record(engine, "memset", (), (dst,), partitions=dst.shape[0], free=_free(dst),
               meta=_meta(api, value=int(value) if isinstance(value, (int, np.integer)) else float(value))
               if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    if dst.storage.dtype.is_int and isinstance(value, (int, np.integer, bool, np.bool_)):
        v = np.full(dst.shape, int(value), dtype=np.int64)
    else:
        v = np.full(dst.shape, value, dtype=_F32)
    write(run, dst, v, where)


def reciprocal(dst: Tensor, data: Tensor, *, engine: str | None = None, where: Mask = None,
               api: str = "reciprocal") -> None:
    run = current()
    elementwise_operands(api, dst, data, "data")
    engine = _pick_engine(engine)
    if engine == "gpsimd":
        raise EngineOpError(f"{api}: reciprocal runs on the vector or scalar engine")
    opcode = "reciprocal" if engine == "vector" else "activation"
    run.record(engine, opcode, (data,), (dst,), partitions=dst.shape[0], free=_free(dst),
               meta=_meta(api, op="reciprocal") if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    r = (np.float32(1.0) / values(data, dst.shape)).astype(_F32)
    write(run, dst, r, where)


def _partitions_in(where: Mask, data: Tensor, dst: Tensor) -> Mask:
    """The output mask of a per-partition result: the partitions where the input mask selects anything."""
    if where is None:
        return None
    rows = np.any(np.broadcast_to(where, data.shape).reshape(data.shape[0], -1), axis=1)
    return np.broadcast_to(rows.reshape((-1,) + (1,) * (dst.ndim - 1)), dst.shape)


def bn_stats(dst: Tensor, data: Tensor, *, where: Mask = None, api: str = "bn_stats") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(data, api, "data")
    same_partitions(api, (dst, "dst"), (data, "data"))
    F = _free(data)
    if F > BN_STATS_FMAX:
        raise OperandShapeError(f"{api}: free size {F} exceeds bn_stats_fmax ({BN_STATS_FMAX}); call bn_stats on "
                                "512-element chunks and aggregate them with one bn_aggr")
    if _free(dst) != 6:
        raise OperandShapeError(f"{api}: output must hold 6 elements per partition, got shape {dst.shape}")
    run.record("vector", "bn_stats", (data,), (dst,), partitions=data.shape[0], free=F, meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    x = values(data, data.shape).reshape(data.shape[0], F)
    out = np.zeros((data.shape[0], 6), dtype=_F32)
    for k, part in enumerate((x[:, 0::2], x[:, 1::2])):
        n = part.shape[1]
        out[:, 3 * k] = n
        if n:
            mean = part.mean(axis=1, dtype=_F32)
            out[:, 3 * k + 1] = mean
            out[:, 3 * k + 2] = np.square(part - mean[:, None]).sum(axis=1, dtype=_F32)
    write(run, dst, out.reshape(dst.shape), _partitions_in(where, data, dst))


def bn_aggr(dst: Tensor, data: Tensor, *, where: Mask = None, api: str = "bn_aggr") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(data, api, "data")
    same_partitions(api, (dst, "dst"), (data, "data"))
    F = _free(data)
    if F % 3:
        raise OperandShapeError(f"{api}: input must hold (count, mean, variance*count) triples: {F} elements per "
                                "partition is not a multiple of 3")
    if _free(dst) != 2:
        raise OperandShapeError(f"{api}: output must hold 2 elements per partition (mean, variance), got {dst.shape}")
    run.record("vector", "bn_aggr", (data,), (dst,), partitions=data.shape[0], free=F, meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    s = values(data, data.shape).reshape(data.shape[0], F // 3, 3)
    cnt, mean, m2 = s[:, :, 0], s[:, :, 1], s[:, :, 2]
    with np.errstate(all="ignore"):
        n = cnt.sum(axis=1, dtype=_F32)
        w = np.where(cnt > 0, cnt, 0).astype(_F32)
        mu = (w * np.where(cnt > 0, mean, 0)).sum(axis=1, dtype=_F32) / n
        dev = np.where(cnt > 0, m2 + w * np.square(mean - mu[:, None]), 0).sum(axis=1, dtype=_F32)
        var = dev / n
    out = np.stack([mu, var], axis=1).astype(_F32)
    write(run, dst, out.reshape(dst.shape), _partitions_in(where, data, dst))


def tensor_tensor_scan(dst: Tensor, data0: Tensor, data1: Tensor, initial: Operand, op0: Op, op1: Op,
                       reverse0: bool = False, reverse1: bool = False, *, where: Mask = None,
                       api: str = "tensor_tensor_scan") -> None:
    run = current()
    for t, r in ((dst, "dst"), (data0, "data0"), (data1, "data1")):
        tile(t, api, r)
    same_partitions(api, (dst, "dst"), (data0, "data0"), (data1, "data1"))
    check_fits(api, data0, "data0", dst)
    check_fits(api, data1, "data1", dst)
    not_both_psum(api, data0, "data0", data1, "data1")
    o0 = alu.resolve_binary(op0, "op0")
    o1 = alu.resolve_binary(op1, "op1")
    P = dst.shape[0]
    x0, t0 = scalar_or_vector(initial, api, "initial", P, 2)
    ins = (data0, data1) + ((t0,) if t0 is not None else ())
    run.record("vector", "tensor_tensor_scan", ins, (dst,), partitions=P, free=_free(dst),
               meta=_meta(api, op0=o0.name, op1=o1.name) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    F = _free(dst)
    a = np.ascontiguousarray(values(data0, dst.shape).reshape(P, F))
    b = np.ascontiguousarray(values(data1, dst.shape).reshape(P, F))
    prev = (operand_values(x0, t0, 2).reshape(P) if t0 is not None
            else np.full(P, x0, dtype=_F32)).astype(_F32)
    out = np.empty((F, P), dtype=_F32)
    aT, bT = a.T.copy(), b.T.copy()
    u0, u1 = _UFUNCS.get(o0.name), _UFUNCS.get(o1.name)
    with np.errstate(all="ignore"):
        if u0 is not None and u1 is not None:
            tmp = np.empty(P, dtype=_F32)
            for i in range(F):
                if reverse0:
                    u0(prev, aT[i], out=tmp)
                else:
                    u0(aT[i], prev, out=tmp)
                if reverse1:
                    u1(bT[i], tmp, out=out[i])
                else:
                    u1(tmp, bT[i], out=out[i])
                prev = out[i]
        else:
            for i in range(F):
                tmp = o0.fn(prev, aT[i]) if reverse0 else o0.fn(aT[i], prev)
                out[i] = o1.fn(bT[i], tmp) if reverse1 else o1.fn(tmp, bT[i])
                prev = out[i]
    write(run, dst, out.T.reshape(dst.shape), where)


def tensor_scalar_cumulative(dst: Tensor, src: Tensor, op0: Op, op1: Op, imm0: Operand,
                             imm1: Scalar | None = None, reduce_cmd: object = "reset_reduce", *,
                             where: Mask = None, api: str = "tensor_scalar_cumulative") -> None:
    """Running scan along the free axis: reg = op1(op0(x[:, i], imm0), reg); dst[:, i] = reg.

    The per-partition register is VectorE's shared accumulator: reset / reset_reduce start from
    `imm1` (or op1's identity), reduce / load_reduce continue from the previous instruction's state.
    """
    run = current()
    elementwise_operands(api, dst, src, "src")
    o0 = alu.resolve_binary(op0, "op0")
    o1 = alu.resolve_binary(op1, "op1")
    if o1.name not in ("add", "subtract", "multiply", "maximum", "minimum"):
        raise EngineOpError(f"{api}: op1 must be add, subtract, multiply, maximum or minimum, got {o1.name}")
    if src.storage.dtype.name in ("int32", "uint32"):
        raise EngineDtypeError(f"{api}: {src.storage.dtype.name} data is not supported (use a 16-bit or float type)")
    cmd = getattr(reduce_cmd, "name", reduce_cmd) or "reset_reduce"
    P = dst.shape[0]
    x0, t0 = scalar_or_vector(imm0, api, "imm0", P, 2)
    ins = (src,) + ((t0,) if t0 is not None else ())
    run.record("vector", "tensor_scalar_cumulative", ins, (dst,), partitions=P, free=_free(dst),
               meta=_meta(api, op0=o0.name, op1=o1.name, reduce_cmd=str(cmd)) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    F = _free(dst)
    x = values(src, dst.shape).reshape(P, F)
    x = o0.fn(x, operand_values(x0, t0, 2)).reshape(P, F)
    acc = accumulators(run, "vector")
    if cmd in ("reset", "reset_reduce", "idle"):
        start = np.float32(imm1) if imm1 is not None else np.float32(o1.identity if o1.identity is not None else 0)
        acc[:P] = start
    reg = acc[:P].copy()
    out = np.empty((P, F), dtype=_F32)
    for i in range(F):
        reg = o1.fn(x[:, i], reg)
        out[:, i] = reg
    acc[:P] = reg
    write(run, dst, out.reshape(dst.shape), where)


def scalar_tensor_tensor(dst: Tensor, data: Tensor, op0: Op, operand0: Operand, op1: Op, operand1: Tensor,
                         reverse0: bool = False, reverse1: bool = False, *, where: Mask = None,
                         api: str = "scalar_tensor_tensor") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(data, api, "data")
    tile(operand1, api, "operand1")
    same_partitions(api, (dst, "dst"), (data, "data"), (operand1, "operand1"))
    check_fits(api, data, "data", dst)
    check_fits(api, operand1, "operand1", dst)
    not_both_psum(api, data, "data", operand1, "operand1")
    o0 = alu.resolve_binary(op0, "op0")
    o1 = alu.resolve_binary(op1, "op1")
    P = dst.shape[0]
    x0, t0 = scalar_or_vector(operand0, api, "operand0", P, dst.ndim)
    ins = (data, operand1) + ((t0,) if t0 is not None else ())
    run.record("vector", "scalar_tensor_tensor", ins, (dst,), partitions=P, free=_free(dst),
               meta=_meta(api, op0=o0.name, op1=o1.name) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    shape = dst.shape
    r = _apply_scalar_op(o0, values(data, shape), operand_values(x0, t0, len(shape)), reverse0)
    b = values(operand1, shape)
    r = o1.fn(b, r) if reverse1 else o1.fn(r, b)
    write(run, dst, np.broadcast_to(r, shape) if r.shape != shape else r, where)


def tensor_scalar_reduce(dst: Tensor, data: Tensor, op0: Op, operand0: Operand, reduce_op: Op,
                         reduce_res: Tensor | None, reverse0: bool = False, *, where: Mask = None,
                         api: str = "tensor_scalar_reduce", reduce_cmd: object = None,
                         reduce_init: Operand | None = None) -> None:
    """dst = data op0 operand0, and its free-axis reduction into reduce_res.

    reduce_cmd (nki namespace) routes the reduction through VectorE's shared accumulator registers:
    reset_reduce starts from the reduction's identity, reduce continues from the registers, and
    load_reduce starts from reduce_init; reduce_res then reads the registers. None (legacy) writes
    this instruction's reduction directly.
    """
    run = current()
    elementwise_operands(api, dst, data, "data")
    o0 = alu.resolve_binary(op0, "op0")
    ro = alu.resolve_binary(reduce_op, "reduce_op")
    if ro.reduce is None or ro.kind == "bitvec" or o0.kind == "bitvec":
        raise EngineOpError(f"{api}: op0 must be arithmetic and reduce_op one of add, subtract, multiply, max, min")
    P = dst.shape[0]
    x0, t0 = scalar_or_vector(operand0, api, "operand0", P, dst.ndim)
    outs = reduce_outputs(api, dst, reduce_res, P)
    ins = (data,) + ((t0,) if t0 is not None else ())
    run.record("vector", "tensor_scalar_reduce", ins, outs, partitions=P, free=_free(dst),
               meta=_meta(api, op0=o0.name, reduce_op=ro.name) if run.recording else None)
    if not run.execute:
        write(run, dst, None, where)
        if reduce_res is not None:
            write(run, reduce_res, None)
        return
    shape = dst.shape
    r = _apply_scalar_op(o0, values(data, shape), operand_values(x0, t0, len(shape)), reverse0)
    r = np.broadcast_to(r, shape)
    write(run, dst, r, where)
    if reduce_res is not None or reduce_cmd is not None:
        part = row_reduction(ro, r, P, where)
        cmd = getattr(reduce_cmd, "name", reduce_cmd)
        if cmd is not None:
            acc = accumulators(run, "vector")
            if cmd == "reset_reduce":
                acc[:P] = part
            elif cmd == "load_reduce":
                init = (reduce_init.read_f32().reshape(P) if isinstance(reduce_init, Tensor)
                        else np.float32(0 if reduce_init is None else reduce_init))
                acc[:P] = ro.fn(np.broadcast_to(np.asarray(init, dtype=_F32), (P,)), part)
            elif cmd == "reduce":
                acc[:P] = ro.fn(acc[:P], part)
            else:
                raise EngineOpError(f"{api}: reduce_cmd must be reset_reduce, reduce or load_reduce, got {cmd}")
            part = acc[:P].copy()
        if reduce_res is not None:
            write(run, reduce_res, part.reshape(reduce_res.shape))


def select(dst: Tensor, predicate: Tensor, on_true: Operand, on_false: Operand, *, where: Mask = None,
           api: str = "select") -> None:
    """dst = predicate != 0 ? on_true : on_false (tiles or scalars); VectorE."""
    run = current()
    tile(dst, api, "dst")
    tile(predicate, api, "predicate")
    check_fits(api, predicate, "predicate", dst)
    ins = [predicate]
    for x, r in ((on_true, "on_true"), (on_false, "on_false")):
        if isinstance(x, Tensor):
            tile(x, api, r)
            check_fits(api, x, r, dst)
            ins.append(x)
    run.record("vector", "select", tuple(ins), (dst,), partitions=dst.shape[0], free=_free(dst), meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    shape = dst.shape
    c = values(predicate, shape) != 0
    a = values(on_true, shape) if isinstance(on_true, Tensor) else np.float32(on_true)
    b = values(on_false, shape) if isinstance(on_false, Tensor) else np.float32(on_false)
    write(run, dst, np.broadcast_to(np.where(c, a, b), shape).astype(_F32), where)


def dropout(dst: Tensor, data: Tensor, prob: Operand, *, where: Mask = None, api: str = "dropout") -> None:
    run = current()
    elementwise_operands(api, dst, data, "data")
    P = dst.shape[0]
    x0, t0 = scalar_or_vector(prob, api, "prob", P, dst.ndim)
    ins = (data,) + ((t0,) if t0 is not None else ())
    run.record("vector", "dropout", ins, (dst,), partitions=P, free=_free(dst), meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None, where)
    shape = dst.shape
    p = operand_values(x0, t0, len(shape))
    keep = run.rng.random(shape, dtype=_F32) >= p
    write(run, dst, np.where(keep, values(data, shape), np.float32(0)).astype(_F32), where)


def max8(dst: Tensor, src: Tensor, *, api: str = "max8") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(src, api, "src")
    same_partitions(api, (dst, "dst"), (src, "src"))
    F = _free(src)
    if not 8 <= F <= 16384:
        raise OperandShapeError(f"{api}: input needs 8 to 16384 elements per partition, got {F}")
    if _free(dst) != 8:
        raise OperandShapeError(f"{api}: output must hold 8 elements per partition, got {dst.shape}")
    run.record("vector", "max8", (src,), (dst,), partitions=src.shape[0], free=F, meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    x = values(src, src.shape).reshape(src.shape[0], F)
    top = -np.sort(-x, axis=1)[:, :8]
    write(run, dst, top.reshape(dst.shape))


def nc_find_index8(dst: Tensor, data: Tensor, vals: Tensor, *, api: str = "nc_find_index8") -> None:
    run = current()
    for t, r in ((dst, "dst"), (data, "data"), (vals, "vals")):
        tile(t, api, r)
    same_partitions(api, (dst, "dst"), (data, "data"), (vals, "vals"))
    if _free(vals) != 8 or _free(dst) != 8:
        raise OperandShapeError(f"{api}: vals and the output must hold exactly 8 elements per partition")
    F = _free(data)
    run.record("vector", "nc_find_index8", (data, vals), (dst,), partitions=data.shape[0], free=F, meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    x = values(data, data.shape).reshape(data.shape[0], F)
    v = values(vals, vals.shape).reshape(vals.shape[0], 8)
    eq = x[:, None, :] == v[:, :, None]
    idx = np.where(eq.any(axis=2), eq.argmax(axis=2), 0xFFFFFFFF).astype(np.int64)
    write(run, dst, idx.reshape(dst.shape))


def nc_match_replace8(dst: Tensor, data: Tensor, vals: Tensor, imm: Scalar, *,
                      api: str = "nc_match_replace8") -> None:
    run = current()
    for t, r in ((dst, "dst"), (data, "data"), (vals, "vals")):
        tile(t, api, r)
    same_partitions(api, (dst, "dst"), (data, "data"), (vals, "vals"))
    check_fits(api, data, "data", dst)
    if _free(vals) != 8:
        raise OperandShapeError(f"{api}: vals must hold exactly 8 elements per partition")
    F = _free(data)
    run.record("vector", "nc_match_replace8", (data, vals), (dst,), partitions=data.shape[0], free=F,
               meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    P = data.shape[0]
    x = values(data, data.shape).reshape(P, F).copy()
    v = values(vals, vals.shape).reshape(P, 8)
    rows = np.arange(P)
    for k in range(8):
        hit = x == v[:, k:k + 1]
        first = hit.argmax(axis=1)
        found = hit[rows, first]
        x[rows[found], first[found]] = np.float32(imm)
    write(run, dst, x.reshape(dst.shape))


def tensor_copy_predicated(dst: Tensor, src: Tensor | Scalar, predicate: Tensor, reverse_pred: bool = False,
                           *, where: Mask = None, api: str = "tensor_copy_predicated") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(predicate, api, "predicate")
    check_fits(api, predicate, "predicate", dst)
    ins = [predicate]
    if isinstance(src, Tensor):
        tile(src, api, "src")
        check_fits(api, src, "src", dst)
        not_both_psum(api, src, "src", predicate, "predicate")
        ins.insert(0, src)
    if predicate.storage.dtype.kind not in "ub":
        raise EngineDtypeError(f"{api}: predicate must be uint8, uint16 or uint32, got {predicate.storage.dtype.name}")
    run.record("vector", "tensor_copy_predicated", tuple(ins), (dst,), partitions=dst.shape[0], free=_free(dst),
               meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    shape = dst.shape
    c = raw(predicate, shape) != 0
    if reverse_pred:
        c = ~c
    if where is not None:
        c = c & np.broadcast_to(where, shape)
    vals: np.ndarray | np.float32
    if isinstance(src, Tensor) and src.storage.dtype is dst.storage.dtype:
        vals = raw(src, shape)
    else:
        vals = values(src, shape) if isinstance(src, Tensor) else np.float32(src)
    write(run, dst, np.broadcast_to(vals, shape), np.broadcast_to(c, shape))


def range_select(dst: Tensor, on_true: Tensor, comp_op0: Op, comp_op1: Op, bound0: Tensor, bound1: Tensor, *,
                 reduce_res: Tensor | None = None, reduce_op: Op = "maximum", range_start: float = 0.0,
                 on_false_value: float = float(np.finfo(np.float32).min), where: Mask = None,
                 api: str = "range_select") -> None:
    run = current()
    if run.target.nc_version < 3:
        raise EngineOpError(f"{api}: range_select needs NeuronCore-v3 (trn2) or later; target is {run.target.name}")
    for t, r in ((dst, "dst"), (on_true, "on_true"), (bound0, "bound0"), (bound1, "bound1")):
        tile(t, api, r)
    check_fits(api, on_true, "on_true", dst)
    c0 = alu.resolve_binary(comp_op0, "comp_op0")
    c1 = alu.resolve_binary(comp_op1, "comp_op1")
    ro = _reduction(reduce_op, reduce_res, api)
    P = dst.shape[0]
    outs = (dst,) if reduce_res is None else (dst, tile(reduce_res, api, "reduce_res"))
    run.record("vector", "range_select", (on_true, bound0, bound1), outs, partitions=P, free=_free(dst),
               meta=_meta(api) if run.recording else None)
    if not run.execute:
        for o in outs:
            write(run, o, None)
        return
    F = _free(dst)
    x = values(on_true, dst.shape).reshape(P, F)
    idx = (np.arange(F, dtype=_F32) + np.float32(range_start))[None, :]
    b0 = bound0.read_f32().reshape(P, 1)
    b1 = bound1.read_f32().reshape(P, 1)
    keep = (c0.fn(idx, b0) != 0) & (c1.fn(idx, b1) != 0)
    out = np.where(keep, x, np.float32(on_false_value)).astype(_F32)
    write(run, dst, out.reshape(dst.shape), where)
    if reduce_res is not None:
        assert ro.reduce is not None  # _reduction checked it
        write(run, reduce_res, np.asarray(ro.reduce(out, (1,))).reshape(reduce_res.shape))


def _reduction(reduce_op: Op, reduce_res: Tensor | None, api: str) -> alu.BinaryOp:
    """The operator that reduces into `reduce_res`: one with a reduction when there is a `reduce_res`."""
    ro = alu.resolve_binary(reduce_op, "reduce_op")
    if reduce_res is not None and ro.reduce is None:
        raise EngineOpError(f"{api}: reduce_op {ro.name} is not a reduction operator (use maximum, minimum, add, "
                            "multiply, bitwise_and/or/xor, logical_and/or)")
    return ro


def select_reduce(dst: Tensor, predicate: Tensor, on_true: Tensor, on_false: Operand, *,
                  reduce_res: Tensor | None = None, reduce_op: Op = "maximum", reverse_pred: bool = False,
                  where: Mask = None, api: str = "select_reduce") -> None:
    run = current()
    for t, r in ((dst, "dst"), (predicate, "predicate"), (on_true, "on_true")):
        tile(t, api, r)
    check_fits(api, on_true, "on_true", dst)
    check_fits(api, predicate, "predicate", dst)
    not_both_psum(api, on_true, "on_true", predicate, "predicate")
    if predicate.storage.dtype.name not in ("int8", "uint8", "int16", "uint16"):
        raise EngineDtypeError(f"{api}: predicate must be int8/uint8/int16/uint16, got {predicate.storage.dtype.name}")
    ro = _reduction(reduce_op, reduce_res, api)
    P = dst.shape[0]
    ins = [predicate, on_true]
    if isinstance(on_false, Tensor):
        tile(on_false, api, "on_false")
        ins.append(on_false)
    outs = (dst,) if reduce_res is None else (dst, tile(reduce_res, api, "reduce_res"))
    run.record("vector", "select_reduce", tuple(ins), outs, partitions=P, free=_free(dst), meta=_meta(api) if run.recording else None)
    if not run.execute:
        for o in outs:
            write(run, o, None)
        return
    shape = dst.shape
    c = raw(predicate, shape) != 0
    if reverse_pred:
        c = ~c
    f = values(on_false, shape) if isinstance(on_false, Tensor) else np.float32(on_false)
    out = np.broadcast_to(np.where(c, values(on_true, shape), f), shape).astype(_F32)
    write(run, dst, out, where)
    if reduce_res is not None:
        assert ro.reduce is not None  # _reduction checked it
        write(run, reduce_res, np.asarray(ro.reduce(out.reshape(P, -1), (1,))).reshape(reduce_res.shape))


def nc_stream_shuffle(dst: Tensor, src: Tensor, shuffle_mask: Iterable[SupportsInt], *,
                      api: str = "nc_stream_shuffle") -> None:
    run = current()
    tile(dst, api, "dst")
    tile(src, api, "src")
    if _free(dst) != _free(src):
        raise OperandShapeError(f"{api}: src and dst must have the same elements per partition")
    mask = [int(m) for m in shuffle_mask]
    if len(mask) != 32:
        raise OperandShapeError(f"{api}: shuffle_mask needs 32 entries, got {len(mask)}")
    run.record("vector", "nc_stream_shuffle", (src,), (dst,), partitions=dst.shape[0], free=_free(dst),
               meta=_meta(api) if run.recording else None)
    if not run.execute:
        return write(run, dst, None)
    P = dst.shape[0]
    F = _free(src)
    s = values(src, src.shape).reshape(src.shape[0], F)
    cur = dst.read_f32().reshape(P, F).copy()
    for p in range(P):
        q, j = divmod(p, 32)
        m = mask[j]
        if m != 255:
            sp = q * 32 + m
            if sp < s.shape[0]:
                cur[p] = s[sp]
    write(run, dst, cur.reshape(dst.shape))


def assign_values(dst: Tensor, value: Tensor, where: Mask = None) -> None:
    """`t[...] = expr` with the instruction that produced `value` retargeted at `dst` (legacy front end):
    the result's values land in `dst` (an instruction of the replayable log, like the others)."""
    run = current()
    if not run.execute:
        return write(run, dst, None)
    vals = value.array() if value.storage.dtype is dst.storage.dtype else value.read_f32()
    if vals.shape != dst.shape and vals.size == dst.size:
        vals = vals.reshape(dst.shape)
    write(run, dst, np.broadcast_to(vals, dst.shape), where)


def psum_accumulate(target: Tensor, other: Tensor) -> None:
    """`psum += nc_matmul(...)` (legacy front end): the matmul's result accumulates into the PSUM tile in
    fp32; cells no instruction wrote yet open the accumulation group (they count as zero)."""
    run = current()
    if not run.execute:
        return write(run, target, None, accumulate=True)
    vals = other.read_f32()
    if vals.shape != target.shape:
        vals = vals.reshape(target.shape) if vals.size == target.size else np.broadcast_to(vals, target.shape)
    base = target.read_f32()
    fresh = target.unwritten()
    if fresh is not None:
        base = np.where(fresh, np.float32(0), base)
    write(run, target, base + vals, accumulate=True)

"""nl composites that both front ends lower onto the same engine instructions, written once.

The front ends are calling-convention adapters: they check their own arguments, allocate results
in their own style and call these for every `nl` operation that is more than one instruction
(mean, var, softmax, rms_norm, nl.transpose, nl.matmul's operands) or whose choice of instruction
is a rule (binary ops, what nl.store reads, which TensorE operand the compiler copies to SBUF). Each function takes `new(shape, dtype) -> Tensor`, the front end's allocator of a fresh SBUF
result tile (legacy return-style tiles and `nki` tiles differ), and allocates its intermediates
and its result in the same order for both, so the instructions, the trace and the live ranges
are the same whichever namespace the kernel uses. The front ends validate their own arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import SupportsFloat

from nkitui.emulator import dtypes as _dt
from nkitui.emulator import engine
from nkitui.emulator.engine.common import Mask, Scalar
from nkitui.emulator.engine.vector import reduced_shape
from nkitui.emulator.errors import OperandShapeError, PartitionDimError
from nkitui.emulator.runtime import current
from nkitui.emulator.targets import PMAX
from nkitui.emulator.tensor import Tensor

NewTile = Callable[[tuple[int, ...], _dt.DType], Tensor]
# (x, axes, keepdims) -> (fp32 sum of x over axes, number of elements summed per output element)
SumReduce = Callable[[Tensor, tuple[int, ...], bool], tuple[Tensor, int]]
_F32 = _dt.float32


def mean_dtype(x: Tensor) -> _dt.DType:
    """`nl.mean`'s default result type: the input's float type, float32 for integer inputs."""
    return x.storage.dtype if x.storage.dtype.is_float else _F32


def fp32_sum(new: NewTile, api: str) -> SumReduce:
    """The plain sum of a mean: one VectorE tensor_reduce into a fresh fp32 tile."""
    def reduce(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[Tensor, int]:
        total = new(reduced_shape(x.shape, axes, keepdims), _F32)
        engine.tensor_reduce(total, "add", x, axes, keepdims=keepdims, api=api)
        return total, math.prod(x.shape[a] for a in axes)
    return reduce


def mean(x: Tensor, axes: tuple[int, ...], keepdims: bool, out_dtype: _dt.DType, new: NewTile, api: str,
         sum_of: SumReduce | None = None) -> Tensor:
    """Sum over the free `axes` in fp32 (VectorE tensor_reduce), then times 1/n (tensor_scalar).
    `sum_of` replaces the plain sum (the legacy front end's masked reduction counts the elements
    inside the mask)."""
    total, n = (sum_of or fp32_sum(new, api))(x, axes, keepdims)
    out = new(total.shape, out_dtype)
    engine.tensor_scalar(out, total, "multiply", 1.0 / n, api=api)
    return out


def var(x: Tensor, axes: tuple[int, ...], out_dtype: _dt.DType, new: NewTile, api: str,
        sum_of: SumReduce | None = None) -> Tensor:
    """Population variance over the free `axes`, keeping the reduced dims (as NKI's nl.var does):
    the fp32 mean, x minus it (tensor_scalar when it is one value per partition, else a
    broadcasting tensor_tensor), squared (ScalarE activation), and the mean of the squares (the two
    means are recorded as `nl.mean`, as the kernel could have written them)."""
    m = mean(x, axes, True, _F32, new, "nl.mean", sum_of)
    centered = new(x.shape, _F32)
    if math.prod(m.shape[1:]) == 1:
        engine.tensor_scalar(centered, x, "subtract", m, api=api)
    else:
        engine.tensor_tensor(centered, x, m, "subtract", api=api)
    sq = new(x.shape, _F32)
    engine.activation(sq, "square", centered, api=api)
    return mean(sq, axes, True, out_dtype, new, "nl.mean", sum_of)


def binary(out: Tensor, x: Tensor | Scalar, y: Tensor | Scalar, op: str, new: NewTile, api: str,
           where: Mask = None) -> None:
    """An element-wise `nl` binary op into `out` (x or y may be a Python scalar): operands with
    fewer partitions are first broadcast by TensorE; an operand with one element per partition
    that does not fill `out` becomes a tensor_scalar operand (reversed when it is x); otherwise
    one tensor_tensor (numpy broadcasting along the free dims)."""
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        P = out.shape[0]
        x = partition_broadcast(x, P, new)
        y = partition_broadcast(y, P, new)
        if math.prod(y.shape[1:]) == 1 and out.size != y.size:
            engine.tensor_scalar(out, x, op, y, where=where, api=api)
        elif math.prod(x.shape[1:]) == 1 and out.size != x.size:
            engine.tensor_scalar(out, y, op, x, reverse0=True, where=where, api=api)
        else:
            engine.tensor_tensor(out, x, y, op, where=where, api=api)
    elif isinstance(x, Tensor):
        engine.tensor_scalar(out, x, op, y, where=where, api=api)
    else:
        assert isinstance(y, Tensor)  # one operand is a tile (both front ends check before lowering)
        engine.tensor_scalar(out, y, op, x, reverse0=True, where=where, api=api)


def store_source(value: Tensor | Scalar, dst: Tensor, new: NewTile, api: str) -> Tensor:
    """What a store into the HBM tensor `dst` reads: a scalar is first written into a fresh tile
    (memset), a PSUM tile is first copied to SBUF (DMA cannot read PSUM; the compiler inserts the
    copy)."""
    if not isinstance(value, Tensor):
        tmp = new(dst.shape if len(dst.shape) >= 2 else (dst.shape[0], 1), dst.storage.dtype)
        engine.memset(tmp, value, api=api)
        value = tmp
    if value.storage.memory == "psum":
        tmp = new(value.shape, value.storage.dtype)
        engine.tensor_copy(tmp, value, api=api + " (psum->sbuf)")
        value = tmp
    return value


def partition_broadcast(t: Tensor, P: int, new: NewTile) -> Tensor:
    """`t` with P partitions: a (1, F) tile is broadcast by TensorE into a fresh (P, F) tile."""
    if t.shape[0] == P:
        return t
    tmp = new((P,) + tuple(t.shape[1:]), t.storage.dtype)
    engine.partition_broadcast(tmp, t, api="partition broadcast")
    return tmp


def sbuf_operand(t: Tensor, new: NewTile, api: str, role: str) -> Tensor:
    """A TensorE operand of the high-level API (or of a legacy `nisa.nc_matmul`) in SBUF: a PSUM tile
    (e.g. an `nl.transpose` / `nc_transpose` result) is first copied to a fresh SBUF tile of its dtype,
    as the compiler places the high-level API's operands ("the high-level API handles placement").
    The copy is a recorded VectorE `tensor_copy` whose trace record is marked `inserted`."""
    if t.storage.memory != "psum":
        return t
    tmp = new(t.shape if len(t.shape) >= 2 else (t.shape[0], 1), t.storage.dtype)
    engine.tensor_copy(tmp, t, api=f"{api} ({role} psum->sbuf, inserted by the compiler)")
    run = current()
    if run.trace is not None:
        run.trace.instructions[-1].meta["inserted"] = "psum->sbuf"
    return tmp


def matmul_operands(x: Tensor, y: Tensor, transpose_x: bool, new: NewTile, new_psum: NewTile,
                    api: str) -> tuple[Tensor, Tensor]:
    """`nl.matmul(x, y, transpose_x)`'s stationary and moving operands as TensorE takes them: both
    in SBUF (`sbuf_operand`), and x transposed (`transposed_in_sbuf`) unless transpose_x says the
    kernel passes x.T already. The front end allocates the PSUM result and issues the nc_matmul."""
    x = sbuf_operand(x, new, api, "x")
    y = sbuf_operand(y, new, api, "y")
    if not transpose_x:
        if len(x.shape) != 2:
            raise OperandShapeError(f"{api}: x must be 2-D, got {x.shape}")
        x = transposed_in_sbuf(x, new, new_psum, api)
    return x, y


def transpose(x: Tensor, out_dtype: _dt.DType, new: NewTile, new_psum: NewTile, api: str) -> Tensor:
    """`nl.transpose(x)`: the 2-D transpose of a tile by TensorE into a fresh PSUM tile of
    `out_dtype` (`new_psum`: the front end's allocator of the result); an x in PSUM is first copied
    to SBUF (`sbuf_operand`). The result's partition dim is x's free size, at most 128."""
    if len(x.shape) != 2:
        raise OperandShapeError(f"{api}: err_exceed_max_supported_dimension: input must be 2-D (max supported "
                                f"number of dimensions is 2), got {x.shape}")
    if x.shape[1] > PMAX:
        raise PartitionDimError(f"{api}: size of dimension 1 ({x.shape[1]}) exceeds the architecture limitation "
                                f"of {PMAX}")
    src = sbuf_operand(x, new, api, "x")
    out = new_psum((x.shape[1], x.shape[0]), out_dtype)
    engine.nc_transpose(out, src, engine="tensor", api=api)
    return out


def transposed_in_sbuf(x: Tensor, new: NewTile, new_psum: NewTile, api: str) -> Tensor:
    """`nl.matmul`'s x.T for the stationary operand: a TensorE transpose of the 2-D SBUF tile `x`
    into PSUM, copied back to SBUF (VectorE)."""
    t_ps = new_psum((x.shape[1], x.shape[0]), x.storage.dtype)
    engine.nc_transpose(t_ps, x, engine="tensor", api=api + " (transpose x)")
    xt = new(t_ps.shape, x.storage.dtype)
    engine.tensor_copy(xt, t_ps, api=api + " (transpose x)")
    return xt


def softmax(x: Tensor, axes: tuple[int, ...], out_dtype: _dt.DType, new: NewTile, api: str) -> Tensor:
    """exp(x - max) / sum over all free axes: reduce max (VectorE), exp with the negated max as bias
    and the row sum in one ScalarE activation, reciprocal, scale."""
    P = x.shape[0]
    neg_max = new((P, 1), _F32)
    engine.tensor_reduce(neg_max, "maximum", x, axes, negate=True, api=api)
    e = new(x.shape, _F32)
    total = new((P, 1), _F32)
    engine.activation(e, "exp", x, bias=neg_max, reduce_op="add", reduce_res=total, api=api)
    inv = new((P, 1), _F32)
    engine.reciprocal(inv, total, api=api)
    out = new(x.shape, out_dtype)
    engine.tensor_scalar(out, e, "multiply", inv, api=api)
    return out


def rms_norm(x: Tensor, w: Tensor, n: SupportsFloat, epsilon: SupportsFloat, out_dtype: _dt.DType, new: NewTile, api: str) -> Tensor:
    """x / sqrt(sum(x^2) / n + epsilon) * w: squares and their row sum in one ScalarE activation,
    scale and shift, rsqrt, normalise, multiply by the (partition-broadcast) weight."""
    P = x.shape[0]
    sq = new(x.shape, _F32)
    ss = new((P, 1), _F32)
    engine.activation(sq, "square", x, reduce_op="add", reduce_res=ss, api=api)
    ms = new((P, 1), _F32)
    engine.tensor_scalar(ms, ss, "multiply", 1.0 / float(n), op1="add", operand1=float(epsilon), api=api)
    rstd = new((P, 1), _F32)
    engine.activation(rstd, "rsqrt", ms, api=api)
    normed = new(x.shape, _F32)
    engine.tensor_scalar(normed, x, "multiply", rstd, api=api)
    out = new(x.shape, out_dtype)
    engine.tensor_tensor(out, normed, partition_broadcast(w, P, new), "multiply", api=api)
    return out

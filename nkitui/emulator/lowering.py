"""nl composites that both front ends lower onto the same engine instructions.

Each function takes `new(shape, dtype) -> Tensor`, the front end's allocator of a fresh SBUF
result tile (legacy return-style tiles and `nki` tiles differ), and allocates its intermediates
and its result in the same order for both, so the instructions, the trace and the live ranges
are the same whichever namespace the kernel uses. The front ends validate their own arguments.
"""

from __future__ import annotations

from collections.abc import Callable

from nkitui.emulator import dtypes as _dt
from nkitui.emulator import engine
from nkitui.emulator.tensor import Tensor

NewTile = Callable[[tuple, _dt.DType], Tensor]
_F32 = _dt.float32


def partition_broadcast(t: Tensor, P: int, new: NewTile) -> Tensor:
    """`t` with P partitions: a (1, F) tile is broadcast by TensorE into a fresh (P, F) tile."""
    if t.shape[0] == P:
        return t
    tmp = new((P,) + tuple(t.shape[1:]), t.st.dtype)
    engine.partition_broadcast(tmp, t, api="partition broadcast")
    return tmp


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


def rms_norm(x: Tensor, w: Tensor, n, epsilon, out_dtype: _dt.DType, new: NewTile, api: str) -> Tensor:
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

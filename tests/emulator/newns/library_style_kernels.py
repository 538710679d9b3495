"""Kernels written in the style of the open-source NKI kernel library (our own code, from the
library's documented idioms): a user-space SBUF stack allocator that places tensors with
`address=`, a stride-based view helper that materialises views with `.ap()`, dataclass configs
derived from `nl.NKIObject`, token sharding over the logical cores with `program_id`, and
cross-core reductions with `sendrecv`. They are launched the way the library's simulation harness
launches kernels: `nki.cpu_simulate(kernel)[lnc](**inputs)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import nki
import nki.isa as nisa
import nki.language as nl

P_MAX = 128


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def dtype_bytes(dtype) -> int:
    return {"float32": 4, "int32": 4, "uint32": 4, "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2}.get(
        str(dtype), 1)


class StackAllocator(nl.NKIObject):
    """Bump allocator over one SBUF range: scopes free everything allocated inside them."""

    def __init__(self, lower: int, upper: int) -> None:
        self.addr = lower
        self.upper = upper
        self.scopes: list[int] = []

    def open_scope(self) -> None:
        self.scopes.append(self.addr)

    def close_scope(self) -> None:
        self.addr = self.scopes.pop()

    def alloc(self, shape, dtype, name=None):
        nbytes = dtype_bytes(dtype)
        for s in shape[1:]:
            nbytes *= s
        self.addr = (self.addr + 3) // 4 * 4
        check(self.addr + nbytes <= self.upper, f"SBUF stack overflow allocating {name}")
        t = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf, name=name, address=(0, self.addr))
        self.addr += nbytes
        return t


class View(nl.NKIObject):
    """A strided view (shape, strides, offset in elements) over a base tensor, turned into an
    access pattern only when an instruction needs it."""

    def __init__(self, base, shape=None, strides=None, offset: int = 0) -> None:
        self.base = base
        self.shape = tuple(base.shape) if shape is None else tuple(shape)
        if strides is None:
            strides, acc = [], 1
            for n in reversed(self.shape):
                strides.append(acc)
                acc *= n
            strides = tuple(reversed(strides))
        self.strides = tuple(strides)
        self.offset = offset

    def slice(self, dim: int, start: int, end: int) -> "View":
        shape = list(self.shape)
        shape[dim] = end - start
        return View(self.base, shape, self.strides, self.offset + start * self.strides[dim])

    def broadcast(self, dim: int, size: int) -> "View":
        check(self.shape[dim] == 1, "only size-1 dimensions broadcast")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = size, 0
        return View(self.base, shape, strides, self.offset)

    def get(self):
        return self.base.ap(pattern=[[s, n] for s, n in zip(self.strides, self.shape)], offset=self.offset)


@dataclass
class NormConfig(nl.NKIObject):
    eps: float = 1e-6
    h_tile: int = 512
    sbuf_lower: int = 0
    sbuf_upper: int = 192 * 1024


@nki.jit
def rmsnorm_tokens(hidden, gamma, cfg: NormConfig):
    """RMSNorm over the hidden dim of [T, H] tokens: tokens on partitions, shared between the
    logical cores; the sum of squares accumulates across H chunks in the ScalarE registers."""
    T, H = hidden.shape
    n_cores = nl.num_programs(axes=0) if nl.program_ndim() else 1
    core = nl.program_id(axis=0) if nl.program_ndim() else 0
    per_core = T // n_cores
    out = nl.ndarray((T, H), dtype=hidden.dtype, buffer=nl.shared_hbm)
    sbm = StackAllocator(cfg.sbuf_lower, cfg.sbuf_upper)
    n_chunks = H // cfg.h_tile
    for t0 in range(core * per_core, (core + 1) * per_core, P_MAX):
        n = min(P_MAX, (core + 1) * per_core - t0)
        sbm.open_scope()
        x = sbm.alloc((P_MAX, H), hidden.dtype, name="x")
        nisa.dma_copy(dst=x[0:n, :], src=hidden[t0:t0 + n, :])
        g = sbm.alloc((P_MAX, H), gamma.dtype, name="gamma")
        # gamma [1, H] read with a zero partition stride: one DMA broadcasts it to n partitions
        nisa.dma_copy(dst=g[0:n, :], src=View(gamma).broadcast(0, n).get())
        sq = sbm.alloc((P_MAX, cfg.h_tile), nl.float32, name="sq")
        ss = sbm.alloc((P_MAX, 1), nl.float32, name="ss")
        for c in range(n_chunks):
            nisa.activation(dst=sq[0:n, :], op=nl.square, data=x[0:n, c * cfg.h_tile:(c + 1) * cfg.h_tile],
                            reduce_op=nl.add, reduce_res=ss[0:n, :],
                            reduce_cmd=nisa.reduce_cmd.reset_reduce if c == 0 else nisa.reduce_cmd.reduce)
        rstd = sbm.alloc((P_MAX, 1), nl.float32, name="rstd")
        nisa.activation(dst=rstd[0:n, :], op=nl.rsqrt, data=ss[0:n, :], scale=1.0 / H, bias=cfg.eps)
        y = sbm.alloc((P_MAX, H), hidden.dtype, name="y")
        nisa.scalar_tensor_tensor(dst=y[0:n, :], data=x[0:n, :], op0=nl.multiply, operand0=rstd[0:n, :],
                                  op1=nl.multiply, operand1=g[0:n, :])
        nisa.dma_copy(dst=out[t0:t0 + n, :], src=y[0:n, :])
        sbm.close_scope()
    return out


@nki.jit
def row_sums_split_h(x):
    """Row sums of [128, H] with H split between the two cores: each core reduces its half, the
    partial sums cross over with sendrecv, and each core writes the total for its half of rows."""
    P, H = x.shape
    c = nl.program_id(0)
    half = H // 2
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    part = nl.ndarray((P, half), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=part, src=x[:, c * half:(c + 1) * half])
    mine = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mine, op=nl.add, data=part, axis=1)
    theirs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=7)
    total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    # fixed operand order on both cores (core 0's partial first): bitwise-identical results
    first, second = (mine, theirs) if c == 0 else (theirs, mine)
    nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
    rows = P // 2
    nisa.dma_copy(dst=out[c * rows:(c + 1) * rows, :], src=total[c * rows:(c + 1) * rows, :])
    return out


@nki.jit
def broadcast_transpose(src, dst_rows: int):
    """[G, 1] per-group values broadcast to [dst_rows, G] in SBUF + PSUM only: the TensorE transpose
    reads the source through an access pattern that repeats its single column."""
    G, F = src.shape
    s = nl.ndarray((G, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=src)
    ps = nl.ndarray((dst_rows, G), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(ps, s.ap([[F, G], [0, dst_rows]], offset=0))
    sb = nl.ndarray((dst_rows, G), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    out = nl.ndarray((dst_rows, G), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=sb)
    return out

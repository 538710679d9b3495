"""The same algorithms written twice: in the legacy namespace (return-style ISA, `psum +=`,
affine_range) and in the nki namespace (destination-first ISA, accumulate=None, plain loops).

Each pair issues the same engine instructions in the same order, so on one engine the results
must be bit-identical. Our own kernels, written from the tutorials' descriptions.
"""

from __future__ import annotations

import numpy as np

import neuronxcc.nki as lnki
import neuronxcc.nki.isa as lnisa
import neuronxcc.nki.language as lnl
import nki
import nki.isa as nisa
import nki.language as nl

P = 128


# -- RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, rows on partitions ------------------------------------
@lnki.jit
def rmsnorm_legacy(x, w, eps):
    N, D = x.shape
    out = lnl.ndarray((N, D), dtype=x.dtype, buffer=lnl.shared_hbm)
    w_row = lnl.load(w.reshape((1, D)))
    w_all = lnl.broadcast_to(w_row, shape=(P, D))
    for i in lnl.affine_range(N // P):
        xt = lnl.load(x[i * P:(i + 1) * P, :])
        ss = lnl.ndarray((P, 1), dtype=lnl.float32, buffer=lnl.sbuf)
        lnisa.activation_reduce(op=lnl.square, data=xt, reduce_op=lnl.add, reduce_res=ss, dtype=lnl.float32)
        rstd = lnisa.activation(op=lnl.rsqrt, data=ss, scale=1.0 / D, bias=eps, dtype=lnl.float32)
        y = lnisa.scalar_tensor_tensor(data=xt, op0=lnl.multiply, operand0=rstd, op1=lnl.multiply, operand1=w_all,
                                       dtype=x.dtype)
        lnl.store(out[i * P:(i + 1) * P, :], value=y)
    return out


@nki.jit
def rmsnorm_new(x, w, eps):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    w_row = nl.load(w.reshape((1, D)))
    w_all = nl.broadcast_to(w_row, (P, D))
    for i in nl.affine_range(N // P):
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[i * P:(i + 1) * P, :])
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=sq, op=nl.square, data=xt, reduce_op=nl.add, reduce_res=ss)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=ss, scale=1.0 / D, bias=eps)
        y = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=y, data=xt, op0=nl.multiply, operand0=rstd, op1=nl.multiply, operand1=w_all)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=y)
    return out


def rmsnorm_ref(x, w, eps):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * w.astype(np.float64)


# -- tiled matmul: C[M, N] = lhsT[K, M].T @ rhs[K, N] -----------------------------------------------------
@lnki.jit
def matmul_legacy(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = lnl.ndarray((M, N), dtype=lnl.bfloat16, buffer=lnl.shared_hbm)
    for m in lnl.affine_range(M // P):
        for n in lnl.affine_range(N // 512):
            acc = lnl.zeros((P, 512), dtype=lnl.float32, buffer=lnl.psum)
            for k in lnl.affine_range(K // P):
                a = lnl.load(lhsT[k * P:(k + 1) * P, m * P:(m + 1) * P])
                b = lnl.load(rhs[k * P:(k + 1) * P, n * 512:(n + 1) * 512])
                acc += lnisa.nc_matmul(a, b)
            res = lnisa.tensor_copy(acc, dtype=lnl.bfloat16)
            lnl.store(out[m * P:(m + 1) * P, n * 512:(n + 1) * 512], value=res)
    return out


@nki.jit
def matmul_new(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    for m in range(M // P):
        for n in range(N // 512):
            acc = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // P):
                a = nl.ndarray((P, P), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * P:(k + 1) * P, m * P:(m + 1) * P])
                b = nl.ndarray((P, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * P:(k + 1) * P, n * 512:(n + 1) * 512])
                nisa.nc_matmul(acc, a, b)  # accumulate=None: the first K tile overwrites
            res = nl.ndarray((P, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * P:(m + 1) * P, n * 512:(n + 1) * 512], src=res)
    return out


# -- mamba selective scan (fused-mamba tutorial, one batch) ------------------------------------------------
# delta, u: [C, L]; A: [C, S]; B, C_: [S, L]. y[c, t] = sum_s C_[s, t] * h_s[c, t] with
# h_s[c, t] = exp(delta[c, t] * A[c, s]) * h_s[c, t-1] + delta[c, t] * u[c, t] * B[s, t].
@lnki.jit
def mamba_legacy(delta, u, A, B, C_):
    Ch, L = delta.shape
    S = A.shape[1]
    out = lnl.ndarray((Ch, L), dtype=lnl.float32, buffer=lnl.shared_hbm)
    for c in lnl.affine_range(Ch // P):
        d = lnl.load(delta[c * P:(c + 1) * P, :])
        uu = lnl.load(u[c * P:(c + 1) * P, :])
        a = lnl.load(A[c * P:(c + 1) * P, :])
        du = lnisa.tensor_tensor(d, uu, op=lnl.multiply)
        y = lnl.zeros((P, L), dtype=lnl.float32, buffer=lnl.sbuf)
        for s in lnl.sequential_range(S):
            dA = lnisa.activation(op=lnl.exp, data=d, scale=a[:, s:s + 1])
            bb = lnl.broadcast_to(lnl.load(B[s:s + 1, :]), shape=(P, L))
            dBu = lnisa.tensor_tensor(du, bb, op=lnl.multiply)
            h = lnisa.tensor_tensor_scan(dA, dBu, initial=0.0, op0=lnl.multiply, op1=lnl.add)
            cb = lnl.broadcast_to(lnl.load(C_[s:s + 1, :]), shape=(P, L))
            ys = lnisa.tensor_tensor(h, cb, op=lnl.multiply)
            y[...] = lnisa.tensor_tensor(y, ys, op=lnl.add)
        lnl.store(out[c * P:(c + 1) * P, :], value=y)
    return out


@nki.jit
def mamba_new(delta, u, A, B, C_):
    Ch, L = delta.shape
    S = A.shape[1]
    out = nl.ndarray((Ch, L), dtype=nl.float32, buffer=nl.shared_hbm)
    for c in range(Ch // P):
        d = nl.load(delta[c * P:(c + 1) * P, :])
        uu = nl.load(u[c * P:(c + 1) * P, :])
        a = nl.load(A[c * P:(c + 1) * P, :])
        du = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=du, data1=d, data2=uu, op=nl.multiply)
        y = nl.zeros((P, L), dtype=nl.float32, buffer=nl.sbuf)
        for s in range(S):
            dA = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=dA, op=nl.exp, data=d, scale=a[:, s:s + 1])
            bb = nl.broadcast_to(nl.load(B[s:s + 1, :]), (P, L))
            dBu = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=dBu, data1=du, data2=bb, op=nl.multiply)
            h = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=h, data0=dA, data1=dBu, initial=0.0, op0=nl.multiply, op1=nl.add)
            cb = nl.broadcast_to(nl.load(C_[s:s + 1, :]), (P, L))
            ys = nl.ndarray((P, L), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=ys, data1=h, data2=cb, op=nl.multiply)
            nisa.tensor_tensor(dst=y, data1=y, data2=ys, op=nl.add)
        nisa.dma_copy(dst=out[c * P:(c + 1) * P, :], src=y)
    return out


def mamba_ref(delta, u, A, B, C_):
    dA = np.exp(delta[:, None, :].astype(np.float64) * A[:, :, None])  # [C, S, L]
    dBu = (delta * u)[:, None, :].astype(np.float64) * B[None, :, :]
    h = np.zeros(dA.shape[:2])
    y = np.zeros(delta.shape)
    for t in range(delta.shape[1]):
        h = dA[:, :, t] * h + dBu[:, :, t]
        y[:, t] = (h * C_[None, :, t]).sum(axis=1)
    return y


# -- attention: softmax(q k^T * scale) v, one head, queries on partitions ---------------------------------
# qT, kT: [d, S] (given transposed, d <= 128); v: [S, d]; S a multiple of 128, at most 512.
@lnki.jit
def attention_legacy(qT, kT, v, scale):
    d, S = qT.shape
    out = lnl.ndarray((S, d), dtype=lnl.float32, buffer=lnl.shared_hbm)
    k_sb = lnl.load(kT)
    v_tiles = [lnl.load(v[j * P:(j + 1) * P, :]) for j in range(S // P)]
    for i in lnl.affine_range(S // P):
        q_sb = lnl.load(qT[:, i * P:(i + 1) * P])
        scores = lnisa.nc_matmul(q_sb, k_sb)  # [P queries, S keys] in PSUM
        neg_max = lnisa.tensor_reduce(lnl.maximum, scores, axis=1, negate=True, keepdims=True, dtype=lnl.float32)
        nm = lnisa.tensor_scalar(neg_max, np.multiply, scale, dtype=lnl.float32)
        row_sum = lnl.ndarray((P, 1), dtype=lnl.float32, buffer=lnl.sbuf)
        p = lnisa.activation_reduce(op=lnl.exp, data=scores, reduce_op=lnl.add, reduce_res=row_sum, bias=nm,
                                    scale=scale, dtype=lnl.bfloat16)
        acc = lnl.zeros((P, d), dtype=lnl.float32, buffer=lnl.psum)
        for j in lnl.affine_range(S // P):
            pT_ps = lnisa.nc_transpose(p[:, j * P:(j + 1) * P], engine=lnisa.tensor_engine)
            pT = lnisa.tensor_copy(pT_ps, dtype=lnl.bfloat16)
            acc += lnisa.nc_matmul(pT, v_tiles[j])
        inv = lnisa.reciprocal(row_sum, dtype=lnl.float32)
        o = lnisa.tensor_scalar(acc, np.multiply, inv, dtype=lnl.float32)
        lnl.store(out[i * P:(i + 1) * P, :], value=o)
    return out


@nki.jit
def attention_new(qT, kT, v, scale):
    d, S = qT.shape
    out = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.shared_hbm)
    k_sb = nl.load(kT)
    v_tiles = [nl.load(v[j * P:(j + 1) * P, :]) for j in range(S // P)]
    for i in range(S // P):
        q_sb = nl.load(qT[:, i * P:(i + 1) * P])
        scores = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(scores, q_sb, k_sb)
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=scores, axis=1, negate=True, keepdims=True)
        nm = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=nm, data=neg_max, op0=nl.multiply, operand0=scale)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        p = nl.ndarray((P, S), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.activation_reduce(dst=p, op=nl.exp, data=scores, reduce_op=nl.add, reduce_res=row_sum, bias=nm,
                               scale=scale)
        acc = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
        for j in range(S // P):
            pT_ps = nl.ndarray((P, P), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.nc_transpose(dst=pT_ps, data=p[:, j * P:(j + 1) * P], engine=nisa.tensor_engine)
            pT = nl.ndarray((P, P), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=pT, src=pT_ps)
            nisa.nc_matmul(acc, pT, v_tiles[j])
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=row_sum)
        o = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=acc, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=o)
    return out


def attention_ref(qT, kT, v, scale):
    s = qT.astype(np.float64).T @ kT.astype(np.float64) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


# -- nl.mean / nl.var over free axes of a 3-D tile (one lowering serves both namespaces) -------------------
def moments_legacy(axis):
    @lnki.jit
    def moments(x):
        mean = lnl.ndarray((x.shape[0],) + tuple(1 if a in axis else n for a, n in enumerate(x.shape) if a),
                           dtype=lnl.float32, buffer=lnl.shared_hbm)
        var = lnl.ndarray(mean.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
        t = lnl.load(x)
        lnl.store(mean, lnl.mean(t, axis=axis, dtype=lnl.float32, keepdims=True))
        lnl.store(var, lnl.var(t, axis=axis, dtype=lnl.float32))
        return mean, var
    return moments


def moments_new(axis):
    @nki.jit
    def moments(x):
        mean = nl.ndarray((x.shape[0],) + tuple(1 if a in axis else n for a, n in enumerate(x.shape) if a),
                          dtype=nl.float32, buffer=nl.shared_hbm)
        var = nl.ndarray(mean.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(mean, nl.mean(t, axis=axis, dtype=nl.float32, keepdims=True))
        nl.store(var, nl.var(t, axis=axis, dtype=nl.float32))
        return mean, var
    return moments


# -- nl binary ops with broadcast operands, and stores of a scalar and of a PSUM tile ----------------------
@lnki.jit
def binary_legacy(x, col, row):
    out = lnl.ndarray((3,) + x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    t, c, r = lnl.load(x), lnl.load(col), lnl.load(row)
    lnl.store(out[0], lnl.subtract(t, c))  # (P, 1): tensor_scalar
    lnl.store(out[1], lnl.multiply(2.0, lnl.add(r, t)))  # (1, F): TensorE partition broadcast; scalar reversed
    lnl.store(out[2], lnl.matmul(t[:, 0:x.shape[0]], t, transpose_x=True)[:, 0:x.shape[1]])  # a PSUM tile
    return out


@nki.jit
def binary_new(x, col, row):
    out = nl.ndarray((3,) + x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t, c, r = nl.load(x), nl.load(col), nl.load(row)
    nl.store(out[0], nl.subtract(t, c))
    nl.store(out[1], nl.multiply(2.0, nl.add(r, t)))
    nl.store(out[2], nl.matmul(t[:, 0:x.shape[0]], t, transpose_x=True)[:, 0:x.shape[1]])
    return out


# -- nl.transpose and nl.matmul's operand placement (lowering.transpose / matmul_operands) -----------------
@lnki.jit
def transposes_legacy(x, y):
    out = lnl.ndarray((2, x.shape[1], x.shape[0]), dtype=lnl.float32, buffer=lnl.shared_hbm)
    mm = lnl.ndarray((x.shape[0], y.shape[1]), dtype=lnl.float32, buffer=lnl.shared_hbm)
    t = lnl.load(x)
    tT = lnl.transpose(t)  # SBUF -> PSUM
    lnl.store(out[0], tT)
    lnl.store(out[1], lnl.transpose(lnl.transpose(tT)))  # a PSUM input: copied to SBUF first
    u = lnl.load(y)
    lnl.store(mm, lnl.matmul(t, lnl.transpose(lnl.transpose(u))))  # x.T by TensorE, y in PSUM
    return out, mm


@nki.jit
def transposes_new(x, y):
    out = nl.ndarray((2, x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    mm = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    tT = nl.transpose(t)
    nl.store(out[0], tT)
    nl.store(out[1], nl.transpose(nl.transpose(tT)))
    u = nl.load(y)
    nl.store(mm, nl.matmul(t, nl.transpose(nl.transpose(u))))
    return out, mm

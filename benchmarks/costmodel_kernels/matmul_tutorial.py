"""The four matrix-multiplication kernels of AWS's NKI matmul tutorial, rewritten for calibration.

Written by us from the tutorial's description (nki-spec.md §9.1, source [L-MM]): result = lhsT.T @ rhs
with lhsT [K, M] and rhs [K, N] in HBM, bf16, tiles of M 128 (stationary free size), K 128
(partitions) and N 512 (moving free size), legacy `neuronxcc.nki` namespace. Published on trn1 for
[4096, 8192] @ [8192, 8192]: 51.80, 42.96, 22.07 and 6.97 ms.

1. `matmul_tiled`        - three tiled loops, both operand tiles loaded inside the K loop;
2. `matmul_hoisted`      - the lhsT column of tiles loaded once per M tile, the rhs column once per
                           (M, N) tile, outside the K loop;
3. `matmul_block_free`   - 2 x 2 blocks of output tiles reuse the loaded lhsT / rhs columns;
4. `matmul_block_all`    - blocks of 16 M tiles, 2 N tiles and 8 K tiles; the K-block loop is
                           sequential and partial sums accumulate in SBUF; loads and stores move
                           whole block rows (2-4 KiB per partition) for the DMA engines.

Import after `nkitui.emulator.install()` (or on a host with the Neuron SDK).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TM = 128  # stationary free size (output rows per tile)
TK = 128  # partitions (contraction per matmul)
TN = 512  # moving free size (output columns per tile, one PSUM bank of fp32)


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mi in nl.affine_range(M // TM):
        for ni in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(K // TK):
                a = nl.load(lhsT[ki * TK:(ki + 1) * TK, mi * TM:(mi + 1) * TM])
                b = nl.load(rhs[ki * TK:(ki + 1) * TK, ni * TN:(ni + 1) * TN])
                acc += nl.matmul(a, b, transpose_x=True)
            tile = nl.copy(acc, dtype=out.dtype)
            nl.store(out[mi * TM:(mi + 1) * TM, ni * TN:(ni + 1) * TN], value=tile)
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mi in nl.affine_range(M // TM):
        a_col = nl.ndarray((KT, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for ki in nl.affine_range(KT):
            a_col[ki] = nl.load(lhsT[ki * TK:(ki + 1) * TK, mi * TM:(mi + 1) * TM])
        for ni in nl.affine_range(N // TN):
            b_col = nl.ndarray((KT, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for ki in nl.affine_range(KT):
                b_col[ki] = nl.load(rhs[ki * TK:(ki + 1) * TK, ni * TN:(ni + 1) * TN])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(KT):
                acc += nl.matmul(a_col[ki], b_col[ki], transpose_x=True)
            tile = nl.copy(acc, dtype=out.dtype)
            nl.store(out[mi * TM:(mi + 1) * TM, ni * TN:(ni + 1) * TN], value=tile)
    return out


@nki.jit
def matmul_block_free(lhsT, rhs, BM=2, BN=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (TM * BM)):
        a_cols = nl.ndarray((BM, KT, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for bm in nl.affine_range(BM):
            m0 = (mb * BM + bm) * TM
            for ki in nl.affine_range(KT):
                a_cols[bm, ki] = nl.load(lhsT[ki * TK:(ki + 1) * TK, m0:m0 + TM])
        for nb in nl.affine_range(N // (TN * BN)):
            b_cols = nl.ndarray((BN, KT, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for bn in nl.affine_range(BN):
                n0 = (nb * BN + bn) * TN
                for ki in nl.affine_range(KT):
                    b_cols[bn, ki] = nl.load(rhs[ki * TK:(ki + 1) * TK, n0:n0 + TN])
            for bm in nl.affine_range(BM):
                for bn in nl.affine_range(BN):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for ki in nl.affine_range(KT):
                        acc += nl.matmul(a_cols[bm, ki], b_cols[bn, ki], transpose_x=True)
                    tile = nl.copy(acc, dtype=out.dtype)
                    m0, n0 = (mb * BM + bm) * TM, (nb * BN + bn) * TN
                    nl.store(out[m0:m0 + TM, n0:n0 + TN], value=tile)
    return out


@nki.jit
def matmul_block_all(lhsT, rhs, BM=16, BN=2, BK=8):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    block_m, block_n, block_k = TM * BM, TN * BN, TK * BK
    n_mb = M // block_m
    for nb in nl.affine_range(N // block_n):
        # partial sums of a whole column block of the output stay in SBUF
        sums = nl.zeros((n_mb, BM, BN, nl.par_dim(TM), TN), dtype=lhsT.dtype, buffer=nl.sbuf)
        for kb in nl.sequential_range(K // block_k):
            b_rows = nl.ndarray((BK, nl.par_dim(TK), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(BK):
                k0 = (kb * BK + bk) * TK
                b_rows[bk] = nl.load(rhs[k0:k0 + TK, nb * block_n:(nb + 1) * block_n])
            for mb in nl.affine_range(n_mb):
                a_rows = nl.ndarray((BK, nl.par_dim(TK), block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(BK):
                    k0 = (kb * BK + bk) * TK
                    a_rows[bk] = nl.load(lhsT[k0:k0 + TK, mb * block_m:(mb + 1) * block_m])
                for bn in nl.affine_range(BN):
                    for bm in nl.affine_range(BM):
                        acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(BK):
                            acc += nisa.nc_matmul(a_rows[bk, :, bm * TM:(bm + 1) * TM],
                                                  b_rows[bk, :, bn * TN:(bn + 1) * TN])
                        sums[mb, bm, bn] += acc
        for mb in nl.affine_range(n_mb):
            for bm in nl.affine_range(BM):
                # pack the BN tiles of one output row block so a single store moves 2 KiB per partition
                packed = nl.ndarray((nl.par_dim(TM), block_n), dtype=sums.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(BN):
                    packed[:, bn * TN:(bn + 1) * TN] = nl.copy(sums[mb, bm, bn])
                m0 = (mb * BM + bm) * TM
                nl.store(out[m0:m0 + TM, nb * block_n:(nb + 1) * block_n], value=packed)
    return out


KERNELS = {
    "tiled": matmul_tiled,
    "hoisted": matmul_hoisted,
    "block_free": matmul_block_free,
    "block_all": matmul_block_all,
}

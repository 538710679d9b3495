"""The four matmul kernels of AWS's trn2 kernel-optimization walkthrough, written by us for cost-model
calibration from its description (nki-spec.md §9.2, source [KOPT]); new `nki` namespace.

result[M, N] = lhsT.T @ rhs with lhsT [K, M] and rhs [K, N] in HBM, tiles of M 128 (stationary),
K 128 (partitions) and N 512 (moving); the walkthrough feeds float32 inputs, so every matmul is an
fp32 one. Published for [4096, 8192] @ [8192, 8192] on trn2: engine active percentages only.

1. `tiled`       - three tiled loops; both operand tiles are copied in inside the K loop;
2. `hoisted`     - a whole K column of lhsT tiles per M tile, of rhs tiles per (M, N) tile, before the
                   K loop;
3. `block_mn`    - blocks of 2 x 2 output tiles share their loaded lhsT and rhs columns;
4. `block_mnk`   - blocks of 16 M tiles, 2 N tiles and 8 K tiles; the partial sums of a whole column
                   block stay in SBUF (zeroed with memset, accumulated from PSUM with tensor_tensor)
                   and leave packed two tiles wide.

Import after `nkitui.emulator.install()` (or on a host with the Neuron SDK).
"""

import nki
import nki.isa as nisa
import nki.language as nl

TM, TK, TN = 128, 128, 512


def _evict(dst_hbm, acc, rows, cols):
    """PSUM -> SBUF -> HBM for one finished output tile."""
    staged = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=staged, src=acc)
    nisa.dma_copy(dst=dst_hbm[rows, cols], src=staged)


@nki.jit
def tiled(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            _evict(out, acc, slice(m * TM, (m + 1) * TM), slice(n * TN, (n + 1) * TN))
    return out


def _column(src, k_tiles, c0, width):
    """All K tiles of one column of `src` ([K, width] starting at column c0), one SBUF tile each."""
    tiles = []
    for k in nl.affine_range(k_tiles):
        t = nl.ndarray((TK, width), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[k * TK:(k + 1) * TK, c0:c0 + width])
        tiles.append(t)
    return tiles


@nki.jit
def hoisted(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // TK
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a_col = _column(lhsT, kt, m * TM, TM)
        for n in nl.affine_range(N // TN):
            b_col = _column(rhs, kt, n * TN, TN)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                nisa.nc_matmul(dst=acc, stationary=a_col[k], moving=b_col[k])
            _evict(out, acc, slice(m * TM, (m + 1) * TM), slice(n * TN, (n + 1) * TN))
    return out


@nki.jit
def block_mn(lhsT, rhs, bm=2, bn=2):
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // TK
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (TM * bm)):
        a_cols = [_column(lhsT, kt, (mb * bm + i) * TM, TM) for i in range(bm)]
        for nb in nl.affine_range(N // (TN * bn)):
            b_cols = [_column(rhs, kt, (nb * bn + j) * TN, TN) for j in range(bn)]
            for i in nl.affine_range(bm):
                for j in nl.affine_range(bn):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(kt):
                        nisa.nc_matmul(dst=acc, stationary=a_cols[i][k], moving=b_cols[j][k])
                    m0, n0 = (mb * bm + i) * TM, (nb * bn + j) * TN
                    _evict(out, acc, slice(m0, m0 + TM), slice(n0, n0 + TN))
    return out


@nki.jit
def block_mnk(lhsT, rhs, bm=16, bn=2, bk=8):
    K, M = lhsT.shape
    N = rhs.shape[1]
    block_m, block_n, block_k = TM * bm, TN * bn, TK * bk
    m_blocks = M // block_m
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // block_n):
        sums = []
        for _ in range(m_blocks * bm * bn):
            s = nl.ndarray((TM, TN), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.memset(dst=s, value=0.0)
            sums.append(s)
        for kb in nl.sequential_range(K // block_k):
            b_rows = []
            for r in range(bk):
                t = nl.ndarray((TK, block_n), dtype=rhs.dtype, buffer=nl.sbuf)
                k0 = (kb * bk + r) * TK
                nisa.dma_copy(dst=t, src=rhs[k0:k0 + TK, nb * block_n:(nb + 1) * block_n])
                b_rows.append(t)
            for mb in nl.affine_range(m_blocks):
                a_rows = []
                for r in nl.affine_range(bk):
                    t = nl.ndarray((TK, block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                    k0 = (kb * bk + r) * TK
                    nisa.dma_copy(dst=t, src=lhsT[k0:k0 + TK, mb * block_m:(mb + 1) * block_m])
                    a_rows.append(t)
                for j in nl.affine_range(bn):
                    for i in nl.affine_range(bm):
                        acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for r in nl.affine_range(bk):
                            nisa.nc_matmul(dst=acc, stationary=a_rows[r][0:TK, i * TM:(i + 1) * TM],
                                           moving=b_rows[r][0:TK, j * TN:(j + 1) * TN])
                        s = sums[(mb * bm + i) * bn + j]
                        nisa.tensor_tensor(dst=s, data1=s, data2=acc, op=nl.add)
        for mb in nl.affine_range(m_blocks):
            for i in nl.affine_range(bm):
                packed = nl.ndarray((TM, block_n), dtype=nl.float32, buffer=nl.sbuf)
                for j in nl.affine_range(bn):
                    nisa.tensor_copy(dst=packed[0:TM, j * TN:(j + 1) * TN], src=sums[(mb * bm + i) * bn + j])
                m0 = (mb * bm + i) * TM
                nisa.dma_copy(dst=out[m0:m0 + TM, nb * block_n:(nb + 1) * block_n], src=packed)
    return out


KERNELS = {"tiled": tiled, "hoisted": hoisted, "block_mn": block_mn, "block_mnk": block_mnk}

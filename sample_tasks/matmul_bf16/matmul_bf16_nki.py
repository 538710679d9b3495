"""NKI port of matmul_bf16.cu: C[M, N] = A[M, K] @ B[K, N] with bf16 inputs, fp32 accumulation and a
bf16 result (new `nki` namespace, trn2).

TensorE contracts over the partition axis: `nc_matmul(stationary[K, M], moving[K, N])` computes
stationary.T @ moving. The kernel therefore takes A already transposed (`lhsT`, [K, M]; the task's
manifest declares that layout), so no transpose is needed on the device.

Tiling follows the hardware limits: K in tiles of 128 (partitions), M in tiles of 128 (stationary
free size), N in tiles of 512 (moving free size = one 2 KiB PSUM bank of fp32). The K-tiles of one
output tile accumulate in a single PSUM tile in fp32 (the CUDA kernel's fp32 register accumulators);
the result is rounded to bf16 once, on the PSUM -> SBUF copy.

B is loaded once and reused by every M tile; the K x 128 strip of lhsT for an M tile is loaded once
and reused by every N tile.
"""

import nki
import nki.isa as nisa
import nki.language as nl

TILE_K = 128  # contraction tile: the partition count
TILE_M = 128  # stationary free size limit
TILE_N = 512  # moving free size limit (one PSUM bank of fp32)


@nki.jit
def matmul_bf16_kernel(lhsT, rhs):
    K, M = lhsT.shape
    K_rhs, N = rhs.shape
    n_k = K // TILE_K
    n_m = M // TILE_M
    n_n = N // TILE_N

    result = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)

    # All of B, as [128 partitions (k within tile), k tile, N]: 8 KiB per partition here.
    rhs_sb = nl.ndarray((TILE_K, n_k, N), dtype=rhs.dtype, buffer=nl.sbuf)
    for k in range(n_k):
        nisa.dma_copy(dst=rhs_sb[:, k, :], src=rhs[k * TILE_K:(k + 1) * TILE_K, :])

    for m in range(n_m):
        lhsT_sb = nl.ndarray((TILE_K, n_k, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in range(n_k):
            nisa.dma_copy(dst=lhsT_sb[:, k, :],
                          src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])

        for n in range(n_n):
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in range(n_k):
                # The first K-tile overwrites the bank, the rest accumulate into it in fp32.
                nisa.nc_matmul(acc, lhsT_sb[:, k, :], rhs_sb[:, k, n * TILE_N:(n + 1) * TILE_N],
                               accumulate=k > 0)

            out_sb = nl.ndarray((TILE_M, TILE_N), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(out_sb, acc)  # PSUM fp32 -> SBUF bf16 (round to nearest even)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N],
                          src=out_sb)

    return result

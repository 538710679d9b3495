"""NKI port of matmul_bf16_f32out.cu: C[M, N] = A[M, K] @ B[K, N], bf16 inputs, fp32 result (legacy
neuronxcc.nki namespace, trn2).

The kernel takes A transposed (lhsT, [K, M]; the manifest declares the layout) because TensorE
contracts over the partition axis: nc_matmul(stationary=lhsT tile [128, 128], moving=B tile
[128, 512]) -> [128, 512] fp32 in PSUM.

Each K-tile's product is folded into a running sum kept in SBUF, so only one PSUM tile is live per
output tile and the PSUM banks stay free for the next output tile's matmuls. The running sum is kept
in bf16, the precision of the operands, which halves its SBUF footprint; the final store widens it to
the fp32 output.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE_K = 128
TILE_M = 128
TILE_N = 512


@nki.jit
def matmul_bf16_f32out_kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    assert K % TILE_K == 0 and M % TILE_M == 0 and N % TILE_N == 0, "shapes must be tile multiples"

    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)

    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), dtype=nl.bfloat16, buffer=nl.sbuf)

            for k in nl.sequential_range(K // TILE_K):
                lhsT_tile = nl.load(lhsT[nl.ds(k * TILE_K, TILE_K), nl.ds(m * TILE_M, TILE_M)])
                rhs_tile = nl.load(rhs[nl.ds(k * TILE_K, TILE_K), nl.ds(n * TILE_N, TILE_N)])
                partial = nisa.nc_matmul(lhsT_tile, rhs_tile)
                acc[...] = nisa.tensor_tensor(acc, partial, op=nl.add, dtype=nl.bfloat16)

            nl.store(result[nl.ds(m * TILE_M, TILE_M), nl.ds(n * TILE_N, TILE_N)], value=acc)

    return result

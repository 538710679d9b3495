// bf16 GEMM with an fp32 result: C[M, N] = A[M, K] @ B[K, N] (e.g. a projection whose output
// feeds an fp32 loss). A, B bf16 row-major; C fp32 row-major; accumulation in fp32.
//
// Shared-memory tiling: a 32x8 thread block computes a 32x32 tile of C, four rows per thread.
// K advances in steps of 32; each step stages a 32x32 tile of A and of B (converted to fp32) and
// accumulates 32 products per output in fp32 registers.
// Requires M, N, K to be multiples of 32 (checked by the launcher).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kTile = 32;
constexpr int kBlockRows = 8;
constexpr int kRowsPerThread = kTile / kBlockRows;  // 4

__global__ void matmul_bf16_f32out_kernel(const __nv_bfloat16* __restrict__ A,
                                          const __nv_bfloat16* __restrict__ B,
                                          float* __restrict__ C,
                                          int M, int N, int K) {
    __shared__ float a_tile[kTile][kTile + 1];  // +1: no bank conflicts on a_tile[r][k] reads
    __shared__ float b_tile[kTile][kTile];

    const int col = blockIdx.x * kTile + threadIdx.x;
    const int row0 = blockIdx.y * kTile + threadIdx.y;

    float acc[kRowsPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};

    for (int k0 = 0; k0 < K; k0 += kTile) {
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int r = threadIdx.y + i * kBlockRows;
            a_tile[r][threadIdx.x] =
                __bfloat162float(A[static_cast<size_t>(blockIdx.y * kTile + r) * K + k0 + threadIdx.x]);
            b_tile[r][threadIdx.x] = __bfloat162float(B[static_cast<size_t>(k0 + r) * N + col]);
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < kTile; ++k) {
            const float b = b_tile[k][threadIdx.x];
#pragma unroll
            for (int i = 0; i < kRowsPerThread; ++i) {
                acc[i] = fmaf(a_tile[threadIdx.y + i * kBlockRows][k], b, acc[i]);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        C[static_cast<size_t>(row0 + i * kBlockRows) * N + col] = acc[i];
    }
}

}  // namespace

// Host launcher: A [M, K] and B [K, N] bf16, C [M, N] fp32; row-major device arrays.
cudaError_t launch_matmul_bf16_f32out(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C,
                                      int M, int N, int K, cudaStream_t stream) {
    if (M % kTile != 0 || N % kTile != 0 || K % kTile != 0) {
        return cudaErrorInvalidValue;
    }
    const dim3 block(kTile, kBlockRows);
    const dim3 grid(N / kTile, M / kTile);
    matmul_bf16_f32out_kernel<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
    return cudaGetLastError();
}

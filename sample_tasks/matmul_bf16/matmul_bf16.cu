// bf16 GEMM: C[M, N] = A[M, K] @ B[K, N], fp32 accumulation, bf16 output. Row-major everywhere.
//
// Classic shared-memory tiling with register blocking: a 256-thread block computes a 64x64 tile
// of C; each thread owns a 4x4 micro-tile held in fp32 registers. K is walked in steps of 16:
// the block stages a 64x16 slab of A (stored transposed, so the inner loop reads it contiguously)
// and a 16x64 slab of B in shared memory, converting bf16 -> fp32 on the way in.
// Requires M, N multiples of 64 and K a multiple of 16 (checked by the launcher).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 64;
constexpr int kBN = 64;
constexpr int kBK = 16;
constexpr int kTM = 4;  // rows of C per thread
constexpr int kTN = 4;  // columns of C per thread
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 256

__global__ void __launch_bounds__(kThreads)
matmul_bf16_kernel(const __nv_bfloat16* __restrict__ A,
                   const __nv_bfloat16* __restrict__ B,
                   __nv_bfloat16* __restrict__ C,
                   int M, int N, int K) {
    __shared__ float As[kBK][kBM];  // A slab, transposed: As[k][m]
    __shared__ float Bs[kBK][kBN];  // B slab: Bs[k][n]

    const int block_row = blockIdx.y * kBM;
    const int block_col = blockIdx.x * kBN;
    const int thread_row = (threadIdx.x / (kBN / kTN)) * kTM;
    const int thread_col = (threadIdx.x % (kBN / kTN)) * kTN;

    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    for (int k0 = 0; k0 < K; k0 += kBK) {
        // 64x16 elements of A and 16x64 of B: four of each per thread.
        for (int idx = threadIdx.x; idx < kBM * kBK; idx += kThreads) {
            const int m = idx / kBK;
            const int k = idx % kBK;
            As[k][m] = __bfloat162float(A[static_cast<size_t>(block_row + m) * K + k0 + k]);
        }
        for (int idx = threadIdx.x; idx < kBK * kBN; idx += kThreads) {
            const int k = idx / kBN;
            const int n = idx % kBN;
            Bs[k][n] = __bfloat162float(B[static_cast<size_t>(k0 + k) * N + block_col + n]);
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            float a_frag[kTM];
            float b_frag[kTN];
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
                a_frag[i] = As[k][thread_row + i];
            }
#pragma unroll
            for (int j = 0; j < kTN; ++j) {
                b_frag[j] = Bs[k][thread_col + j];
            }
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
#pragma unroll
                for (int j = 0; j < kTN; ++j) {
                    acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const size_t offset =
                static_cast<size_t>(block_row + thread_row + i) * N + block_col + thread_col + j;
            C[offset] = __float2bfloat16_rn(acc[i][j]);
        }
    }
}

}  // namespace

// Host launcher: A [M, K], B [K, N], C [M, N], all bf16 row-major device arrays.
cudaError_t launch_matmul_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                               int M, int N, int K, cudaStream_t stream) {
    if (M % kBM != 0 || N % kBN != 0 || K % kBK != 0) {
        return cudaErrorInvalidValue;
    }
    const dim3 grid(N / kBN, M / kBM);
    matmul_bf16_kernel<<<grid, kThreads, 0, stream>>>(A, B, C, M, N, K);
    return cudaGetLastError();
}

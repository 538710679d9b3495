// LayerNorm over the last axis:
//   y[r, :] = (x[r, :] - mean) * rsqrt(var + eps) * gamma[:] + beta[:]
// with the biased variance var = mean((x - mean)^2).
//
// One block per row. Each thread keeps its slice of the row in registers (at most
// kMaxPerThread values), so the row is read from global memory once: the mean is reduced first,
// then the variance of the centred values (two-pass, no catastrophic cancellation). Block
// reductions go warp-shuffle -> shared memory -> warp-shuffle.

#include <cuda_runtime.h>

namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kMaxPerThread = 8;  // hidden <= 2048
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreadsPerBlock / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(kFullMask, v, offset);
    }
    return v;
}

__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    v = warp_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    float total = lane < kWarps ? scratch[lane] : 0.0f;
    total = warp_sum(total);  // every warp reduces the kWarps partials itself
    __syncthreads();          // scratch is reused by the next call
    return total;
}

__global__ void layernorm_kernel(const float* __restrict__ x,
                                 const float* __restrict__ gamma,
                                 const float* __restrict__ beta,
                                 float* __restrict__ y,
                                 int n_rows,
                                 int hidden,
                                 float eps) {
    __shared__ float scratch[kWarps];
    const int row = blockIdx.x;
    if (row >= n_rows) {
        return;
    }
    const float* x_row = x + static_cast<size_t>(row) * hidden;
    float* y_row = y + static_cast<size_t>(row) * hidden;

    float vals[kMaxPerThread];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int c = threadIdx.x + k * kThreadsPerBlock;
        vals[k] = c < hidden ? x_row[c] : 0.0f;
        sum += vals[k];
    }
    const float mean = block_sum(sum, scratch) / static_cast<float>(hidden);

    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int c = threadIdx.x + k * kThreadsPerBlock;
        const float d = c < hidden ? vals[k] - mean : 0.0f;
        sq += d * d;
    }
    const float var = block_sum(sq, scratch) / static_cast<float>(hidden);
    const float rstd = rsqrtf(var + eps);

#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int c = threadIdx.x + k * kThreadsPerBlock;
        if (c < hidden) {
            y_row[c] = (vals[k] - mean) * rstd * gamma[c] + beta[c];
        }
    }
}

}  // namespace

// Host launcher: x, y are [n_rows, hidden] row-major device arrays; gamma, beta are [hidden].
cudaError_t launch_layernorm(const float* x, const float* gamma, const float* beta, float* y,
                             int n_rows, int hidden, float eps, cudaStream_t stream) {
    if (hidden > kThreadsPerBlock * kMaxPerThread) {
        return cudaErrorInvalidValue;
    }
    layernorm_kernel<<<n_rows, kThreadsPerBlock, 0, stream>>>(x, gamma, beta, y, n_rows, hidden,
                                                              eps);
    return cudaGetLastError();
}

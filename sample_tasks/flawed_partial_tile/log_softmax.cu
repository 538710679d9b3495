// Row-wise log-softmax (e.g. token log-probabilities from logits):
//   y[r, c] = x[r, c] - max_r - log(sum_c exp(x[r, c] - max_r))
//
// One block of 128 threads per row: a max reduction, then a sum-of-exponentials reduction,
// each warp-shuffle -> shared memory -> warp-shuffle. Rows past n_rows get no block at all
// (the grid has exactly n_rows blocks).

#include <cuda_runtime.h>

#include <cfloat>

namespace {

constexpr int kThreadsPerBlock = 128;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreadsPerBlock / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(kFullMask, v, offset);
    }
    return v;
}

template <bool kIsMax>
__device__ float block_reduce(float v, float* scratch) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    v = kIsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    float r = lane < kWarps ? scratch[lane] : (kIsMax ? -FLT_MAX : 0.0f);
    r = kIsMax ? warp_max(r) : warp_sum(r);
    __syncthreads();
    return r;
}

__global__ void log_softmax_kernel(const float* __restrict__ x,
                                   float* __restrict__ y,
                                   int n_rows,
                                   int n_cols) {
    __shared__ float scratch[kWarps];
    const int row = blockIdx.x;
    if (row >= n_rows) {
        return;
    }
    const float* x_row = x + static_cast<size_t>(row) * n_cols;
    float* y_row = y + static_cast<size_t>(row) * n_cols;

    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        m = fmaxf(m, x_row[c]);
    }
    m = block_reduce<true>(m, scratch);

    float s = 0.0f;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        s += expf(x_row[c] - m);
    }
    s = block_reduce<false>(s, scratch);
    const float shift = m + logf(s);

    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        y_row[c] = x_row[c] - shift;
    }
}

}  // namespace

// Host launcher: x, y are [n_rows, n_cols] row-major device arrays.
cudaError_t launch_log_softmax(const float* x, float* y, int n_rows, int n_cols,
                               cudaStream_t stream) {
    log_softmax_kernel<<<n_rows, kThreadsPerBlock, 0, stream>>>(x, y, n_rows, n_cols);
    return cudaGetLastError();
}

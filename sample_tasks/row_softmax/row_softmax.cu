// Row-wise softmax: y[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))).
//
// One warp per row. Each lane strides over the row's columns, keeps a private max and sum,
// and the warp combines them with butterfly shuffles (no shared memory, no __syncthreads).
// Rows are independent, so a block simply holds kWarpsPerBlock rows.

#include <cuda_runtime.h>

#include <cfloat>

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
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

__global__ void row_softmax_kernel(const float* __restrict__ x,
                                   float* __restrict__ y,
                                   int n_rows,
                                   int n_cols) {
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * kWarpsPerBlock + warp;
    if (row >= n_rows) {
        return;  // whole warp exits together: the shuffles below stay convergent
    }
    const float* x_row = x + static_cast<size_t>(row) * n_cols;
    float* y_row = y + static_cast<size_t>(row) * n_cols;

    float local_max = -FLT_MAX;
    for (int c = lane; c < n_cols; c += kWarpSize) {
        local_max = fmaxf(local_max, x_row[c]);
    }
    const float row_max = warp_max(local_max);

    float local_sum = 0.0f;
    for (int c = lane; c < n_cols; c += kWarpSize) {
        local_sum += __expf(x_row[c] - row_max);
    }
    const float inv_sum = 1.0f / warp_sum(local_sum);

    for (int c = lane; c < n_cols; c += kWarpSize) {
        y_row[c] = __expf(x_row[c] - row_max) * inv_sum;
    }
}

}  // namespace

// Host launcher: x and y are device pointers to n_rows * n_cols floats (row-major).
cudaError_t launch_row_softmax(const float* x, float* y, int n_rows, int n_cols,
                               cudaStream_t stream) {
    const dim3 block(kWarpSize * kWarpsPerBlock);
    const dim3 grid((n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    row_softmax_kernel<<<grid, block, 0, stream>>>(x, y, n_rows, n_cols);
    return cudaGetLastError();
}

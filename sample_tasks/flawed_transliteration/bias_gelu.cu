// Fused bias-add + GELU (tanh approximation), as used after the first MLP projection:
//   v = x[r, c] + bias[c]
//   y[r, c] = 0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 * v^3)))
//
// One warp per row: blockIdx.x selects the row and the 32 lanes stride across its columns, so
// consecutive lanes touch consecutive addresses (coalesced loads and stores).

#include <cuda_runtime.h>

namespace {

constexpr int kWarpSize = 32;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

__global__ void bias_gelu_kernel(const float* __restrict__ x,
                                 const float* __restrict__ bias,
                                 float* __restrict__ y,
                                 int n_rows,
                                 int n_cols) {
    const int row = blockIdx.x;
    if (row >= n_rows) {
        return;
    }
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        const size_t idx = static_cast<size_t>(row) * n_cols + c;
        const float v = x[idx] + bias[c];
        const float v3 = v * v * v;
        const float inner = kSqrt2OverPi * (v + kGeluCoeff * v3);
        y[idx] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

}  // namespace

// Host launcher: x, y are [n_rows, n_cols] row-major device arrays; bias is [n_cols].
cudaError_t launch_bias_gelu(const float* x, const float* bias, float* y, int n_rows, int n_cols,
                             cudaStream_t stream) {
    bias_gelu_kernel<<<n_rows, kWarpSize, 0, stream>>>(x, bias, y, n_rows, n_cols);
    return cudaGetLastError();
}

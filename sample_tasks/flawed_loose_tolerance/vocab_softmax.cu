// Softmax over a vocabulary (sampling probabilities from logits), one row per token:
//   p[r, v] = exp(logits[r, v] - max_r) / sum_v exp(logits[r, v] - max_r)
//
// Rows are long (tens of thousands of entries), so each row gets a block of 1024 threads and is
// read in a single pass for the statistics with the online-softmax recurrence: every thread keeps
// a running (max, sum) pair, rescaling its sum whenever its max grows. The pairs are merged across
// the warp with shuffles and across warps through shared memory, then the row is read once more to
// write the probabilities.

#include <cuda_runtime.h>

#include <cfloat>

namespace {

constexpr int kThreadsPerBlock = 1024;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreadsPerBlock / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

struct MaxSum {
    float max;
    float sum;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        MaxSum other;
        other.max = __shfl_xor_sync(kFullMask, v.max, offset);
        other.sum = __shfl_xor_sync(kFullMask, v.sum, offset);
        v = merge(v, other);
    }
    return v;
}

__global__ void __launch_bounds__(kThreadsPerBlock)
vocab_softmax_kernel(const float* __restrict__ logits,
                     float* __restrict__ probs,
                     int n_rows,
                     int vocab) {
    __shared__ float warp_max[kWarps];
    __shared__ float warp_sum[kWarps];
    const int row = blockIdx.x;
    if (row >= n_rows) {
        return;
    }
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const float* in = logits + static_cast<size_t>(row) * vocab;
    float* out = probs + static_cast<size_t>(row) * vocab;

    MaxSum acc = {-FLT_MAX, 0.0f};
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
        const float x = in[v];
        if (x > acc.max) {
            acc.sum = acc.sum * __expf(acc.max - x) + 1.0f;
            acc.max = x;
        } else {
            acc.sum += __expf(x - acc.max);
        }
    }
    acc = warp_merge(acc);
    if (lane == 0) {
        warp_max[warp] = acc.max;
        warp_sum[warp] = acc.sum;
    }
    __syncthreads();
    MaxSum total = {-FLT_MAX, 0.0f};
    if (lane < kWarps) {
        total = {warp_max[lane], warp_sum[lane]};
    }
    total = warp_merge(total);  // every warp merges the kWarps partials itself

    const float inv_sum = 1.0f / total.sum;
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
        out[v] = __expf(in[v] - total.max) * inv_sum;
    }
}

}  // namespace

// Host launcher: logits, probs are [n_rows, vocab] row-major device arrays.
cudaError_t launch_vocab_softmax(const float* logits, float* probs, int n_rows, int vocab,
                                 cudaStream_t stream) {
    vocab_softmax_kernel<<<n_rows, kThreadsPerBlock, 0, stream>>>(logits, probs, n_rows, vocab);
    return cudaGetLastError();
}

// First-order linear recurrence (the selective-scan core of Mamba-style layers), per channel:
//   h[c, t] = a[c, t] * h[c, t-1] + b[c, t],   h[c, -1] = h0[c]
// a, b, h: [channels, seq_len] float32 row-major; h0: [channels].
//
// One block per channel. The recurrence is associative as a composition of affine maps
// x -> A*x + B, so the block runs a parallel scan over them:
//   1. each thread folds kItems consecutive steps into one map (registers);
//   2. warps scan their maps with __shfl_up_sync (inclusive);
//   3. warp totals go through shared memory; each warp composes the carry-in with the totals of
//      the warps before it;
//   4. each thread replays its kItems steps from its exact incoming state and writes h.
// Sequences longer than one block pass (kThreads * kItems steps) loop, carrying the last state.

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

__global__ void __launch_bounds__(kThreads)
linear_scan_kernel(const float* __restrict__ a,
                   const float* __restrict__ b,
                   const float* __restrict__ h0,
                   float* __restrict__ h,
                   int channels,
                   int seq_len) {
    __shared__ float warp_a[kWarps];
    __shared__ float warp_b[kWarps];
    __shared__ float carry;

    const int channel = blockIdx.x;
    if (channel >= channels) {
        return;
    }
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const float* a_row = a + static_cast<size_t>(channel) * seq_len;
    const float* b_row = b + static_cast<size_t>(channel) * seq_len;
    float* h_row = h + static_cast<size_t>(channel) * seq_len;

    if (threadIdx.x == 0) {
        carry = h0[channel];
    }
    __syncthreads();

    for (int base = 0; base < seq_len; base += kThreads * kItems) {
        const int t0 = base + threadIdx.x * kItems;

        // 1. Fold this thread's steps: map(x) = A*x + B. Steps past the end are the identity.
        float av[kItems];
        float bv[kItems];
        float A = 1.0f;
        float B = 0.0f;
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const bool in_range = t0 + i < seq_len;
            av[i] = in_range ? a_row[t0 + i] : 1.0f;
            bv[i] = in_range ? b_row[t0 + i] : 0.0f;
            B = fmaf(av[i], B, bv[i]);
            A *= av[i];
        }

        // 2. Inclusive warp scan: (A, B) becomes the composition of lanes 0..lane.
#pragma unroll
        for (int offset = 1; offset < kWarpSize; offset <<= 1) {
            const float a_prev = __shfl_up_sync(kFullMask, A, offset);
            const float b_prev = __shfl_up_sync(kFullMask, B, offset);
            if (lane >= offset) {
                B = fmaf(A, b_prev, B);
                A *= a_prev;
            }
        }
        if (lane == kWarpSize - 1) {
            warp_a[warp] = A;
            warp_b[warp] = B;
        }
        __syncthreads();

        // 3. State entering this warp: carry pushed through the totals of the earlier warps.
        float state = carry;
        for (int w = 0; w < warp; ++w) {
            state = fmaf(warp_a[w], state, warp_b[w]);
        }
        // Exclusive prefix within the warp: the previous lane's inclusive map.
        float a_ex = __shfl_up_sync(kFullMask, A, 1);
        float b_ex = __shfl_up_sync(kFullMask, B, 1);
        if (lane == 0) {
            a_ex = 1.0f;
            b_ex = 0.0f;
        }
        state = fmaf(a_ex, state, b_ex);

        // 4. Replay the steps from the exact incoming state.
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            state = fmaf(av[i], state, bv[i]);
            if (t0 + i < seq_len) {
                h_row[t0 + i] = state;
            }
        }
        __syncthreads();  // everyone has read `carry` and the warp totals
        if (threadIdx.x == kThreads - 1) {
            carry = state;  // identity steps past the end leave the last real state unchanged
        }
        __syncthreads();
    }
}

}  // namespace

// Host launcher: a, b, h are [channels, seq_len] row-major device arrays, h0 is [channels].
cudaError_t launch_linear_scan(const float* a, const float* b, const float* h0, float* h,
                               int channels, int seq_len, cudaStream_t stream) {
    linear_scan_kernel<<<channels, kThreads, 0, stream>>>(a, b, h0, h, channels, seq_len);
    return cudaGetLastError();
}

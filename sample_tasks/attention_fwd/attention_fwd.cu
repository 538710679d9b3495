// Fused single-head attention forward, flash-attention style:
//   out = softmax(q @ k^T * softmax_scale) @ v        q, k, v, out: [seq, head_dim] bf16
//
// Never materialises the [seq_q, seq_k] score matrix. A block of kBlockM threads owns kBlockM
// query rows, one row per thread (q row, running max, running sum and the fp32 output accumulator
// live in registers). Keys and values are streamed through shared memory in tiles of kBlockN rows;
// after each tile the thread rescales what it has accumulated by exp(m_old - m_new) (online
// softmax). Exponentials use exp2f with log2(e) folded into the score scale.
// Requires seq_k to be a multiple of kBlockN (checked by the launcher).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace {

constexpr int kHeadDim = 64;
constexpr int kBlockM = 64;  // query rows per block (= threads per block)
constexpr int kBlockN = 64;  // keys per shared-memory tile
constexpr float kLog2e = 1.4426950408889634f;

__global__ void __launch_bounds__(kBlockM)
attention_fwd_kernel(const __nv_bfloat16* __restrict__ q,
                     const __nv_bfloat16* __restrict__ k,
                     const __nv_bfloat16* __restrict__ v,
                     __nv_bfloat16* __restrict__ out,
                     int seq_q,
                     int seq_k,
                     float softmax_scale) {
    __shared__ float k_tile[kBlockN][kHeadDim];
    __shared__ float v_tile[kBlockN][kHeadDim];

    const int row = blockIdx.x * kBlockM + threadIdx.x;
    const bool active = row < seq_q;
    const float scale_log2 = softmax_scale * kLog2e;

    float q_row[kHeadDim];
    float acc[kHeadDim];
#pragma unroll
    for (int d = 0; d < kHeadDim; ++d) {
        q_row[d] = active ? __bfloat162float(q[static_cast<size_t>(row) * kHeadDim + d]) * scale_log2
                          : 0.0f;
        acc[d] = 0.0f;
    }
    float row_max = -INFINITY;  // running max of the (log2-scaled) scores
    float row_sum = 0.0f;       // running sum of exp2(score - row_max)

    for (int kv0 = 0; kv0 < seq_k; kv0 += kBlockN) {
        // Whole block stages the next K and V tiles (all threads, including inactive rows).
        for (int idx = threadIdx.x; idx < kBlockN * kHeadDim; idx += kBlockM) {
            const int r = idx / kHeadDim;
            const int c = idx % kHeadDim;
            const size_t src = static_cast<size_t>(kv0 + r) * kHeadDim + c;
            k_tile[r][c] = __bfloat162float(k[src]);
            v_tile[r][c] = __bfloat162float(v[src]);
        }
        __syncthreads();

        if (active) {
            float scores[kBlockN];
            float tile_max = -INFINITY;
#pragma unroll 8
            for (int j = 0; j < kBlockN; ++j) {
                float s = 0.0f;
#pragma unroll
                for (int d = 0; d < kHeadDim; ++d) {
                    s = fmaf(q_row[d], k_tile[j][d], s);  // same address for all threads: broadcast
                }
                scores[j] = s;
                tile_max = fmaxf(tile_max, s);
            }

            const float new_max = fmaxf(row_max, tile_max);
            const float correction = exp2f(row_max - new_max);  // 0 on the first tile
            row_sum *= correction;
#pragma unroll
            for (int d = 0; d < kHeadDim; ++d) {
                acc[d] *= correction;
            }
#pragma unroll 4
            for (int j = 0; j < kBlockN; ++j) {
                const float p = exp2f(scores[j] - new_max);
                row_sum += p;
#pragma unroll
                for (int d = 0; d < kHeadDim; ++d) {
                    acc[d] = fmaf(p, v_tile[j][d], acc[d]);
                }
            }
            row_max = new_max;
        }
        __syncthreads();  // the tiles are overwritten by the next iteration
    }

    if (active) {
        const float inv_sum = 1.0f / row_sum;
#pragma unroll
        for (int d = 0; d < kHeadDim; ++d) {
            out[static_cast<size_t>(row) * kHeadDim + d] = __float2bfloat16_rn(acc[d] * inv_sum);
        }
    }
}

}  // namespace

// Host launcher: q [seq_q, 64], k and v [seq_k, 64], out [seq_q, 64]; bf16 row-major device arrays.
cudaError_t launch_attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, __nv_bfloat16* out, int seq_q, int seq_k,
                                 float softmax_scale, cudaStream_t stream) {
    if (seq_k % kBlockN != 0) {
        return cudaErrorInvalidValue;
    }
    const dim3 grid((seq_q + kBlockM - 1) / kBlockM);
    attention_fwd_kernel<<<grid, kBlockM, 0, stream>>>(q, k, v, out, seq_q, seq_k, softmax_scale);
    return cudaGetLastError();
}

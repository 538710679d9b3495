// 2-D transpose: out[c, r] = in[r, c] for a [rows, cols] float32 matrix.
//
// The classic shared-memory tile transpose: a 32x8 thread block moves a 32x32 tile. Reads of
// `in` and writes of `out` are both coalesced along rows; the tile is padded to 33 columns so the
// column-wise reads from shared memory do not hit the same bank.

#include <cuda_runtime.h>

namespace {

constexpr int kTileDim = 32;
constexpr int kBlockRows = 8;

__global__ void transpose2d_kernel(const float* __restrict__ in,
                                   float* __restrict__ out,
                                   int rows,
                                   int cols) {
    __shared__ float tile[kTileDim][kTileDim + 1];

    int x = blockIdx.x * kTileDim + threadIdx.x;  // column in `in`
    int y = blockIdx.y * kTileDim + threadIdx.y;  // row in `in`
    for (int j = 0; j < kTileDim; j += kBlockRows) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[static_cast<size_t>(y + j) * cols + x];
        }
    }
    __syncthreads();

    x = blockIdx.y * kTileDim + threadIdx.x;  // column in `out` (= row in `in`)
    y = blockIdx.x * kTileDim + threadIdx.y;  // row in `out` (= column in `in`)
    for (int j = 0; j < kTileDim; j += kBlockRows) {
        if (x < rows && y + j < cols) {
            out[static_cast<size_t>(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}

}  // namespace

// Host launcher: `in` is [rows, cols], `out` is [cols, rows], both row-major device arrays.
cudaError_t launch_transpose2d(const float* in, float* out, int rows, int cols,
                               cudaStream_t stream) {
    const dim3 block(kTileDim, kBlockRows);
    const dim3 grid((cols + kTileDim - 1) / kTileDim, (rows + kTileDim - 1) / kTileDim);
    transpose2d_kernel<<<grid, block, 0, stream>>>(in, out, rows, cols);
    return cudaGetLastError();
}

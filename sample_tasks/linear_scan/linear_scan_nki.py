"""NKI port of linear_scan.cu: h[c, t] = a[c, t] * h[c, t-1] + b[c, t], h[c, -1] = h0[c]
(new `nki` namespace, trn2).

The CUDA kernel needs a parallel prefix scan of affine maps because one thread per step is its unit
of parallelism. A NeuronCore has a scan instruction: with channels on the partitions and time along
the free axis, VectorE `tensor_tensor_scan` computes

    r[:, 0] = a[:, 0] * initial + b[:, 0],   r[:, i] = a[:, i] * r[:, i-1] + b[:, i]

for all 128 channels of a tile in one instruction, in fp32. Time is processed in chunks of T steps
(so the DMA of one chunk overlaps the scan of the previous one); the last column of each chunk's
result is the `initial` of the next, so the carried dependency is explicit and lives in SBUF.

Requires channels to be a multiple of 128 and seq_len a multiple of T.
"""

import nki
import nki.isa as nisa
import nki.language as nl

P = 128  # channels per tile
T = 512  # time steps per scan instruction


@nki.jit
def linear_scan_kernel(a, b, h0):
    channels, seq_len = a.shape
    n_chan_tiles = channels // P
    n_chunks = seq_len // T

    h = nl.ndarray((channels, seq_len), dtype=nl.float32, buffer=nl.shared_hbm)
    h0_col = h0.reshape((channels, 1))

    for c in range(n_chan_tiles):
        rows = slice(c * P, (c + 1) * P)
        carry = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=carry, src=h0_col[rows, :])

        for t in range(n_chunks):
            cols = slice(t * T, (t + 1) * T)
            a_tile = nl.ndarray((P, T), dtype=a.dtype, buffer=nl.sbuf)
            b_tile = nl.ndarray((P, T), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_tile, src=a[rows, cols])
            nisa.dma_copy(dst=b_tile, src=b[rows, cols])

            h_tile = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=h_tile, data0=a_tile, data1=b_tile, initial=carry,
                                    op0=nl.multiply, op1=nl.add)
            nisa.dma_copy(dst=h[rows, cols], src=h_tile)
            carry = h_tile[:, T - 1:T]  # state after the chunk's last step seeds the next chunk

    return h

"""NKI port of vector_add.cu: c = a + b over a flat float32 vector (new `nki` namespace, trn2, LNC=2).

The CUDA kernel hands one float4 to each thread of a grid-stride loop. On a NeuronCore the unit of
work is a tile of 128 partitions, so the flat vector is viewed as rows of F contiguous elements and
128 rows form one tile: every DMA then moves F*4 = 4 KiB per partition, enough to keep the DMA
engines near their peak, and one VectorE instruction adds a whole tile. The two physical cores of
the logical core (kernel[2]) each take one contiguous half of the row tiles.

Requires len(a) to be a multiple of 2 * 128 * F (the task's size is 1M elements).
"""

import nki
import nki.isa as nisa
import nki.language as nl

P = 128  # partitions per tile
F = 1024  # fp32 elements per partition per tile: 4 KiB contiguous per DMA row


@nki.jit
def vector_add_kernel(a, b):
    n = a.shape[0]
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)

    n_cores = nl.num_programs(axes=0)
    core = nl.program_id(axis=0)
    tiles_per_core = n // (n_cores * P * F)

    # Row views of the flat HBM vectors: row r holds elements [r*F, (r+1)*F).
    a_rows = a.reshape((n // F, F))
    b_rows = b.reshape((n // F, F))
    c_rows = c.reshape((n // F, F))

    for t in range(tiles_per_core):
        row0 = (core * tiles_per_core + t) * P
        # Tiles are declared inside the loop so consecutive iterations get their own buffers
        # and the loads of tile t+1 overlap the add and store of tile t.
        a_tile = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((P, F), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_rows[row0:row0 + P, :])
        nisa.dma_copy(dst=b_tile, src=b_rows[row0:row0 + P, :])

        c_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=c_rows[row0:row0 + P, :], src=c_tile)

    return c

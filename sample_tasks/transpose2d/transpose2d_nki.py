"""NKI port of transpose2d.cu: out = in.T for a [rows, cols] float32 matrix (legacy neuronxcc.nki
namespace, trn2).

There is no shared-memory tile to stage through: the idiomatic on-chip transpose is a TensorE
transpose (a matmul against the identity, bit-exact from NeuronCore-v3 on), which swaps the
partition and free axes of a 128x128 block and writes it to PSUM.

The input is loaded once as 128-row strips ([128, rows/128, cols] in SBUF; 6 KiB per partition for
the task's 512 x 384). For each 128-row block of the output, the four 128x128 transposes of its
column strip land side by side in one PSUM bank ([128, 512] fp32 = 2 KiB per partition), which is
evacuated with one copy and stored with one DMA of 2 KiB contiguous per partition.

Requires rows and cols to be multiples of 128 and rows <= 512 (one PSUM bank per output block).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

PSUM_BANK_FP32 = 512  # fp32 elements per partition in one PSUM bank


@nki.jit
def transpose2d_kernel(x):
    rows, cols = x.shape
    P = nl.tile_size.pmax
    assert rows % P == 0 and cols % P == 0, "rows and cols must be multiples of 128"
    assert rows <= PSUM_BANK_FP32, "one output row block must fit one PSUM bank"
    n_row_blocks = rows // P
    n_col_blocks = cols // P

    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)

    x_sb = nl.ndarray((nl.par_dim(P), n_row_blocks, cols), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(n_row_blocks):
        x_sb[:, i, :] = nl.load(x[nl.ds(i * P, P), :])

    for j in nl.affine_range(n_col_blocks):
        t_psum = nl.ndarray((P, rows), dtype=x.dtype, buffer=nl.psum)  # transpose keeps the dtype
        for i in nl.affine_range(n_row_blocks):
            t_psum[:, nl.ds(i * P, P)] = nisa.nc_transpose(x_sb[:, i, nl.ds(j * P, P)],
                                                         engine=nisa.tensor_engine)
        t_sb = nisa.tensor_copy(t_psum, dtype=x.dtype)
        nl.store(out[nl.ds(j * P, P), :], value=t_sb)

    return out

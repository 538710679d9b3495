"""NKI port of vocab_softmax.cu: probabilities = softmax(logits) over an 8192-entry vocabulary
(legacy neuronxcc.nki namespace, trn2).

A 8192-wide fp32 row is 32 KiB, which fits one partition's SBUF easily, so the CUDA online-softmax
machinery (running max/sum pairs merged across threads) is unnecessary: 128 rows are loaded per tile
and the row statistics are plain free-axis reductions.
  VectorE  tensor_reduce      -max per row
  ScalarE  activation_reduce  exp(x - max) and its row sum in one pass
  VectorE  reciprocal         1 / sum
  ScalarE  activation(copy)   exp * (1/sum), the per-row scale applied by the activation's multiplier
Requires the row count to be a multiple of 128.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def vocab_softmax_kernel(logits):
    n_rows, vocab = logits.shape
    P = nl.tile_size.pmax
    assert n_rows % P == 0, "rows must be a multiple of 128"
    probs = nl.ndarray((n_rows, vocab), dtype=logits.dtype, buffer=nl.shared_hbm)

    for t in nl.affine_range(n_rows // P):
        rows = nl.ds(t * P, P)
        x_tile = nl.load(logits[rows, :])

        neg_max = nisa.tensor_reduce(op=nl.max, data=x_tile, axis=(1,), negate=True, keepdims=True)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        exp_tile = nisa.activation_reduce(op=nl.exp, data=x_tile, bias=neg_max, reduce_op=nl.add,
                                          reduce_res=row_sum)
        inv_sum = nisa.reciprocal(row_sum)
        p_tile = nisa.activation(op=nl.copy, data=exp_tile, scale=inv_sum, dtype=logits.dtype)
        nl.store(probs[rows, :], value=p_tile)

    return probs

"""NKI port of attention_fwd.cu: out = softmax(q @ k.T * softmax_scale) @ v for one head, with the
flash-attention online softmax (legacy neuronxcc.nki namespace, trn2).

Layout. TensorE contracts over partitions, so the kernel takes q and k transposed ([head_dim, seq];
the manifest declares the layout) and v as is ([seq, head_dim]):
  scores  S[128 q, 512 k] = nc_matmul(stationary = q_t tile [d, 128], moving = k_t tile [d, 512])
  output  O[128 q, d]    += nc_matmul(stationary = P^T block [128 k, 128 q], moving = v block [128 k, d])
P is transposed on TensorE in 128x128 blocks between the two.

Per query tile (128 rows on the partitions) and key tile (512 keys, one PSUM bank of scores):
  VectorE  tensor_reduce          tile row max (raw scores, read straight from PSUM)
  VectorE  tensor_scalar          m_new = max(m_old, scale * tile_max)
  ScalarE  activation_reduce      P = exp(scale * S - m_new) (bf16) and its fp32 row sum, one pass
  ScalarE  activation             correction = exp(m_old - m_new)
  VectorE  scalar_tensor_tensor   l = l * correction + row sum
  TensorE  4x transpose + 4x matmul accumulating P @ V in one PSUM tile
  VectorE  scalar_tensor_tensor   acc = acc * correction + P @ V
The running max, sum and fp32 accumulator carry across key tiles, so that loop is sequential_range;
query tiles are independent (affine_range). K^T and V are loaded once and reused by every query tile.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

Q_TILE = 128  # queries per tile: the partition count
KV_TILE = 512  # keys per score tile: one PSUM bank of fp32
NEG_INIT = -30000.0  # initial running max: far below any scaled score, exp() of it is 0


@nki.jit
def attention_fwd_kernel(q_t, k_t, v, softmax_scale):
    head_dim, seq_q = q_t.shape
    _, seq_k = k_t.shape
    P = nl.tile_size.pmax
    assert head_dim <= P, "head_dim must fit on the partitions"
    assert seq_q % Q_TILE == 0 and seq_k % KV_TILE == 0, "sequence lengths must be tile multiples"
    n_q_tiles = seq_q // Q_TILE
    n_kv_tiles = seq_k // KV_TILE
    n_sub = KV_TILE // P  # 128-key blocks per key tile
    n_v_blocks = seq_k // P

    out = nl.ndarray((seq_q, head_dim), dtype=v.dtype, buffer=nl.shared_hbm)

    k_sb = nl.load(k_t)  # [head_dim, seq_k]
    v_sb = nl.ndarray((nl.par_dim(P), n_v_blocks, head_dim), dtype=v.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(n_v_blocks):
        v_sb[:, b, :] = nl.load(v[nl.ds(b * P, P), :])

    for qi in nl.affine_range(n_q_tiles):
        q_sb = nl.load(q_t[:, nl.ds(qi * Q_TILE, Q_TILE)])  # [head_dim, 128]

        run_max = nl.full((Q_TILE, 1), NEG_INIT, dtype=nl.float32, buffer=nl.sbuf)
        run_sum = nl.zeros((Q_TILE, 1), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.zeros((Q_TILE, head_dim), dtype=nl.float32, buffer=nl.sbuf)

        for kj in nl.sequential_range(n_kv_tiles):
            s_psum = nisa.nc_matmul(q_sb, k_sb[:, nl.ds(kj * KV_TILE, KV_TILE)])

            tile_max = nisa.tensor_reduce(op=nl.max, data=s_psum, axis=(1,), keepdims=True)
            new_max = nisa.tensor_scalar(data=tile_max, op0=nl.multiply, operand0=softmax_scale,
                                         op1=nl.maximum, operand1=run_max)
            neg_max = nisa.tensor_scalar(data=new_max, op0=nl.multiply, operand0=-1.0)

            tile_sum = nl.ndarray((Q_TILE, 1), dtype=nl.float32, buffer=nl.sbuf)
            p = nisa.activation_reduce(op=nl.exp, data=s_psum, scale=softmax_scale, bias=neg_max,
                                       reduce_op=nl.add, reduce_res=tile_sum, dtype=nl.bfloat16)

            correction = nisa.activation(op=nl.exp, data=run_max, bias=neg_max)
            run_sum[...] = nisa.scalar_tensor_tensor(data=run_sum, op0=nl.multiply,
                                                     operand0=correction, op1=nl.add,
                                                     operand1=tile_sum)
            run_max[...] = nisa.tensor_copy(new_max)

            pv_psum = nl.zeros((Q_TILE, head_dim), dtype=nl.float32, buffer=nl.psum)
            for s in nl.affine_range(n_sub):
                p_t_psum = nisa.nc_transpose(p[:, nl.ds(s * P, P)], engine=nisa.tensor_engine)
                p_t = nisa.tensor_copy(p_t_psum, dtype=nl.bfloat16)  # [128 keys, 128 queries]
                pv_psum += nisa.nc_matmul(p_t, v_sb[:, kj * n_sub + s, :])

            acc[...] = nisa.scalar_tensor_tensor(data=acc, op0=nl.multiply, operand0=correction,
                                                 op1=nl.add, operand1=pv_psum)

        inv_sum = nisa.reciprocal(run_sum)
        o_tile = nisa.tensor_scalar(data=acc, op0=nl.multiply, operand0=inv_sum, dtype=v.dtype)
        nl.store(out[nl.ds(qi * Q_TILE, Q_TILE), :], value=o_tile)

    return out

"""Three selective-scan (Mamba-v1 SSM) kernels, written by us for cost-model calibration from the
description of AWS's Fused Mamba tutorial (nki-spec.md §9.4, source [MAMBA]); fp32, legacy namespace.

Inputs: delta, u [batch, channels, seq]; A [channels, state]; B, C [batch, state, seq]. Output
[batch, channels, seq] = sum over states of C * scan(exp(delta * A), delta * u * B). Channels go on
the partitions (128 per tile), the sequence on the free axis. Per (batch, state, channel tile) the
work is one ScalarE activation (exp with A as the per-partition scale), three VectorE multiplies
against the sequence-long tiles (B and C broadcast across partitions), one VectorE scan and one
accumulation.

1. `v1`  - states outside channel tiles: delta and u are loaded again for every state; the
           accumulators of all channel tiles live in SBUF at once and are stored at the end;
2. `v2`  - loop order swapped: each channel tile loads delta and u once and runs every state on
           them; one accumulator per channel tile, stored as soon as it is complete;
3. `v3`  - v2 with the sequence tiled by 512 inside the state loop: each tile's scan starts from
           the previous tile's last column, so the live tiles stay 2 KiB per partition.

Import after `nkitui.emulator.install()` (or on a host with the Neuron SDK).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

P = 128  # channels per tile (partitions)
SEQ_TILE = 512  # v3's sequence tile (one PSUM bank of fp32 per broadcast row)


def _state_term(delta_t, u_t, a_col, b_row, c_row, width, initial=0.0):
    """C * scan(exp(delta * A), delta * u * B) for one state on one tile; returns (term, scan)."""
    decay = nisa.activation(op=nl.exp, data=delta_t, scale=a_col)  # ScalarE: exp(delta * A)
    du = nisa.tensor_tensor(delta_t, u_t, op=nl.multiply)
    dbu = nisa.tensor_tensor(du, b_row.broadcast_to((P, width)), op=nl.multiply)
    scan = nisa.tensor_tensor_scan(decay, dbu, initial=initial, op0=np.multiply, op1=np.add)
    term = nisa.tensor_tensor(scan, c_row.broadcast_to((P, width)), op=nl.multiply)
    return term, scan


@nki.jit
def mamba_v1(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    states = A.shape[1]
    tiles = channels // P
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        acc = nl.zeros((tiles, nl.par_dim(P), seq), dtype=delta.dtype, buffer=nl.sbuf)
        for s in nl.affine_range(states):
            for t in nl.affine_range(tiles):
                rows = slice(t * P, (t + 1) * P)
                delta_t = nl.load(delta[b, rows, 0:seq])
                u_t = nl.load(u[b, rows, 0:seq])
                a_col = nl.load(A[rows, s])
                b_row = nl.load(B[b, s:s + 1, 0:seq])
                c_row = nl.load(C[b, s:s + 1, 0:seq])
                term, _ = _state_term(delta_t, u_t, a_col, b_row, c_row, seq)
                acc[t, 0:P, 0:seq] += term
        for t in nl.affine_range(tiles):
            nl.store(out[b, t * P:(t + 1) * P, 0:seq], acc[t, 0:P, 0:seq])
    return out


@nki.jit
def mamba_v2(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for t in nl.affine_range(channels // P):
            rows = slice(t * P, (t + 1) * P)
            acc = nl.zeros((nl.par_dim(P), seq), dtype=delta.dtype, buffer=nl.sbuf)
            delta_t = nl.load(delta[b, rows, 0:seq])
            u_t = nl.load(u[b, rows, 0:seq])
            for s in nl.affine_range(states):
                a_col = nl.load(A[rows, s])
                b_row = nl.load(B[b, s:s + 1, 0:seq])
                c_row = nl.load(C[b, s:s + 1, 0:seq])
                term, _ = _state_term(delta_t, u_t, a_col, b_row, c_row, seq)
                acc[0:P, 0:seq] += term
            nl.store(out[b, rows, 0:seq], acc[0:P, 0:seq])
    return out


@nki.jit
def mamba_v3(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    states = A.shape[1]
    width = min(SEQ_TILE, seq)
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for t in nl.affine_range(channels // P):
            rows = slice(t * P, (t + 1) * P)
            acc = nl.zeros((nl.par_dim(P), seq), dtype=delta.dtype, buffer=nl.sbuf)
            delta_t = nl.load(delta[b, rows, 0:seq])
            u_t = nl.load(u[b, rows, 0:seq])
            for s in nl.affine_range(states):
                a_col = nl.load(A[rows, s])
                carry = nl.zeros((P, 1), dtype=delta.dtype, buffer=nl.sbuf)
                for j in nl.static_range(seq // width):
                    cols = slice(j * width, (j + 1) * width)
                    b_row = nl.load(B[b, s:s + 1, cols])
                    c_row = nl.load(C[b, s:s + 1, cols])
                    term, scan = _state_term(delta_t[0:P, cols], u_t[0:P, cols], a_col, b_row, c_row, width,
                                             initial=carry)
                    carry[...] = scan[0:P, width - 1]
                    acc[0:P, cols] += term
            nl.store(out[b, rows, 0:seq], acc[0:P, 0:seq])
    return out


KERNELS = {"v1": mamba_v1, "v2": mamba_v2, "v3": mamba_v3}


def reference(delta, u, A, B, C):
    """numpy float64 reference of the same computation (for the correctness check at small shapes)."""
    delta, u, A, B, C = (np.asarray(x, dtype=np.float64) for x in (delta, u, A, B, C))
    batch, channels, seq = delta.shape
    out = np.zeros((batch, channels, seq))
    for s in range(A.shape[1]):
        decay = np.exp(delta * A[None, :, s, None])
        dbu = delta * u * B[:, None, s, :]
        state = np.zeros((batch, channels))
        for i in range(seq):
            state = decay[..., i] * state + dbu[..., i]
            out[..., i] += C[:, None, s, i] * state
    return out

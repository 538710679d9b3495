"""Tutorial-style legacy kernels run unchanged and match numpy within their authors' tolerances."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nkitui import emulator
from tests.emulator import tutorial_kernels as tk

BF16 = ml_dtypes.bfloat16


def test_tensor_add_spmd(rng):
    a = rng.random((256, 1024)).astype(np.float16)
    b = rng.random((256, 1024)).astype(np.float16)
    with emulator.trace() as tr:
        out = tk.add_tiles_spmd(a, b)
    np.testing.assert_allclose(out.astype(np.float64), (a + b).astype(np.float64), atol=1e-4, rtol=1e-2)
    assert tr.meta["launches"][0]["grid"] == [2, 2]
    assert len({i.program for i in tr}) == 4


def test_transpose_packed_int8():
    p, rows, cols = 5, 3, 4
    a = np.arange(p * rows * cols, dtype=np.int8).reshape(p, rows * cols)
    out = tk.transpose_packed(a, (rows, cols))
    np.testing.assert_array_equal(out, a.reshape(p, rows, cols).transpose(0, 2, 1).reshape(p, rows * cols))


def test_avg_pool2d_baremetal_output_argument(nki):
    image = np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6).astype(BF16)
    pooled = np.zeros((2, 3, 3), dtype=BF16)
    result = nki.baremetal(tk.avg_pool2d)(image, pooled, 2)
    assert result is None
    golden = image.astype(np.float32).reshape(2, 3, 2, 3, 2).mean(axis=(2, 4)).astype(BF16)
    np.testing.assert_array_equal(pooled, golden)


def test_rms_norm_partial_tile(rng):
    x = rng.random((250, 512), dtype=np.float32)
    w = rng.random(512, dtype=np.float32)
    out = tk.rms_norm(x, w)
    golden = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True)) * w
    np.testing.assert_allclose(out, golden, atol=1e-4, rtol=1e-2)


@pytest.mark.parametrize("kernel", [tk.layer_norm_nl, tk.layer_norm_bn], ids=["nl", "bn_stats"])
def test_layer_norm(kernel, rng):
    x = rng.random((300, 1000), dtype=np.float32)
    gamma = rng.random(1000, dtype=np.float32)
    beta = rng.random(1000, dtype=np.float32)
    with emulator.trace() as tr:
        out = kernel(x, gamma, beta, 1e-5)
    x64 = x.astype(np.float64)
    golden = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(out, golden, atol=1e-3, rtol=1e-2)
    if kernel is tk.layer_norm_bn:
        assert sum(i.opcode == "bn_stats" for i in tr) == 3 * 2  # 3 row tiles x 2 chunks of <= 512
        assert sum(i.opcode == "bn_aggr" for i in tr) == 3


@pytest.mark.parametrize("shape", [(2, 5), (200, 300)])
def test_softmax_rows(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    out = tk.softmax_rows(x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), atol=1e-5, rtol=1e-5)


def test_blocked_matmul_bf16(rng):
    lhsT = rng.random((512, 256)).astype(BF16)
    rhs = rng.random((512, 1024)).astype(BF16)
    with emulator.trace() as tr:
        out = tk.matmul_blocked(lhsT, rhs)
    golden = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), golden, atol=1e-4, rtol=1e-2)
    assert out.dtype == BF16
    assert "diagnostics" not in tr.meta


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal, rng):
    seq, d = 256, 64
    q, k, v = (rng.random((seq, d), dtype=np.float32) for _ in range(3))
    out = tk.attention(q, k, v, causal=causal)
    s = (q.astype(np.float64) @ k.T) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((seq, seq))) > 0, s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    golden = (p / p.sum(1, keepdims=True)) @ v
    np.testing.assert_allclose(out, golden, atol=1e-2)


def test_fused_mamba_scan(rng):
    batch, channels, seq, states = 1, 128, 1024, 2
    delta = rng.random((batch, channels, seq), dtype=np.float32) * 0.1
    u = rng.random((batch, channels, seq), dtype=np.float32)
    A = -rng.random((channels, states), dtype=np.float32)
    B = rng.random((batch, states, seq), dtype=np.float32)
    C = rng.random((batch, states, seq), dtype=np.float32)
    with emulator.trace() as tr:
        out = tk.mamba_scan(delta, u, A, B, C)
    golden = np.zeros((batch, channels, seq))
    for b in range(batch):
        for s in range(states):
            decay = np.exp(delta[b] * A[:, s:s + 1].astype(np.float64))
            drive = delta[b] * u[b] * B[b, s]
            h = np.zeros(channels)
            for t in range(seq):
                h = decay[:, t] * h + drive[:, t]
                golden[b, :, t] += h * C[b, s, t]
    np.testing.assert_allclose(out, golden, atol=1e-2, rtol=1e-2)
    assert sum(i.opcode == "tensor_tensor_scan" for i in tr) == states * 2  # two 512-step chunks

"""Numpy reference for attention_fwd: single-head scaled dot-product attention, in float64 from the
bf16 inputs (no causal mask)."""

import numpy as np


def attention_fwd(q: np.ndarray, k: np.ndarray, v: np.ndarray, softmax_scale: float) -> np.ndarray:
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    scores = (q64 @ k64.T) * softmax_scale
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v64

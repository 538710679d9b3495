"""Numpy reference for vocab_softmax: softmax over the last axis, in float64."""

import numpy as np


def vocab_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

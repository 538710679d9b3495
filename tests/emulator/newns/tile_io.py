"""Whole-tensor moves between HBM and SBUF for the nki-namespace test kernels (call inside a kernel)."""

from __future__ import annotations

import nki.isa as nisa
import nki.language as nl


def load(src, dtype=None):
    """A new SBUF tile holding the HBM tensor `src` (cast to `dtype` by the DMA when given)."""
    t = nl.ndarray(src.shape, dtype=dtype or src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


def store(t, dtype=None):
    """A new shared-HBM tensor holding the tile `t` (a PSUM tile is first copied to SBUF)."""
    out = nl.ndarray(t.shape, dtype=dtype or t.dtype, buffer=nl.shared_hbm)
    if t.buffer == nl.psum:
        sb = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=t)
        t = sb
    nisa.dma_copy(dst=out, src=t)
    return out

"""`nki.compiler.CompileConfig` / `Allocation`: NKI allocation (LINEAR) without fallback fails on an
out-of-memory where the default flow spills; the documented configuration errors."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.compiler import Allocation, CompileConfig
from nkitui import emulator

F32 = np.float32


def _four_live_tiles(x):
    # four (128, 16384) fp32 tiles (64 KiB per partition each) live together: 256 KiB per partition,
    # over trn2's 208 KiB usable, so the default flow spills
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for _ in range(4):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tiles.append(t)
    for t in tiles[1:]:
        nisa.tensor_tensor(dst=tiles[0], data1=tiles[0], data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=tiles[0])
    return out


X = np.ones((128, 16384), F32)


def _run(**jit_kwargs):
    k = nki.jit(_four_live_tiles, **jit_kwargs)
    with emulator.trace(target="trn2") as tr:
        out = k(X)
    return out, [d["rule"] for d in tr.meta.get("diagnostics", [])]


@pytest.mark.parametrize("config", [None, CompileConfig(), CompileConfig(allocation=Allocation.LINEAR)])
def test_the_default_flow_and_nki_allocation_with_fallback_spill(config, recwarn):
    out, rules = _run(**({"compile_config": config} if config is not None else {}))
    np.testing.assert_array_equal(out, 4 * X)
    assert rules == ["spill"]


def test_nki_allocation_without_fallback_fails_on_out_of_memory():
    config = CompileConfig(allocation=Allocation.LINEAR, nki_alloc_fallback=False)
    with pytest.raises(emulator.CapacityError, match="SBUF capacity exceeded") as info:
        _run(compile_config=config)
    assert "Allocation.LINEAR" in str(info.value) and "nki_alloc_fallback=False" in str(info.value)
    assert info.value.file == "test_compile_config.py"


def test_nki_allocation_without_fallback_runs_a_kernel_that_fits():
    @nki.jit(compile_config=CompileConfig(allocation=Allocation.LINEAR, nki_alloc_fallback=False))
    def add_one(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(128 * 8, dtype=F32).reshape(128, 8)
    np.testing.assert_array_equal(add_one(x), x + 1)
    assert "LINEAR" in repr(add_one.compiler_options["compile_config"])


def test_configuration_errors_are_the_documented_ones():
    with pytest.raises(ValueError, match="scheduling=True needs allocation=Allocation.LINEAR"):
        CompileConfig(scheduling=True)
    with pytest.raises(TypeError, match="must be an nki.compiler.Allocation"):
        CompileConfig(allocation="linear")  # type: ignore[arg-type]  # the wrong type on purpose
    assert CompileConfig(allocation=Allocation.LINEAR, scheduling=True, prefetch_auto=True).options == {
        "prefetch_auto": True}

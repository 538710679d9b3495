"""The emulator's bf16/fp8/MX types are made the first time something asks for one, not when the
emulator is imported: importing ml_dtypes costs about 0.65 s of CPU (numpy registers its ufunc loops
one by one), which every evaluation of a float32 task paid in its evaluator for nothing.

Checked in a new interpreter (a real child process), where nothing has imported ml_dtypes yet."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from nkitui import emulator
    from nkitui.emulator import dtypes as dt

    emulator.install(force=True)
    import nki, nki.isa as nisa, nki.language as nl
    import neuronxcc.nki as lnki, neuronxcc.nki.language as lnl

    @nki.jit
    def add_new(a, b):
        c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        tc = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)
        nisa.dma_copy(dst=c, src=tc)
        return c

    @lnki.jit
    def add_legacy(a, b):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, lnl.add(lnl.load(a), lnl.load(b)))
        return out

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    assert np.array_equal(add_new(a, a), 2 * a) and np.array_equal(add_legacy(a, a), 2 * a)
    assert dt.dtype_of("float32") is dt.float32 and dt.dtype_of(np.float16) is dt.float16
    print("float32 kernels ran; ml_dtypes imported:", "ml_dtypes" in sys.modules)

    import ml_dtypes  # now asked for: every spelling gives the one type, as an eager import did
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert nl.bfloat16 == bf16 and lnl.bfloat16 == bf16 and nl.bfloat16 == "bfloat16"
    assert dt.dtype_of("bf16") is dt.bfloat16 is dt.dtype_of(bf16) is dt.dtype_of(nl.bfloat16)
    assert dt.bfloat16.np == bf16 and dt.bfloat16.rank == 2
    assert dt.dtype_of(np.dtype(ml_dtypes.float8_e5m2)) is dt.float8_e5m2
    assert dt.promote(dt.float8_e4m3, dt.float8_e5m2) is dt.bfloat16
    assert str(nl.float8_e4m3fn_x4) == "float8_e4m3fn_x4" and dt.dtype_of("float8_e4m3fn_x4").public is nl.float8_e4m3fn_x4
    assert nl.float8_e8m0fnu == np.dtype(ml_dtypes.float8_e8m0fnu)
    assert lnl.bfp16.min == float(ml_dtypes.finfo(ml_dtypes.bfloat16).min) and nl.bfp16.nki_dtype is dt.bfloat16
    assert "bfloat16" in dir(nl) and "float8_e4m3fn" in dir(lnl)
    b = add_new(a.astype(bf16), a.astype(bf16))
    assert b.dtype == bf16 and np.array_equal(b.astype(np.float32), (2 * a).astype(bf16).astype(np.float32))
    print("narrow types made on first use")
""")


def test_a_float32_kernel_never_imports_ml_dtypes_and_a_narrow_type_is_made_when_asked_for():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "float32 kernels ran; ml_dtypes imported: False" in done.stdout, done.stdout
    assert "narrow types made on first use" in done.stdout

"""Launch forms and module surface of the nki namespace: nki.jit, nki.simulate, nki.cpu_simulate,
targets from NEURON_PLATFORM_TARGET_OVERRIDE / NKI_NC_VERSION / platform_target, the module
names test suites import, and the documented "not available" errors."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator

F32 = np.float32
REPO = Path(__file__).resolve().parents[2]


@nki.jit
def scale_rows(a, factor: float = 2.0):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
    nisa.dma_copy(dst=out, src=t)
    return out


def plain_kernel(a, factor: float = 3.0):  # a kernel function handed to the harness undecorated
    return scale_rows.func(a, factor)


def test_jit_forms_and_simulate_entries(rng):
    a = rng.random((16, 8)).astype(F32)
    assert np.array_equal(scale_rows(a), a * 2)
    assert np.array_equal(nki.jit(platform_target="trn2")(scale_rows.func)(a, factor=4.0), a * 4)
    assert np.array_equal(nki.simulate(scale_rows)(a), a * 2)
    assert np.array_equal(nki.simulate(scale_rows)[1](a=a, factor=5.0), a * 5)
    assert np.array_equal(nki.cpu_simulate(plain_kernel)[2](a=a), a * 3)  # nki-library's simulation call
    assert isinstance(scale_rows(a), np.ndarray)


@pytest.mark.parametrize(("var", "value", "expect"), [("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1", "trn1"),
                                                      ("NEURON_PLATFORM_TARGET_OVERRIDE", "gen4", "trn3"),
                                                      ("NKI_NC_VERSION", "gen3", "trn2")])
def test_target_follows_the_environment_at_launch(monkeypatch, var, value, expect):
    seen = {}

    @nki.jit
    def k(a):
        seen["version"] = nisa.get_nc_version()
        seen["sbuf"] = nl.tile_size.sbuf_size_bytes
        return a

    monkeypatch.setenv(var, value)
    k(np.zeros(2, F32))
    assert k.last_run.options["target"] == expect
    assert seen["version"] == {"trn1": nisa.nc_version.gen2, "trn2": nisa.nc_version.gen3,
                               "trn3": nisa.nc_version.gen4}[expect]
    assert seen["sbuf"] == {"trn1": 192, "trn2": 224, "trn3": 256}[expect] * 1024


def test_platform_target_and_bad_target_names(monkeypatch):
    @nki.jit(platform_target="trn3")
    def k(a):
        return a

    k(np.zeros(2, F32))
    assert k.last_run.options["target"] == "trn3"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(emulator.KernelArgumentError, match="trn9"):
        k(np.zeros(2, F32))


def test_trn1_limits_apply(monkeypatch):
    @nki.jit
    def k(a):
        t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        u = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0, engine=nisa.scalar_engine)
        return a

    k(np.zeros((4, 4), F32))  # trn2: ScalarE tensor_scalar exists
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with pytest.raises(emulator.EngineOpError, match="NeuronCore-v3"):
        k(np.zeros((4, 4), F32))


def test_legacy_only_launchers_are_not_available():
    for name in ("baremetal", "benchmark", "profile", "simulate_kernel"):
        with pytest.raises(emulator.UnsupportedError, match=f"nki.{name} is not available in the nki namespace"):
            getattr(nki, name)(scale_rows)


def test_module_names_a_cpu_simulator_test_suite_swaps_in():
    for name in ("nki", "nki.language", "nki.isa", "nki.isa.constants", "nki.typing", "nki.compiler",
                 "nki.dtype", "nki.tensor", "nki.collectives"):
        mod = importlib.import_module(name)
        assert mod.__nkitui_emulator__
    from nki.isa.constants import dge_mode, oob_mode  # noqa: F401
    from nki.isa import sendrecv  # noqa: F401
    from nki.language import NKIObject  # noqa: F401
    import nki.dtype as nd
    import nki.tensor as nt

    assert nd.bfloat16 == nl.bfloat16
    assert np.array_equal(nt.identity(3, dtype=nl.int8) + 1, np.eye(3) + 1)


def test_install_in_a_fresh_process_makes_nki_importable():
    prog = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(REPO)!r})
        from nkitui import emulator
        emulator.install()
        import numpy as np
        import nki, nki.language as nl, nki.isa as nisa
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=a)
            return out
        print(k(np.arange(4, dtype=np.float32)).tolist())
        emulator.uninstall()
        print("nki" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[0.0,", "1.0,", "2.0,", "3.0]", "False"]


def test_trace_contract_is_the_same_as_part_one(rng):
    a = rng.random((128, 64)).astype(F32)
    with emulator.trace() as tr:
        scale_rows(a)
    assert [i.opcode for i in tr.instructions] == ["dma_copy", "tensor_scalar", "dma_copy"]
    dma = tr.instructions[0]
    assert dma.engine == "dma" and dma.meta["api"] == "nisa.dma_copy" and dma.meta["src"] == "hbm"
    assert dma.meta["contiguous_bytes"] == a.nbytes and dma.hbm_read == a.nbytes  # one contiguous run
    ts = tr.instructions[1]
    assert ts.meta == {"api": "nisa.tensor_scalar", "op0": "multiply", "op1": None}
    assert ts.file == "test_launch.py" and ts.partitions == 128 and ts.free == 64
    assert tr.meta["launches"][-1]["kernel"] == "scale_rows"


def test_shape_only_mode():
    @nki.jit
    def tiled(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in range(a.shape[0] // 128):
            t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])
            nisa.activation(dst=t, op=nl.exp, data=t)
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
        return out

    with emulator.trace(execute=False) as tr:
        out = tiled(emulator.ShapeDtype((4096, 512), "bfloat16"))
    assert isinstance(out, emulator.ShapeDtype) and out.shape == (4096, 512)
    assert len(tr.instructions) == 3 * 32
    assert tr.instructions[1].in_dtypes == ("bfloat16",)


def test_tile_size_constants(monkeypatch):
    seen = {}

    @nki.jit
    def k(a):
        ts = nl.tile_size
        seen.update(pmax=ts.pmax, psum_fmax=ts.psum_fmax, stat=ts.gemm_stationary_fmax, mov=ts.gemm_moving_fmax,
                    bn=ts.bn_stats_fmax, banks=ts.psum_num_banks, bank_bytes=ts.psum_bank_fmax_bytes)
        return a

    k(np.zeros(2, F32))
    assert seen == {"pmax": 128, "psum_fmax": 512, "stat": 128, "mov": 512, "bn": 512, "banks": 8,
                    "bank_bytes": 2048}
    monkeypatch.setenv("NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE", "true")
    k(np.zeros(2, F32))
    assert seen["banks"] == 7


def test_errors_name_the_kernel_line():
    @nki.jit
    def k(a):
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        t = nl.ndarray((128, 600), dtype=nl.float32, buffer=nl.sbuf)
        ps = nl.ndarray((128, 600), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps, s, t)  # moving free size 600 > 512
        return a

    with pytest.raises(emulator.MatmulShapeError) as e:
        k(np.zeros(2, F32))
    assert "exceeds 512" in str(e.value) and str(e.value).endswith(f"test_launch.py:{e.value.line}")


def test_private_hbm_outputs_only_from_single_core_launches(rng):
    """`nl.hbm` is private HBM, visible to its kernel instance (issue #19 / #16 item 5: accepted as a
    result); with kernel[2] each core has its own, so a multi-core result must be shared HBM."""
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = rng.random((4, 4)).astype(F32)
    assert np.array_equal(k(a), a)
    assert np.array_equal(k[1](a), a)
    with emulator.options(target="trn2"):
        with pytest.raises(emulator.KernelArgumentError, match="must be allocated with buffer=nl.shared_hbm|"
                                                                 "allocate outputs of multi-core launches"):
            k[2](a)

    @nki.jit
    def returns_input(a):
        return a

    a = rng.random((4, 4)).astype(F32)
    assert np.array_equal(returns_input(a), a)

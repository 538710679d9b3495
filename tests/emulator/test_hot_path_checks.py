"""The per-instruction fast paths (issue #19, "the emulator benchmark ratios do not get worse") skip work only
where nothing depends on it: the replayable log's wrappers are in the call path while a log is open, the cells'
device-memory check is on in a process whose device memory is protected, and SBUF live ranges and provenance
come out the same whether a log is open or not."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nkitui import emulator
from nkitui.emulator import engine, memory, replay, replaylog
from nkitui.emulator.engine import vector
from tests.helpers.emulator_session import install_for_session

install_for_session()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402


@nki.jit
def scaled(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in nl.sequential_range(3):
        t = nisa.tensor_scalar(t, np.add, 1.0)
    nl.store(out, t)
    return out


@nki.jit
def kept_then_read(x):
    """Three (128, 16384) fp32 tiles (64 KiB per partition each) written before any is stored: 192 KiB live,
    over trn1's 176 KiB usable, so the compiler spills."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    keep = [nl.multiply(nl.load(x[i]), 2.0) for i in range(3)]
    for i in range(3):
        nl.store(out[i], value=keep[i])
    return out


def test_the_log_wrappers_are_in_the_call_path_exactly_while_a_log_is_open():
    raw = replaylog.REGISTRY["vector.tensor_scalar"]
    assert replaylog.active() is None
    assert engine.tensor_scalar is raw and vector.tensor_scalar is raw  # no log: the engine's own function
    assert not replaylog.wrappers_installed()
    x = np.ones((128, 4), np.float32)
    with replaylog.recording([x]) as rec, emulator.options(target="trn2", precise=True):
        assert replaylog.wrappers_installed()
        assert engine.tensor_scalar is not raw and engine.tensor_scalar.__wrapped_instruction__ == "vector.tensor_scalar"
        with replaylog.recording([x]):  # a nested log keeps them in place when it closes
            pass
        assert replaylog.wrappers_installed()
        y = scaled(x)
    assert not replaylog.wrappers_installed() and engine.tensor_scalar is raw
    np.testing.assert_array_equal(y, x + 3)
    log = replay.unpack(replaylog.pack(rec, {"y": rec.output_view(y)}))
    assert _names(log) == ["dma.dma_copy"] + ["vector.tensor_scalar"] * 3 + ["dma.dma_copy"]
    assert replay.first_difference({"y": y}, replay.replay(log, [x], target="trn2", precise=True)) is None


def _names(log: replay.Log) -> list[str]:
    p = log.parsed
    pos, names = 0, []
    while pos < len(p.stream):
        t = p.templates[p.stream[pos]]
        names.append(t.name)
        pos += 1 + len(t.ndims)
    return names


def test_a_log_opened_in_one_thread_records_while_it_is_open_and_not_after():
    x = np.ones((128, 4), np.float32)
    with replaylog.recording([x]) as rec, emulator.options(target="trn2"):
        scaled(x)
    counted = rec.count
    assert counted >= 5  # the load, three tensor_scalar, the store
    with emulator.options(target="trn2"):
        scaled(x)  # no log open: nothing more is recorded in the closed one
    assert rec.count == counted


@pytest.mark.parametrize("log_open", [False, True])
def test_sbuf_live_ranges_and_the_spill_are_the_same_with_and_without_a_log(log_open):
    x = (np.arange(3 * 128 * 16384, dtype=np.float32) % 13).reshape(3, 128, 16384)
    with emulator.options(target="trn1"), emulator.trace() as tr:
        with pytest.warns(emulator.NKIEmulatorWarning, match="would spill"):
            if log_open:
                with replaylog.recording([x]):
                    out = kept_then_read(x)
            else:
                out = kept_then_read(x)
    np.testing.assert_array_equal(out, 2 * x)
    (diag,) = tr.meta["diagnostics"]
    assert diag["rule"] == "spill" and diag["file"] == "test_hot_path_checks.py"
    assert tr.meta["launches"][0]["sbuf_peak_bytes_per_partition"] == 3 * 65536 + 65536  # the products and a load


@pytest.mark.parametrize("log_open", [False, True])
def test_fresh_results_keep_their_producer_with_and_without_a_log(log_open):
    seen = []

    @nki.jit
    def producer(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        u = nisa.tensor_scalar(t, np.add, 1.0)
        seen.append(u._producer)
        nl.store(out, u)
        return out

    x = np.zeros((128, 4), np.float32)
    if log_open:
        with replaylog.recording([x]):
            producer(x)
    else:
        producer(x)
    assert seen == [2]  # the instructions run when it was made: the load and the tensor_scalar itself


def test_cells_are_a_plain_attribute_outside_a_protected_process():
    from nkitui.emulator import devmem

    assert not memory.cells_guarded() or devmem.enabled()  # (a test module of this process may have enabled it)


_PROTECTED = textwrap.dedent("""
    import numpy as np
    from nkitui import emulator
    from nkitui.emulator import devmem, memory
    emulator.install()
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    devmem.enable()
    assert not memory.cells_guarded()  # until a launch starts

    @nki.jit
    def swapped(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        st = object.__getattribute__(t, "storage")
        st.data = np.full(t.shape, 7.0, np.float32)  # cells replaced from the host
        object.__setattr__(t, "_array_view", None)
        nl.store(out, nl.multiply(t, 2.0))
        return out

    try:
        swapped(np.ones((128, 4), np.float32))
    except devmem.ForeignMemoryError as exc:
        assert memory.cells_guarded()
        print("refused:", exc)
    else:
        print("ran")
""")


def test_cells_replaced_from_the_host_are_refused_when_device_memory_is_protected(tmp_path):
    script = tmp_path / "protected.py"
    script.write_text(_PROTECTED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "replaced from the host" in done.stdout, done.stdout + done.stderr


def test_a_legacy_tile_starts_with_every_field_a_tensor_starts_with():
    from nkitui.emulator import dtypes
    from nkitui.emulator.legacy.tile import LegacyTensor
    from nkitui.emulator.tensor import Tensor

    st = memory.Storage("t", "sbuf", (128, 4), dtypes.dtype_of("float32"), np.zeros((128, 4), np.float32))
    dims = ((0, 1, 128, 0), (0, 1, 4, 1))
    plain, legacy = Tensor(st, dims, (128, 4)), LegacyTensor(st, dims, (128, 4))
    for name in Tensor.__slots__:
        if name != "__weakref__":
            assert getattr(legacy, name) is getattr(plain, name) or getattr(legacy, name) == getattr(plain, name), name
    assert (legacy._matmul_instruction, legacy._grid_axes, legacy._written) == (None, None, None)

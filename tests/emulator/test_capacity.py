"""On-chip capacity follows the compiler's live ranges (first use to last use), not Python's
references: dead tiles a variable still holds do not count, tiles declared before their first write
do not count before it, tiles that are really live together do."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from nkitui import emulator

KERNELS = Path(__file__).resolve().parents[2] / "benchmarks" / "costmodel_kernels" / "matmul_tutorial.py"
F32 = np.float32


@pytest.fixture(scope="module")
def tutorial():
    spec = importlib.util.spec_from_file_location("capacity_matmul_tutorial", KERNELS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shapes(m, k, n):
    return emulator.ShapeDtype((k, m), "bfloat16"), emulator.ShapeDtype((k, n), "bfloat16")


@nki.jit
def two_big_tiles_one_after_the_other(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)  # 120 KB per partition
    nl.store(out, value=a)
    b = nl.load(y)  # `a` is still bound but no instruction uses it any more
    nl.store(out, value=b)
    return out


@nki.jit
def two_big_tiles_together(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)  # rule: both-live
    nl.store(out, value=a)
    nl.store(out, value=b)
    return out


@nki.jit
def declared_before_its_first_write(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    late = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)  # the compiler allocates it at its first write
    a = nl.load(x)
    nl.store(out, value=a)
    late[...] = nl.load(y)  # `a` is dead by now
    nl.store(out, value=late)
    return out


def test_a_tile_declared_early_is_live_from_its_first_write():
    x = np.ones((128, 30000), F32)
    with emulator.options(target="trn2", capacity="error"):
        np.testing.assert_array_equal(declared_before_its_first_write(x, 3 * x), 3 * x)
    assert declared_before_its_first_write.last_run.sbuf_peak_bytes == 120000


def test_a_tile_dead_after_its_last_use_does_not_count():
    x = np.ones((128, 30000), F32)
    with emulator.options(target="trn2", capacity="error", execute=False):
        two_big_tiles_one_after_the_other(x, x)
    assert two_big_tiles_one_after_the_other.last_run.sbuf_peak_bytes == 120000


def test_tiles_live_at_the_same_time_overflow_with_the_allocation_line():
    x = emulator.ShapeDtype((128, 30000), "float32")
    with emulator.options(target="trn2", capacity="strict", execute=False):
        with pytest.raises(emulator.CapacityError, match="SBUF capacity exceeded") as info:
            two_big_tiles_together(x, x)
    line = next(i + 1 for i, t in enumerate(Path(__file__).read_text().splitlines()) if t.endswith("# rule: both-live"))
    assert (info.value.file, info.value.line) == ("test_capacity.py", line)
    assert "120000 B per partition while 120000 of" in str(info.value)


def test_fully_blocked_matmul_fits_with_its_real_working_set(tutorial):
    # M = 4096 gives the full shape's per-partition working set (K and N only add iterations):
    # partial sums 64 KiB + an rhs block 16 KiB + an lhsT block 32 KiB per partition
    with emulator.options(target="trn1", capacity="error", execute=False):
        tutorial.matmul_block_all(*_shapes(4096, 2048, 2048))
    run = tutorial.matmul_block_all.last_run
    assert run.sbuf_peak_bytes == (64 + 16 + 32) * 1024
    assert run.psum_peak_bytes == 2048  # one accumulator: `acc += nc_matmul(...)` needs no bank of its own


def test_fully_blocked_matmul_with_blocks_too_big_still_overflows(tutorial):
    # BN = 4 doubles the partial sums (128 KiB) and the rhs block (32 KiB): 192 KiB > 176 KiB on trn1
    with emulator.options(target="trn1", capacity="strict", execute=False):
        with pytest.raises(emulator.CapacityError, match="SBUF capacity exceeded") as info:
            tutorial.matmul_block_all(*_shapes(4096, 1024, 2048), BN=4)
    assert info.value.file == "matmul_tutorial.py"


def test_overflow_can_be_a_warning_with_the_peak_reported(tutorial):
    with emulator.options(target="trn1", capacity="warn", execute=False):
        with pytest.warns(emulator.NKIEmulatorWarning, match="would spill"):
            tutorial.matmul_block_all(*_shapes(4096, 1024, 2048), BN=4)
    assert tutorial.matmul_block_all.last_run.sbuf_peak_bytes > 176 * 1024


@pytest.mark.slow
def test_fully_blocked_matmul_runs_at_the_published_shape(tutorial):
    with emulator.options(target="trn1", capacity="error", execute=False):
        tutorial.matmul_block_all(*_shapes(4096, 8192, 8192))
    assert tutorial.matmul_block_all.last_run.sbuf_peak_bytes == (64 + 16 + 32) * 1024


def _ten_psum_banks_live(buffer_of):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        banks = [nl.ndarray((128, 512), dtype=nl.float32, buffer=buffer_of(i)) for i in range(10)]
        for bank in banks:
            bank[...] = nl.copy(t)
        acc = nl.copy(banks[0])
        for bank in banks[1:]:
            acc = nl.add(acc, bank)
        nl.store(out, value=acc)
        return out
    return k


def test_direct_allocations_are_the_kernels_placement_not_counted():
    import neuronxcc.nki.compiler as ncc

    x = np.ones((128, 512), F32)
    placed = _ten_psum_banks_live(lambda i: ncc.psum.mod_alloc(base_bank=i % 8, num_bank_tiles=(1,)))
    np.testing.assert_array_equal(placed(x), np.full((128, 512), 10, F32))
    with pytest.raises(emulator.CapacityError, match="PSUM"):
        _ten_psum_banks_live(lambda i: nl.psum)(x)

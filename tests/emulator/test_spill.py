"""SBUF over capacity: what the compiler spills runs (a diagnostic, and the cost model charges the spill
DMAs), what no allocation can hold stays an error (issue #19: valid kernels the compiler fits by spilling
were rejected)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.perf import estimate

F32 = np.float32
_SOURCE = Path(__file__).read_text().splitlines()


def line_of(marker: str) -> int:
    hits = [i + 1 for i, text in enumerate(_SOURCE) if text.rstrip().endswith(f"# at: {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


@nki.jit
def eight_tiles_kept_then_read(x):
    """Eight computed (128, 8192) fp32 tiles (32 KiB per partition each, 256 KiB together) are all written
    before any is stored: over trn1's 176 KiB usable in program order, but every instruction needs only
    one or two tiles, so the compiler spills some of them to HBM and reloads them."""
    out = nl.ndarray((8, 128, 8192), dtype=x.dtype, buffer=nl.shared_hbm)
    keep = []
    for i in range(8):
        keep.append(nl.multiply(nl.load(x[i]), 2.0))  # at: spill-starts
    for i in range(8):
        nl.store(out[i], value=keep[i])
    return out


def _eight(n=8):
    return np.arange(n * 128 * 8192, dtype=F32).reshape(n, 128, 8192) % 97


def test_live_data_over_sbuf_is_a_spill_and_the_kernel_runs():
    x = _eight()
    with emulator.options(target="trn1"), emulator.trace() as tr:  # the default capacity mode: "error"
        with pytest.warns(emulator.NKIEmulatorWarning, match="would spill"):
            out = eight_tiles_kept_then_read(x)
    np.testing.assert_array_equal(out, 2 * x)
    (diag,) = tr.meta["diagnostics"]
    assert diag["rule"] == "spill"
    assert (diag["file"], diag["line"]) == ("test_spill.py", line_of("spill-starts"))
    usable = 176 * 1024
    peak = tr.meta["launches"][0]["sbuf_peak_bytes_per_partition"]
    assert peak == 8 * 32768 + 32768  # the eight products and the last load beside them
    assert f"at least {(peak - usable) / 1024:.1f} KiB per partition" in diag["message"]
    assert f"peak at {peak} of {usable} usable B per partition on trn1" in diag["message"]


def test_the_cost_model_charges_the_spill_as_dma_traffic():
    with emulator.trace(execute=False, target="trn1") as tr:
        with pytest.warns(emulator.NKIEmulatorWarning, match="would spill"):
            eight_tiles_kept_then_read(emulator.ShapeDtype((8, 128, 8192), "float32"))
    s = estimate(tr, "trn1").summary
    assert s["spill_save_bytes"] > 0 and s["spill_reload_bytes"] >= s["spill_save_bytes"]


def test_a_small_spill_is_reported_in_bytes():
    @nki.jit
    def just_over(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        a = nl.load(x[0])
        b = nl.load(x[1])
        nl.store(out[0], value=a)
        nl.store(out[1], value=b)
        return out

    with emulator.trace(execute=False, target="trn2") as tr:  # 2 x 106500 B = 8 B over 212992
        with pytest.warns(emulator.NKIEmulatorWarning, match="would spill at least 8 B per partition"):
            just_over(emulator.ShapeDtype((2, 128, 53250), "bfloat16"))
    assert tr.meta["diagnostics"][0]["rule"] == "spill"


def test_a_kernel_that_fits_without_spilling_has_no_spill_diagnostic():
    x = _eight(4)  # four tiles: 128 KiB + one product, under trn1's 176 KiB

    @nki.jit
    def four(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        keep = [nl.load(x[i]) for i in range(4)]
        for i in range(4):
            nl.store(out[i], value=nl.multiply(keep[i], 2.0))
        return out

    with emulator.options(target="trn1"), emulator.trace() as tr:
        np.testing.assert_array_equal(four(x), 2 * x)
    assert tr.meta.get("diagnostics", []) == []


def test_strict_mode_refuses_a_kernel_that_fits_only_by_spilling():
    with emulator.options(target="trn1", capacity="strict", execute=False):
        with pytest.raises(emulator.CapacityError, match="capacity='strict' refuses kernels that fit only by "
                                                         "spilling") as info:
            eight_tiles_kept_then_read(emulator.ShapeDtype((8, 128, 8192), "float32"))
    assert (info.value.file, info.value.line) == ("test_spill.py", line_of("spill-starts"))


def test_one_instruction_whose_operands_exceed_sbuf_is_an_error_no_spill_helps():
    @nki.jit
    def too_wide(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        a = nl.load(x)
        b = nl.load(y)
        nl.store(out, value=nl.add(a, b))  # at: working-set
        return out

    x = emulator.ShapeDtype((128, 20000), "float32")  # 80000 B per partition each: a, b and a + b = 240000
    with emulator.options(target="trn2", execute=False):
        with pytest.raises(emulator.CapacityError, match="no spill can make room") as info:
            too_wide(x, x)
    assert (info.value.file, info.value.line) == ("test_spill.py", line_of("working-set"))
    assert "needs 240000 B per partition of SBUF operands at once, over the 212992 usable" in str(info.value)


def test_small_partition_tiles_count_their_share_of_the_partitions():
    """Tiles of <= 32 partitions may start at partition 0, 32, 64 or 96 (the allocator's partition start
    rules), so four of them share one byte range: four (32, 40000) fp32 tiles live together hold 160000 B
    in their own partitions and a quarter of that across all 128."""

    @nki.jit
    def quarters(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        keep = [nl.load(x[i]) for i in range(4)]
        for i in range(4):
            nl.store(out[i], value=keep[i])
        return out

    x = np.ones((4, 32, 40000), F32)
    with emulator.options(target="trn2", capacity="strict"):
        np.testing.assert_array_equal(quarters(x), x)
    assert quarters.last_run.sbuf_peak_bytes == 4 * 40000  # 4 tiles x a quarter of 160000 B

    y = np.ones((4, 64, 40000), F32)  # <= 64 partitions: half each, 320000 B > 212992 usable
    with emulator.options(target="trn2", capacity="strict"):
        with pytest.raises(emulator.CapacityError, match="SBUF capacity exceeded"):
            quarters(y)


def test_direct_allocation_beyond_the_usable_sbuf_is_an_error():
    """`ncc.sbuf.mod_alloc(base_addr=...)` places the buffer itself: nothing can spill it, and the
    compiler reserves the top 16 KiB of each partition (NKI Direct Allocation guide), so a buffer
    reaching past the usable bytes is refused where it is declared."""

    @nki.jit
    def placed(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,  # at: placed
                         buffer=ncc.sbuf.mod_alloc(base_addr=176 * 1024 - 2048, num_free_tiles=(2,)))
        buf[0] = nl.load(x)
        nl.store(out, value=buf[0])
        return out

    x = np.ones((128, 512), F32)
    with emulator.options(target="trn1"):
        with pytest.raises(emulator.CapacityError, match="direct allocation") as info:
            placed(x)
    assert info.value.line in (line_of("placed"), line_of("placed") + 1)
    assert "176 KiB" in str(info.value) or "180224" in str(info.value)
    with emulator.options(target="trn2"):  # 208 KiB usable: the same placement fits
        np.testing.assert_array_equal(placed(x), x)


def test_the_cost_model_counts_small_partition_tiles_as_the_emulator_does():
    @nki.jit
    def quarters(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        keep = [nl.load(x[i]) for i in range(4)]
        for i in range(4):
            nl.store(out[i], value=keep[i])
        return out

    with emulator.trace(execute=False, target="trn2") as tr:
        quarters(emulator.ShapeDtype((4, 32, 40000), "float32"))
    emulated = tr.meta["launches"][0]["sbuf_peak_bytes_per_partition"]
    assert emulated == 4 * 40000
    assert estimate(tr, "trn2").extras["sbuf_demand_bytes_per_partition"] == emulated


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3"])
def test_fast_fp32_widening_is_bit_exact_for_every_pattern(name):
    """dtypes.to_f32 (the operand conversion of every instruction) widens bf16 by a shift and 1-byte / fp16
    formats by a table: the same bits as numpy's cast for every bit pattern, NaNs included, on strided views."""
    import ml_dtypes

    from nkitui.emulator import dtypes as dt

    d = np.dtype(getattr(ml_dtypes, name, None) or name)
    bits = np.arange(1 << (8 * d.itemsize), dtype=np.uint8 if d.itemsize == 1 else np.uint16).view(d)
    for v in (bits, bits.reshape(16, -1)[:, ::3]):
        got = dt.to_f32(v)
        assert got.dtype == np.float32 and got.shape == v.shape
        np.testing.assert_array_equal(got.view(np.uint32), v.astype(np.float32).view(np.uint32))


def test_matmul_accumulation_zones_sum_whole_partial_and_fresh_tiles():
    """write_matmul_result's shortcuts (a tile wholly inside its accumulation zone adds, wholly outside
    overwrites, partly inside selects) give what the select alone gave."""
    import nki as nki_new
    import nki.isa as nisa
    import nki.language as nl_new

    @nki_new.jit
    def k(a, b):
        out = nl_new.ndarray((128, 512), dtype=nl_new.float32, buffer=nl_new.shared_hbm)
        sa = nl_new.ndarray((128, 128), dtype=a.dtype, buffer=nl_new.sbuf)
        sb = nl_new.ndarray((128, 512), dtype=b.dtype, buffer=nl_new.sbuf)
        nisa.dma_copy(dst=sa, src=a)
        nisa.dma_copy(dst=sb, src=b)
        acc = nl_new.ndarray((128, 512), dtype=nl_new.float32, buffer=nl_new.psum)
        nisa.nc_matmul(dst=acc, stationary=sa, moving=sb)  # opens the zone: overwrite
        nisa.nc_matmul(dst=acc, stationary=sa, moving=sb)  # inside: add
        nisa.memset(dst=acc[:, 256:], value=0.0)  # ends the zone on the right half
        nisa.nc_matmul(dst=acc, stationary=sa, moving=sb)  # left half adds, right half overwrites
        r = nl_new.ndarray((128, 512), dtype=nl_new.float32, buffer=nl_new.sbuf)
        nisa.tensor_copy(dst=r, src=acc)
        nisa.dma_copy(dst=out, src=r)
        return out

    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 128)).astype(F32)
    b = rng.standard_normal((128, 512)).astype(F32)
    one = a.T @ b
    got = k(a, b)
    np.testing.assert_allclose(got[:, :256], 3 * one[:, :256], rtol=2e-5, atol=2e-4)
    np.testing.assert_allclose(got[:, 256:], one[:, 256:], rtol=2e-5, atol=2e-4)

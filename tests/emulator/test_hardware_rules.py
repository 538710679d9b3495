"""Every hardware rule the emulator enforces raises a clear error naming the rule and the kernel line.

Each offending statement carries a marker comment (`# rule: NAME`); the test checks that the error
message ends with `test_hardware_rules.py:<that line>`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator

_SOURCE = Path(__file__).read_text().splitlines()
F32 = np.float32


def line_of(rule: str) -> int:
    hits = [i + 1 for i, text in enumerate(_SOURCE) if text.rstrip().endswith(f"# rule: {rule}")]
    assert len(hits) == 1, f"marker for {rule} found {len(hits)} times"
    return hits[0]


def expect(exc_type, rule: str, *fragments: str):
    """Context manager: the block raises `exc_type` mentioning `fragments` at the marked line."""
    return _Expect(exc_type, rule, fragments)


class _Expect:
    def __init__(self, exc_type, rule, fragments):
        self.exc_type, self.rule, self.fragments = exc_type, rule, fragments

    def __enter__(self):
        self.ctx = pytest.raises(self.exc_type)
        self.info = self.ctx.__enter__()
        return self.info

    def __exit__(self, *exc):
        handled = self.ctx.__exit__(*exc)  # raises if nothing, or something else, was raised
        msg = str(self.info.value)
        for frag in self.fragments:
            assert frag in msg, f"{frag!r} not in {msg!r}"
        assert msg.endswith(f"at test_hardware_rules.py:{line_of(self.rule)}"), msg
        assert isinstance(self.info.value, emulator.NKIEmulatorError)
        return handled


def test_partition_dimension_over_128():
    @nki.jit
    def k():
        nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)  # rule: pdim-alloc

    with expect(emulator.PartitionDimError, "pdim-alloc", "partition dimension 256 exceeds 128"):
        k()


def test_load_of_more_than_128_partitions():
    @nki.jit
    def k(a):
        nl.load(a[0:256, :])  # rule: pdim-load

    with expect(emulator.PartitionDimError, "pdim-load", "partition dimension 256 exceeds 128"):
        k(np.zeros((256, 4), F32))


@nki.jit
def _matmul(a, b):
    nisa.nc_matmul(nl.load(a), nl.load(b))  # rule: mm-shapes


@pytest.mark.parametrize("stationary, moving, message", [
    ((128, 256), (128, 64), "stationary free size 256 exceeds 128"),
    ((128, 128), (128, 1024), "moving free size 1024 exceeds 512"),
    ((128, 64), (64, 64), "contraction (partition) sizes differ"),
], ids=["stationary-free-over-128", "moving-free-over-512", "contraction-mismatch"])
def test_matmul_operand_shapes(stationary, moving, message):
    with expect(emulator.MatmulShapeError, "mm-shapes", message):
        _matmul(np.zeros(stationary, F32), np.zeros(moving, F32))


def test_psum_tile_over_one_bank():
    @nki.jit
    def k():
        nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)  # rule: psum-bank

    with expect(emulator.PsumBankError, "psum-bank", "4096 B per partition", "2048 B PSUM bank"):
        k()


def test_psum_banks_exhausted():
    @nki.jit
    def k():
        tiles = []
        for i in range(9):
            tiles.append(nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum))  # rule: psum-full
        for t in tiles:  # all nine are still needed here
            nl.copy(t)

    with expect(emulator.CapacityError, "psum-full", "PSUM capacity exceeded", "8 of 8 PSUM banks"):
        k()


def test_psum_tiles_used_one_after_another_share_the_banks():
    @nki.jit
    def k():
        tiles = []
        for i in range(12):  # each tile is dead after its copy, although the list keeps it
            tiles.append(nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum))
            nl.copy(tiles[-1])

    with emulator.options(capacity="error"):
        k()
    assert k.last_run.psum_peak_bytes == 2048


def test_sbuf_capacity_exceeded():
    @nki.jit
    def k():
        keep = []
        for i in range(8):
            keep.append(nl.zeros((128, 8192), dtype=nl.float32, buffer=nl.sbuf))  # rule: sbuf-full
        for t in keep:  # all eight are still needed here: live together
            nl.exp(t)

    with emulator.options(target="trn1", capacity="strict"):  # the default lets the compiler spill them
        with expect(emulator.CapacityError, "sbuf-full", "SBUF capacity exceeded", "of 180224 usable B"):
            k()


def test_sbuf_overflow_can_be_downgraded_to_a_warning():
    @nki.jit
    def k():
        keep = [nl.zeros((128, 8192), dtype=nl.float32) for _ in range(8)]
        for t in keep:
            nl.exp(t)

    with emulator.options(target="trn1", capacity="warn"), emulator.trace() as tr:
        with pytest.warns(emulator.NKIEmulatorWarning, match="would spill"):
            k()
    diag = tr.meta["diagnostics"][0]
    assert diag["rule"] == "spill" and diag["file"] == "test_hardware_rules.py"
    assert tr.meta["launches"][0]["sbuf_peak_bytes_per_partition"] == 8 * 8192 * 4 + 8192 * 4  # + one exp result


def test_reduction_over_partition_axis():
    @nki.jit
    def k(a):
        nl.sum(nl.load(a), axis=0)  # rule: reduce-p

    with expect(emulator.ReductionAxisError, "reduce-p", "partition axis (axis 0)"):
        k(np.zeros((16, 16), F32))


def test_gpsimd_cannot_read_psum():
    @nki.jit
    def k(a):
        acc = nl.zeros((16, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(acc, engine=nisa.gpsimd_engine)  # rule: gpsimd-psum

    with expect(emulator.EngineMemoryError, "gpsimd-psum", "GpSimd engine cannot access PSUM"):
        k(np.zeros((16, 16), F32))


def test_compute_engines_cannot_read_hbm():
    @nki.jit
    def k(a):
        nl.exp(a)  # rule: hbm-compute

    with expect(emulator.EngineMemoryError, "hbm-compute", "address space 'psum|sbuf'", "'hbm'"):
        k(np.zeros((16, 16), F32))


def test_load_needs_an_hbm_source():
    @nki.jit
    def k(a):
        t = nl.load(a)
        nl.load(t)  # rule: load-sbuf

    with expect(emulator.EngineMemoryError, "load-sbuf", "to be in address space 'hbm'"):
        k(np.zeros((16, 16), F32))


def test_matmul_rejects_integer_operands():
    @nki.jit
    def k(a):
        t = nl.load(a)
        nisa.nc_matmul(t, t)  # rule: mm-dtype

    with expect(emulator.EngineDtypeError, "mm-dtype", "TensorE does not support int32"):
        k(np.zeros((16, 16), np.int32))


def test_matmul_fp32_needs_fp32_partner():
    @nki.jit
    def k(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))  # rule: mm-mix

    import ml_dtypes

    with expect(emulator.EngineDtypeError, "mm-mix", "fp32/tf32 the other must be too"):
        k(np.zeros((16, 16), F32), np.zeros((16, 16), ml_dtypes.bfloat16))


def test_bitvec_op_needs_integers():
    @nki.jit
    def k(a):
        t = nl.load(a)
        nisa.tensor_tensor(t, t, op=np.bitwise_and)  # rule: bitvec

    with expect(emulator.EngineDtypeError, "bitvec", "needs integer data types", "float32"):
        k(np.zeros((16, 16), F32))


def test_out_of_bounds_access():
    @nki.jit
    def k(a):
        nl.load(a[0:128, 0:600])  # rule: oob

    with expect(emulator.OutOfBoundsError, "oob", "dimension 1", "index range [0, 599] exceeds dimension size 512"):
        k(np.zeros((128, 512), F32))


def test_out_of_bounds_through_index_grid_without_mask():
    @nki.jit
    def k(a):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(8)[None, :]
        nl.load(a[128 + i_p, i_f])  # rule: oob-grid

    with expect(emulator.OutOfBoundsError, "oob-grid", "index range [128, 255] exceeds dimension size 200"):
        k(np.zeros((200, 8), F32))


def test_partition_count_mismatch():
    @nki.jit
    def k(a, b):
        nisa.tensor_tensor(nl.load(a), nl.load(b), op=np.add)  # rule: p-mismatch

    with expect(emulator.OperandShapeError, "p-mismatch", "same number of partitions"):
        k(np.zeros((16, 8), F32), np.zeros((8, 16), F32))


def test_activation_scale_must_be_scalar_or_vector():
    @nki.jit
    def k(a):
        t = nl.load(a)
        nisa.activation(op=nl.exp, data=t, scale=t)  # rule: act-scale

    with expect(emulator.ActivationOperandError, "act-scale", "scale must be a scalar or a (16, 1) vector"):
        k(np.zeros((16, 16), F32))


def test_scalar_activation_bias_needs_trn2():
    @nki.jit
    def k(a):
        nisa.activation(op=nl.exp, data=nl.load(a), bias=1.0)  # rule: act-bias

    with emulator.options(target="trn1"):
        with expect(emulator.ActivationOperandError, "act-bias", "bias must be a (16, 1) vector on NeuronCore-v2"):
            k(np.zeros((16, 16), F32))


def test_bn_stats_free_size_limit():
    @nki.jit
    def k(a):
        nisa.bn_stats(nl.load(a))  # rule: bn-stats

    with expect(emulator.OperandShapeError, "bn-stats", "free size 600 exceeds bn_stats_fmax (512)"):
        k(np.zeros((16, 600), F32))


def test_mixing_basic_and_advanced_indexing():
    @nki.jit
    def k(a):
        nl.load(a[nl.arange(16)[:, None], 0:8])  # rule: mixing

    with expect(emulator.IndexingError, "mixing", "err_unsupported_mixing_basic_advanced_tensor_indexing"):
        k(np.zeros((16, 8), F32))


def test_one_dimensional_arange_index():
    @nki.jit
    def k(a):
        nl.load(a[nl.arange(16), nl.arange(8)[None, :]])  # rule: arange-1d

    with expect(emulator.IndexingError, "arange-1d", "err_1d_arange_not_supported"):
        k(np.zeros((16, 8), F32))


def test_mask_predicates_have_no_truth_value():
    @nki.jit
    def k(a):
        i_p = nl.arange(16)[:, None]
        if i_p < 8:  # rule: mask-bool
            pass

    with expect(emulator.MaskError, "mask-bool", "no truth value", "use mask="):
        k(np.zeros((16, 8), F32))


def test_range_select_needs_trn2():
    @nki.jit
    def k(a):
        t = nl.load(a)
        b = nl.zeros((16, 1), dtype=nl.float32)
        nisa.range_select(on_true_tile=t, comp_op0=np.greater, comp_op1=np.less, bound0=b, bound1=b)  # rule: v3

    with emulator.options(target="trn1"):
        with expect(emulator.EngineOpError, "v3", "range_select needs NeuronCore-v3"):
            k(np.zeros((16, 8), F32))


def test_kernel_must_return_hbm_tensors():
    @nki.jit
    def k(a):
        return nl.load(a)

    with pytest.raises(emulator.KernelArgumentError, match="returned a sbuf tile"):
        k(np.zeros((16, 8), F32))


def test_arguments_must_match_the_signature():
    @nki.jit
    def k(a, b):
        return None

    with pytest.raises(emulator.KernelArgumentError, match=r"missing a required argument: 'b'") as info:
        k(np.zeros((4, 4), F32))
    assert re.search(r"test_hardware_rules\.py:\d+$", str(info.value))


def test_device_api_outside_a_kernel():
    with pytest.raises(emulator.NKIEmulatorError, match="outside of a running kernel"):
        nl.zeros((4, 4), dtype=nl.float32)


def test_rebinding_a_loop_variable_does_not_count_the_dead_tile():
    @nki.jit
    def k():
        for i in nl.affine_range(3):
            big = nl.zeros((128, 30000), dtype=nl.float32)  # 120 KB: two would not fit
        keep = [nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(7)]
        for i in nl.affine_range(3):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)  # the 8th bank, reused
        for t in keep:
            nl.copy(t, dtype=nl.bfloat16)
        return None if (big is None or acc is None) else None

    with emulator.options(target="trn2"), emulator.trace() as tr:
        k()
    assert tr.meta["launches"][0]["sbuf_peak_bytes_per_partition"] == 120000


def test_a_tile_still_referenced_elsewhere_is_not_reclaimed():
    @nki.jit
    def k():
        kept = []
        for i in nl.affine_range(2):
            big = nl.zeros((128, 30000), dtype=nl.float32)
            kept.append(big)
        nl.add(kept[0], kept[1])  # both operands and the result at once  # rule: sbuf-kept

    with emulator.options(target="trn2"):
        with expect(emulator.CapacityError, "sbuf-kept", "SBUF capacity exceeded: one instruction",
                    "needs 360000 B per partition", "no spill can make room"):
            k()

"""The legacy front end provides the most used legacy callables of the corpus (nki-corpus.md §3)."""

from __future__ import annotations

import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt

# Legacy-namespace callables of nki-corpus.md Appendix B, most used first (legacy kernel counts).
LEGACY_CALLABLES = """
nl.ndarray nl.store nl.load nl.affine_range nl.zeros nl.par_dim nl.add nl.copy nl.arange nl.multiply
nisa.nc_matmul nisa.activation nisa.nc_transpose nisa.tensor_reduce nl.ds nisa.tensor_scalar nl.max nl.exp
nl.matmul nl.sequential_range nisa.reciprocal nisa.tensor_copy nisa.memset nl.program_id nl.sum
nisa.tensor_tensor nl.maximum nisa.dma_copy nl.shared_constant nl.rsqrt nl.square nisa.activation_reduce
nl.load_transpose2d nisa.affine_select nisa.tensor_scalar_reduce nisa.dma_transpose nl.subtract nl.num_programs
nisa.iota nl.loop_reduce nl.static_range nl.dropout nl.random_seed nl.full nisa.scalar_tensor_tensor ncc.sbuf
ncc.psum nl.ones nl.abs nl.minimum nisa.get_nc_version nl.program_ndim nl.where nl.log nl.divide nisa.max8
nisa.tensor_tensor_scan nisa.nc_match_replace8 nl.rand nisa.tensor_scalar_cumulative ncc.multi_buffer nl.silu
nl.transpose nisa.select_reduce nisa.bn_stats nisa.bn_aggr nisa.tensor_partition_reduce nisa.nc_stream_shuffle
nl.broadcast_to nl.softmax nisa.range_select nisa.tensor_copy_predicated nisa.dropout nl.device_print nl.gelu
nl.zeros_like nl.mean nl.min nl.mod nl.finfo nt.scalar nisa.nc_find_index8 nl.floor ncc.no_reorder
nl.static_cast nl.empty_like nl.tanh nl.sigmoid nl.relu nl.sqrt nl.reciprocal nl.negative nl.gather_flattened
nl.atomic_rmw nki.jit nki.baremetal nki.benchmark nki.profile nki.simulate_kernel nki.trace
ncc.skip_middle_end_transformations ncc.enable_stack_allocator
""".split()

CONSTANTS = """
nl.shared_hbm nl.sbuf nl.psum nl.hbm nl.private_hbm nl.float32 nl.bfloat16 nl.float16 nl.tfloat32
nl.float8_e4m3 nl.float8_e5m2 nl.int8 nl.int16 nl.int32 nl.uint8 nl.uint16 nl.uint32 nl.bool_ nl.tile_size
nl.mgrid nl.fp32 nisa.vector_engine nisa.scalar_engine nisa.gpsimd_engine nisa.tensor_engine nisa.unknown_engine
nisa.reduce_cmd nisa.oob_mode nisa.dge_mode nisa.nc_version nisa.engine nt.tensor nt.mutable_tensor
""".split()

MODULES = {"nl": nl, "nisa": nisa, "nki": nki, "ncc": ncc, "nt": nt}


def _resolve(name: str):
    mod, _, attr = name.partition(".")
    return getattr(MODULES[mod], attr)


def test_at_least_the_sixty_most_used_legacy_callables_are_callable():
    top = LEGACY_CALLABLES[:60]
    assert len(top) == 60
    # ncc.sbuf / ncc.psum are used as `ncc.sbuf.mod_alloc(...)`: their allocation methods must be callable
    missing = [n for n in LEGACY_CALLABLES
               if not (callable(_resolve(n)) or callable(getattr(_resolve(n), "mod_alloc", None)))]
    assert not missing


@pytest.mark.parametrize("name", CONSTANTS)
def test_constants_exist(name):
    assert _resolve(name) is not None


def test_generated_operators_are_declared_for_the_type_checker():
    # nl.add, nl.exp, ... are bound by frontend_common.define_ops at import; language.py declares each for
    # mypy (the tensor operators in tile.py call them). A name added to one list and not the other would
    # leave the checker blind to it, or declare a function that does not exist.
    from nkitui.emulator import frontend_common
    from nkitui.emulator.legacy import language

    declared = language.__annotations__
    binary = {name for name, kind in declared.items() if kind == "_BinaryFn"}
    unary = {name for name, kind in declared.items() if kind == "_UnaryFn"}
    assert binary == set(frontend_common.BINARY_OPS)
    assert unary == set(frontend_common.ACTIVATION_OPS) | {"rsqrt", "sin", "identity"}
    assert all(callable(getattr(language, name)) for name in binary | unary)

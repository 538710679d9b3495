"""The nki namespace provides the names new-namespace kernels of the corpus use (nki-corpus.md
Appendix B, new-namespace column, most used first), plus the documented stub surface."""

from __future__ import annotations

import pytest

import nki
import nki.collectives as ncoll
import nki.isa as nisa
import nki.language as nl

NEW_CALLABLES = """
nl.ndarray nl.load nl.store nl.affine_range nisa.dma_copy nisa.nc_matmul nisa.tensor_copy nisa.activation nl.zeros
nisa.tensor_tensor nisa.nc_transpose nisa.memset nisa.tensor_scalar nl.copy nl.ds nisa.tensor_reduce nl.exp
nl.sequential_range nl.maximum nl.program_id nl.subtract nl.num_programs nisa.reciprocal nisa.dma_transpose
nisa.nc_stream_shuffle nl.max nl.rsqrt nl.static_range nisa.scalar_tensor_tensor nl.load_transpose2d nisa.iota
nl.square nl.minimum nisa.sendrecv nl.silu nisa.nc_matmul_mx nl.sum nisa.quantize_mx nl.program_ndim
nisa.activation_reduce nisa.get_nc_version nisa.affine_select nl.full nisa.core_barrier nl.shared_constant
nl.gelu_apprx_sigmoid nisa.tensor_scalar_reduce nisa.tensor_tensor_scan nl.log nl.gelu nl.less
nl.shared_identity_matrix nl.gelu_apprx_tanh nl.divide nisa.tensor_copy_predicated nl.greater_equal
nisa.register_alloc nisa.register_load nisa.dma_compute nisa.max8 nl.broadcast_to nl.equal nl.sigmoid nisa.bn_stats
nisa.bn_aggr nl.greater nisa.nonzero_with_count ncoll.all_gather nl.sin nl.bitwise_and nl.right_shift nl.relu
nisa.nc_match_replace8 ncoll.rank_id nl.sqrt nl.bitwise_xor nisa.nc_find_index8 nl.negative
nisa.tensor_partition_reduce nisa.range_select nl.dynamic_range nl.reciprocal nl.softplus nisa.nc_n_gather
ncoll.ReplicaGroup nl.cast nl.cos nl.floor ncoll.collective_permute_implicit_current_processing_rank_id
ncoll.collective_permute_implicit ncoll.all_reduce nl.zeros_like nl.bitwise_or nl.left_shift nl.less_equal
nl.logical_and nl.silu_dx nl.gelu_apprx_sigmoid_dx nl.range ncoll.reduce_scatter ncoll.all_to_all
nl.fori_loop nl.while_loop nisa.register_move nisa.register_store nisa.exponential nisa.activate2 nisa.rng
nisa.rand2 nisa.set_rng_seed nisa.rand_set_state nisa.rand_get_state nisa.select_reduce
nisa.tensor_scalar_cumulative nisa.dropout nl.softmax nl.rms_norm nl.matmul nl.transpose nl.where nl.mean nl.var
nl.prod nl.all nl.abs nl.abs_max nl.abs_min nl.power nl.fmod nl.mod nl.invert nl.logical_not nl.logical_or
nl.logical_xor nl.not_equal nl.ones nl.empty_like nl.device_print nl.no_reorder nl.is_hbm nl.is_on_chip nl.is_psum
nl.is_sbuf nl.gather_flattened nl.dropout nl.erf nl.erf_dx nl.mish nl.tan nl.arctan nl.ceil nl.trunc nl.sign
nki.jit nki.simulate nki.cpu_simulate
""".split()

CONSTANTS = """
nl.shared_hbm nl.sbuf nl.psum nl.hbm nl.private_hbm nl.float32 nl.bfloat16 nl.float16 nl.tfloat32 nl.float8_e4m3
nl.float8_e4m3fn nl.float8_e5m2 nl.float8_e8m0fnu nl.float8_e4m3fn_x4 nl.float8_e5m2_x4 nl.float4_e2m1fn_x4 nl.int8
nl.int16 nl.int32 nl.uint8 nl.uint16 nl.uint32 nl.bool_ nl.tile_size nl.fp32 nl.NKIObject nl.NkiTensor nl.bypass
nisa.vector_engine nisa.scalar_engine nisa.gpsimd_engine nisa.tensor_engine nisa.unknown_engine nisa.engine
nisa.reduce_cmd nisa.oob_mode nisa.dge_mode nisa.nc_version nisa.dma_engine nisa.matmul_perf_mode nisa.constants
nisa.NkiValidationError nisa.VirtualRegister
""".split()

MODULES = {"nl": nl, "nisa": nisa, "nki": nki, "ncoll": ncoll}


def _resolve(name: str):
    mod, _, attr = name.partition(".")
    return getattr(MODULES[mod], attr)


def test_the_corpus_new_namespace_callables_are_callable():
    assert len(NEW_CALLABLES) > 150
    missing = [n for n in NEW_CALLABLES if not callable(_resolve(n))]
    assert not missing


@pytest.mark.parametrize("name", CONSTANTS)
def test_constants_exist(name):
    assert _resolve(name) is not None


def test_every_dtype_constant_resolves_to_an_engine_dtype():
    from nkitui.emulator.newns.dtypes import ALL_NAMES, resolve

    for name in ALL_NAMES:
        assert resolve(getattr(nl, name)).name in (name, "bool_")

"""Instruction semantics, one function per NKI instruction, shared by both front ends.

Every function has the destination-first form `op(dst, inputs..., params, *, where=None, api=...)`:
it validates the hardware rules, records the instruction (for `emulator.trace()`), and unless the
run is shape-only computes the result in fp32 and rounds it into `dst`. `where` is an optional
boolean mask (legacy `mask=` predicates that are not a simple box); `api` names the front-end call
for error messages and the trace's `meta["api"]`.
"""

from nkitui.emulator.engine.dma import dma_copy, dma_transpose
from nkitui.emulator.engine.gpsimd import affine_select, iota, tensor_partition_reduce
from nkitui.emulator.engine.scalar import activation
from nkitui.emulator.engine.tensor_engine import nc_matmul, nc_transpose, partition_broadcast
from nkitui.emulator.engine.vector import (
    assign_values,
    bn_aggr,
    bn_stats,
    dropout,
    max8,
    memset,
    psum_accumulate,
    nc_find_index8,
    nc_match_replace8,
    nc_stream_shuffle,
    range_select,
    reciprocal,
    scalar_tensor_tensor,
    select,
    select_reduce,
    tensor_copy,
    tensor_copy_predicated,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_cumulative,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_operands,
    tensor_tensor_scan,
)

__all__ = [
    "activation", "affine_select", "assign_values", "bn_aggr", "bn_stats", "dma_copy", "dma_transpose", "dropout", "iota",
    "max8", "memset", "nc_find_index8", "nc_match_replace8", "nc_matmul",
    "nc_stream_shuffle", "nc_transpose", "partition_broadcast", "psum_accumulate", "range_select", "reciprocal",
    "scalar_tensor_tensor", "select", "select_reduce", "tensor_copy", "tensor_copy_predicated",
    "tensor_partition_reduce", "tensor_reduce", "tensor_scalar", "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor",
    "tensor_tensor_operands",
    "tensor_tensor_scan",
]

# The instruction boundary the replayable log records (nkitui.emulator.replaylog): every function a front
# end calls to execute an instruction. A device write outside these is flagged, not lost.
import sys as _sys  # noqa: E402

from nkitui.emulator import replaylog as _replaylog  # noqa: E402
from nkitui.emulator.engine import dma_compute as _dma_compute, gather as _gather, prng as _prng  # noqa: E402,F401
from nkitui.emulator.engine import trn3 as _trn3, mx as _mx, registers as _registers  # noqa: E402,F401

_INSTRUCTIONS: dict[str, list[str]] = {
    "dma": ["dma_copy", "dma_transpose"],
    "gpsimd": ["affine_select", "iota", "tensor_partition_reduce"],
    "scalar": ["activation"],
    "tensor_engine": ["nc_matmul", "nc_transpose", "partition_broadcast"],
    "vector": [n for n in __all__ if n not in ("dma_copy", "dma_transpose", "affine_select", "iota",
                                               "tensor_partition_reduce", "activation", "nc_matmul", "nc_transpose",
                                               "partition_broadcast", "tensor_tensor_operands")],
    "dma_compute": ["dma_compute"],
    "gather": ["nc_n_gather", "nonzero_with_count", "gather_flattened"],
    "prng": ["rng", "rand2", "set_rng_seed", "rand_set_state", "rand_get_state", "uniform"],
    "registers": ["register_load", "register_store", "register_move"],
    "trn3": ["activate2", "exponential"],
    "mx": ["nc_matmul_mx", "quantize_mx"],
}
_replaylog.instrument({m: _sys.modules[f"{__name__}.{m}"] for m in _INSTRUCTIONS}, _INSTRUCTIONS, globals())

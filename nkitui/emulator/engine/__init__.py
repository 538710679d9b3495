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
    bn_aggr,
    bn_stats,
    dropout,
    max8,
    memset,
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
    "activation", "affine_select", "bn_aggr", "bn_stats", "dma_copy", "dma_transpose", "dropout", "iota",
    "max8", "memset", "nc_find_index8", "nc_match_replace8", "nc_matmul",
    "nc_stream_shuffle", "nc_transpose", "partition_broadcast", "range_select", "reciprocal",
    "scalar_tensor_tensor", "select", "select_reduce", "tensor_copy", "tensor_copy_predicated",
    "tensor_partition_reduce", "tensor_reduce", "tensor_scalar", "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor",
    "tensor_tensor_operands",
    "tensor_tensor_scan",
]

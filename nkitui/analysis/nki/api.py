"""What the analysis knows about each NKI API: its kind and the engine that runs it.

Names are canonical, independent of import aliases and namespace: `nl.*` (language), `nisa.*`
(isa), `nki.*` (top level), `ncc.*` (compiler), `nt.*` (typing). See nki-spec §3 and §4.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ApiInfo:
    kind: str
    engine: str | None  # "tensor" | "vector" | "scalar" | "gpsimd" | "dma" | "sync" | None


def _table() -> dict[str, ApiInfo]:
    t: dict[str, ApiInfo] = {}

    def put(kind: str, engine: str | None, *names: str) -> None:
        for name in names:
            t[name] = ApiInfo(kind, engine)

    # Data movement.
    put("dma_load", "dma", "nl.load")
    put("dma_load_transpose", "dma", "nl.load_transpose2d")
    put("dma_store", "dma", "nl.store")
    put("dma_rmw", "dma", "nl.atomic_rmw", "nisa.dma_compute")
    put("dma", "dma", "nisa.dma_copy")
    put("dma_transpose", "dma", "nisa.dma_transpose")
    put("copy", "vector", "nl.copy", "nisa.tensor_copy", "nisa.tensor_copy_dynamic_src",
        "nisa.tensor_copy_dynamic_dst", "nisa.tensor_copy_predicated")
    put("broadcast", "tensor", "nl.broadcast_to")
    put("gather", "gpsimd", "nl.gather_flattened", "nisa.local_gather", "nisa.nc_n_gather")
    # Creation.
    put("alloc", None, "nl.ndarray", "nl.zeros", "nl.ones", "nl.full", "nl.zeros_like", "nl.ones_like",
        "nl.empty_like", "nl.full_like", "nl.rand", "nl.shared_constant", "nl.shared_identity_matrix")
    # Indexing, loops, SPMD.
    put("index", None, "nl.arange", "nl.mgrid", "nl.ds", "nl.par_dim")
    put("loop", None, "nl.affine_range", "nl.sequential_range", "nl.static_range", "nl.dynamic_range",
        "nl.fori_loop", "nl.while_loop")
    put("spmd", None, "nl.program_id", "nl.num_programs", "nl.program_ndim", "nl.nc", "nl.spmd_dim")
    # Element-wise binary math (VectorE; nki-spec §3.4).
    put("elementwise", "vector", "nl.add", "nl.subtract", "nl.multiply", "nl.divide", "nl.power", "nl.maximum",
        "nl.minimum", "nl.fmod", "nl.mod", "nl.equal", "nl.not_equal", "nl.less", "nl.less_equal", "nl.greater",
        "nl.greater_equal", "nl.logical_and", "nl.logical_or", "nl.logical_xor", "nl.bitwise_and",
        "nl.bitwise_or", "nl.bitwise_xor", "nl.left_shift", "nl.right_shift", "nl.abs_max", "nl.abs_min",
        "nl.where", "nl.dropout", "nl.negative", "nl.invert", "nl.logical_not", "nl.ceil", "nl.floor",
        "nl.trunc")
    # Unary functions that map to ScalarE `activation`.
    put("activation_fn", "scalar", "nl.abs", "nl.sign", "nl.square", "nl.sqrt", "nl.rsqrt", "nl.reciprocal",
        "nl.exp", "nl.log", "nl.sin", "nl.cos", "nl.tan", "nl.arctan", "nl.tanh", "nl.sigmoid", "nl.relu",
        "nl.gelu", "nl.gelu_apprx_tanh", "nl.gelu_apprx_sigmoid", "nl.gelu_dx", "nl.gelu_apprx_sigmoid_dx",
        "nl.silu", "nl.silu_dx", "nl.softplus", "nl.mish", "nl.erf", "nl.erf_dx", "nl.prelu", "nl.copy_fn")
    put("reduce", "vector", "nl.sum", "nl.max", "nl.min", "nl.mean", "nl.prod", "nl.var", "nl.all",
        "nl.loop_reduce", "nisa.tensor_reduce")
    put("composite", "scalar", "nl.softmax", "nl.rms_norm")
    put("matmul", "tensor", "nl.matmul", "nisa.nc_matmul", "nisa.nc_matmul_mx")
    put("transpose", "tensor", "nl.transpose", "nisa.nc_transpose")
    # ISA.
    put("activation", "scalar", "nisa.activation", "nisa.activate2")
    put("activation_reduce", "scalar", "nisa.activation_reduce")
    put("tensor_tensor", "vector", "nisa.tensor_tensor")
    put("tensor_scalar", "vector", "nisa.tensor_scalar")
    put("scalar_tensor_tensor", "vector", "nisa.scalar_tensor_tensor")
    put("tensor_scalar_reduce", "vector", "nisa.tensor_scalar_reduce", "nisa.tensor_scalar_cumulative")
    put("partition_reduce", "gpsimd", "nisa.tensor_partition_reduce")
    put("scan", "vector", "nisa.tensor_tensor_scan")
    put("memset", "vector", "nisa.memset")
    put("iota", "gpsimd", "nisa.iota")
    put("select", "gpsimd", "nisa.affine_select")
    put("select", "vector", "nisa.range_select", "nisa.select_reduce")
    put("bn_stats", "vector", "nisa.bn_stats")
    put("bn_aggr", "vector", "nisa.bn_aggr")
    put("reciprocal", "vector", "nisa.reciprocal")
    put("activation", "vector", "nisa.exponential")
    put("elementwise", "vector", "nisa.dropout")
    put("shuffle", "vector", "nisa.nc_stream_shuffle")
    put("topk", "vector", "nisa.max8", "nisa.nc_find_index8", "nisa.nc_match_replace8")
    put("topk", "gpsimd", "nisa.topk", "nisa.sequence_bounds")
    put("rng", "vector", "nisa.rng", "nisa.rand2", "nisa.set_rng_seed", "nisa.rand_set_state",
        "nisa.rand_get_state", "nl.random_seed")
    put("quantize", "vector", "nisa.quantize_mx", "nisa.nonzero_with_count")
    put("register", "sync", "nisa.register_alloc", "nisa.register_move", "nisa.register_load",
        "nisa.register_store")
    put("collective", "dma", "nisa.sendrecv", "nisa.core_barrier", "nl.all_reduce")
    put("query", None, "nisa.get_nc_version", "nisa.get_nc_sub_version")
    put("debug", None, "nl.device_print")
    put("schedule", None, "nl.no_reorder")
    return t


API: dict[str, ApiInfo] = _table()

# Kinds that execute an instruction on an engine (the analysis records them as operations).
DEVICE_KINDS = frozenset(
    k for k in {info.kind for info in API.values()}
    if k not in {"alloc", "index", "loop", "spmd", "query", "debug", "schedule"}
)

DMA_KINDS = frozenset({"dma_load", "dma_load_transpose", "dma_store", "dma", "dma_transpose", "dma_rmw"})

# ISA calls in the new namespace that return a value instead of taking a destination first.
NEW_RETURNING = frozenset({"nisa.register_alloc", "nisa.get_nc_version", "nisa.get_nc_sub_version"})

# Keyword names that name the destination of an ISA call.
DST_KEYWORDS = ("dst", "out", "output", "result")

# Keyword arguments that receive a second result (besides the destination / return value).
EXTRA_OUTPUT_KEYWORDS = ("reduce_res", "dst_scale", "val_dst", "idx_dst")

# `nl.tile_size.*` constants whose values are documented (nki-spec §3.2).
TILE_SIZE = {
    "pmax": 128,
    "psum_fmax": 512,
    "psum_bank_fmax": 512,
    "gemm_stationary_fmax": 128,
    "gemm_moving_fmax": 512,
    "bn_stats_fmax": 512,
    "psum_num_banks": 8,
    "psum_bank_fmax_bytes": 2048,
}

# `nisa.engine.*`, `nisa.*_engine` and string spellings of engines.
ENGINE_NAMES = {
    "tensor": "tensor", "tensor_engine": "tensor", "pe": "tensor",
    "vector": "vector", "vector_engine": "vector", "dve": "vector",
    "scalar": "scalar", "scalar_engine": "scalar", "act": "scalar", "activation": "scalar",
    "gpsimd": "gpsimd", "gpsimd_engine": "gpsimd", "pool": "gpsimd",
    "dma": "dma", "dma_engine": "dma", "sync": "sync", "sync_engine": "sync",
}

# Canonical dtype names reachable as `nl.<name>` / `np.<name>` / `torch.<name>`.
DTYPE_ATTRS = {
    "float32", "float16", "bfloat16", "tfloat32", "float32r", "float8_e4m3", "float8_e5m2", "float8_e4m3fn",
    "float8_e8m0fnu", "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "bool_", "float64", "half", "float", "double", "bool",
}

BUFFER_ATTRS = {"sbuf": "sbuf", "psum": "psum", "hbm": "hbm", "private_hbm": "hbm", "shared_hbm": "shared_hbm"}

# Binary element-wise ops by canonical name -> the ALU operation they perform.
ALU_OP = {
    "nl.add": "add", "nl.subtract": "subtract", "nl.multiply": "multiply", "nl.divide": "divide",
    "nl.maximum": "maximum", "nl.minimum": "minimum", "nl.power": "power",
    "operator.add": "add", "operator.sub": "subtract", "operator.mul": "multiply", "operator.truediv": "divide",
}

# Activation functions that ScalarE applies after `x*scale + bias` (nki-spec §4.2).
ACTIVATION_FNS = frozenset({
    "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_tanh", "gelu_apprx_sigmoid", "silu",
    "softplus", "mish", "erf", "square", "sqrt", "rsqrt", "reciprocal", "sin", "arctan", "abs", "sign", "copy",
    "gelu_dx", "silu_dx", "erf_dx",
})


def info(name: str) -> ApiInfo | None:
    return API.get(name)

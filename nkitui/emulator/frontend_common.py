"""What the legacy (`neuronxcc.nki`) and new (`nki`) front ends share.

Both namespaces expose the same host-side constants and helpers (`nl.fp32`, `nl.finfo`,
`nl.static_cast`, the fixed `nl.tile_size` limits), the same element-wise operator names, the same
result-dtype rule for binary operators, and the same `nisa.engine` / `nisa.nc_version` enums. They
live here once; each front end keeps its own calling style (masks and return-style tiles in
legacy, destination-first calls in `nki`) and the names whose behaviour really differs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, SupportsInt, cast

import numpy as np

from nkitui.emulator import dtypes as _dt
from nkitui.emulator.errors import EngineDtypeError, EngineMemoryError, OperandShapeError
from nkitui.emulator.targets import PMAX
from nkitui.emulator.tensor import Tensor

if TYPE_CHECKING:
    import ml_dtypes

    from nkitui.emulator.engine.common import Scalar


# -- nl host-side constants and helpers ------------------------------------------------------------
class FloatConstants:
    """`nl.fp32.min` / `nl.bfp16.min`: the most negative finite value (also usable as a dtype)."""

    def __init__(self, d: _dt.DType, min_value: float) -> None:
        self.nki_dtype = d
        self.min = min_value

    def __repr__(self) -> str:
        return f"<nl constants for {self.nki_dtype.name}>"


fp32 = FloatConstants(_dt.float32, float(np.finfo(np.float32).min))
bfp16: FloatConstants  # made on first use (module __getattr__): ml_dtypes costs ~0.65 s of CPU to import


def __getattr__(name: str) -> FloatConstants:
    if name == "bfp16":
        value = FloatConstants(_dt.bfloat16, _bf16_min())
        globals()["bfp16"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _bf16_min() -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)


def finfo(dtype: object) -> ml_dtypes.finfo:
    import ml_dtypes

    return ml_dtypes.finfo(_dt.dtype_of(dtype).np)


def static_cast(input_data: object, dtype: object) -> np.ndarray | np.generic:
    """Host-side cast of a scalar or array to an NKI dtype (bf16/fp8 via ml_dtypes, RNE)."""
    d = _dt.dtype_of(dtype)
    arr = np.asarray(input_data)
    if d is _dt.tfloat32:
        return _dt.round_tf32(arr.astype(np.float32))
    out = arr.astype(d.np)
    return out if isinstance(input_data, np.ndarray) else out[()]


class TileSizeLimits:
    """The `nl.tile_size` limits that do not depend on the target; each front end adds the
    target-dependent ones (usable SBUF bytes, PSUM banks)."""

    pmax = PMAX
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    bn_stats_dim = 6
    bn_aggr_dim = 2
    psum_min_align = 4  # bytes (not documented; fp32 element alignment assumed)
    sbuf_min_align = 1  # bytes (not documented)


def invert_operand(x: Tensor) -> int:
    """nl.invert in both namespaces: the all-ones XOR operand of `x`'s integer dtype (-1 for signed, the
    type's maximum for unsigned); a float or bool tile is refused. Both namespaces' docs define it on
    integers only ("Input must be integer typed. Implemented as XOR with all-ones", nki.language.invert;
    the legacy page: "the bit-wise NOT of the underlying binary representation of the integers")."""
    d = x.storage.dtype
    if d.kind not in ("i", "u"):
        alt = "; for a mask, nl.logical_not gives its negation" if d.kind == "b" else ""
        raise EngineDtypeError(f"nl.invert: x must be an integer tile, got {d.name} (nki.language.invert: "
                               f"'Input must be integer typed. Implemented as XOR with all-ones'){alt}")
    return -1 if d.kind == "i" else int(np.iinfo(d.np).max)


def hbm_operand_error(api: str, role: str) -> EngineMemoryError:
    """The error for an HBM tensor passed where a compute instruction reads an SBUF/PSUM tile (the
    callers test the memory inline: this check runs on every instruction)."""
    return EngineMemoryError(f"Expected operand '{role}' of '{api}' to be in address space 'psum|sbuf', but got a "
                             "tensor in 'hbm' (nl.load it into SBUF first)")


# -- element-wise operators --------------------------------------------------------------------------
# nl functions that both namespaces lower to VectorE tensor_tensor / tensor_scalar
BINARY_OPS = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "fmod", "mod", "equal",
              "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
              "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
# nl functions that both namespaces lower to one ScalarE activation
ACTIVATION_OPS = ("exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_tanh", "gelu_apprx_sigmoid",
                  "gelu_dx", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx", "square", "sqrt", "cos",
                  "tan", "arctan", "sign", "abs", "ceil", "floor", "trunc")
# binary operators whose result is a predicate (bool unless a dtype is given)
COMPARE_OPS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
               "logical_xor")


def define_ops(namespace: dict[str, Any], names: Iterable[str], factory: Callable[[str], object]) -> None:
    """Bind `factory(name)` to each name in a front end's module namespace (`nl.add`, `nl.exp`, ...)."""
    for name in names:
        namespace[name] = factory(name)


def operand_dtype(x: Tensor | Scalar) -> _dt.DType:
    return x.storage.dtype if isinstance(x, Tensor) else _dt.scalar_dtype(x)


def binary_result_dtype(name: str, x: Tensor | Scalar, y: Tensor | Scalar, dtype: object) -> _dt.DType:
    """The dtype of `nl.<name>(x, y, dtype=dtype)`: the one asked for, bool for comparisons, else
    the promotion of the operands' dtypes (a scalar operand counts by its Python type)."""
    if dtype is not None:
        return _dt.dtype_of(dtype)
    if name in COMPARE_OPS:
        return _dt.bool_
    return _dt.promote(operand_dtype(x), operand_dtype(y))


def binary_result_shape(api: str, x: Tensor | Scalar, y: Tensor | Scalar) -> tuple[int, ...]:
    """The shape of an element-wise binary op with at least one tile operand: the NumPy broadcast of
    two tiles' shapes, or the one tile's shape."""
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        try:
            return tuple(np.broadcast_shapes(x.shape, y.shape))
        except ValueError:
            raise OperandShapeError(f"{api}: operand shapes {x.shape} and {y.shape} do not broadcast") from None
    tile = x if isinstance(x, Tensor) else y
    assert isinstance(tile, Tensor)  # the callers pass at least one tile
    return tile.shape


# -- nisa enums ------------------------------------------------------------------------------------
class engine(enum.IntEnum):
    """Neuron Device engines."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


unknown_engine = engine.unknown
tensor_engine = engine.tensor
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
vector_engine = engine.vector
sync_engine = engine.sync


class nc_version(enum.IntEnum):
    """NeuronCore version: gen2 (trn1/inf2), gen3 (trn2), gen4 (trn3)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


_ENGINE_NAMES = {int(e): (None if e is engine.unknown else e.name) for e in engine}


def engine_name(e: object) -> str | None:
    """An engine constant (an enum member of either namespace, an int, or a name) -> engine name;
    None = let the emulator choose (engine.unknown)."""
    if e is None:
        return None
    if type(e) is int:  # the legacy default `engine=0`: on the path of every legacy ISA call
        return _ENGINE_NAMES.get(e)
    if type(e) is engine:  # every nki ISA call: the member's value (its .name is two Python calls, its hash one)
        return _ENGINE_NAMES.get(e._value_)
    if isinstance(e, str):
        return None if e in ("", "unknown") else e
    name = getattr(e, "name", None)
    if isinstance(name, str):
        return None if name == "unknown" else name
    try:
        return _ENGINE_NAMES.get(int(cast(SupportsInt, e)))  # any object: int() says whether it is a number
    except (ValueError, TypeError):
        return None

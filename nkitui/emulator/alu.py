"""Operators: ALU binary ops (Vector/GpSimd/Scalar), activation functions (ScalarE), reductions.

One table serves both front ends. An op is identified by its NKI name; `resolve_*` accept that
name, the front end's function object (`nl.exp`, registered by the front end), or the numpy ufunc
/ function that legacy kernels pass (`np.add`, `np.exp`, `np.max`). All arithmetic runs in fp32
(the engines' internal precision); bit-vector ops work on the raw integer bits.
"""

from __future__ import annotations

import types

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator.errors import EngineOpError

_F32 = np.float32
# What the ops compute on: fp32 arrays (raw integer bits for bit-vector ops), a numpy scalar where an operand is one.
# numpy's stubs type ufunc results as Any, so the functions below name their result type on a local.
Values = NDArray[Any]
Arg = NDArray[Any] | np.generic | float  # an operand: an array, or a scalar broadcast over it
BinaryFn = Callable[[Arg, Arg], Values]
# (x, axis or axes) -> reduced: a numpy scalar when every axis is reduced
ReduceFn = Callable[[Values, Any], NDArray[Any] | np.generic]
UnaryFn = Callable[[Values], Values]


@dataclass(frozen=True, slots=True)
class BinaryOp:
    name: str
    fn: BinaryFn  # fn(a, b) on fp32 arrays (arith/compare/logical) or integer arrays (bitvec)
    kind: str  # "arith" | "compare" | "logical" | "bitvec"
    reduce: ReduceFn | None = None  # fn(x, axis) -> reduced, for tensor_reduce & friends
    identity: float | None = None  # neutral element (masked reductions)
    engines: tuple[str, ...] = ("vector", "gpsimd", "scalar")


@dataclass(frozen=True, slots=True)
class ActivationFn:
    name: str
    fn: UnaryFn  # fn(x) on fp32 arrays


# Floating-point warnings (overflow, 0/0) are silenced for the whole kernel launch by the launcher,
# so the op functions call numpy directly (np.errstate per instruction would cost microseconds).


def _f32(fn: BinaryFn) -> BinaryFn:
    def run(a: Arg, b: Arg) -> Values:
        r = fn(a, b)
        return r if r.dtype == _F32 else r.astype(_F32)
    return run


def _cmp(fn: BinaryFn) -> BinaryFn:
    def run(a: Arg, b: Arg) -> Values:
        return fn(a, b).astype(_F32)
    return run


def _logical(fn: BinaryFn) -> BinaryFn:
    def run(a: Arg, b: Arg) -> Values:
        return fn(a != 0, b != 0).astype(_F32)
    return run


def _divide(a: Arg, b: Arg) -> Values:
    quotient: Values = np.divide(a, b, dtype=_F32)
    return quotient


def _fold_subtract(x: Values, axis: int | Sequence[int]) -> Values:
    """Left fold of subtraction over the reduced axes: x0 - x1 - x2 - ..."""
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    keep = [d for d in range(x.ndim) if d not in axes]
    flat = np.transpose(x, keep + list(axes)).reshape([x.shape[d] for d in keep] + [-1])
    folded: Values = (flat[..., 0] - flat[..., 1:].sum(axis=-1, dtype=_F32)).astype(_F32)
    return folded


def _rsqrt_bin(a: Arg, b: Arg) -> Values:
    y: Values = (1.0 / np.sqrt(a)).astype(_F32)
    return y


BINARY: dict[str, BinaryOp] = {}


def _add(op: BinaryOp, *aliases: str) -> None:
    BINARY[op.name] = op
    for a in aliases:
        BINARY[a] = op


_add(BinaryOp("add", _f32(np.add), "arith", lambda x, axis: np.sum(x, axis=axis, dtype=_F32), 0.0))
_add(BinaryOp("subtract", _f32(np.subtract), "arith", _fold_subtract, 0.0))
_add(BinaryOp("multiply", _f32(np.multiply), "arith", lambda x, axis: np.prod(x, axis=axis, dtype=_F32), 1.0))
_add(BinaryOp("divide", _divide, "arith"), "true_divide")
_add(BinaryOp("maximum", _f32(np.maximum), "arith", lambda x, axis: np.max(x, axis=axis), -np.inf), "max", "amax")
_add(BinaryOp("minimum", _f32(np.minimum), "arith", lambda x, axis: np.min(x, axis=axis), np.inf), "min", "amin")
_add(BinaryOp("power", _f32(np.power), "arith", engines=("gpsimd",)))
_add(BinaryOp("fmod", _f32(np.fmod), "arith"))
_add(BinaryOp("mod", _f32(np.mod), "arith"), "remainder")
_add(BinaryOp("abs_max", _f32(lambda a, b: np.where(np.abs(a) > np.abs(b), a, b)), "arith"))
_add(BinaryOp("abs_min", _f32(lambda a, b: np.where(np.abs(a) < np.abs(b), a, b)), "arith"))
_add(BinaryOp("rsqrt", _rsqrt_bin, "arith"))
_add(BinaryOp("equal", _cmp(np.equal), "compare"))
_add(BinaryOp("not_equal", _cmp(np.not_equal), "compare"))
_add(BinaryOp("greater", _cmp(np.greater), "compare"))
_add(BinaryOp("greater_equal", _cmp(np.greater_equal), "compare"))
_add(BinaryOp("less", _cmp(np.less), "compare"))
_add(BinaryOp("less_equal", _cmp(np.less_equal), "compare"))
_add(BinaryOp("logical_and", _logical(np.logical_and), "logical", lambda x, axis: np.all(x != 0, axis=axis).astype(_F32), 1.0))
_add(BinaryOp("logical_or", _logical(np.logical_or), "logical", lambda x, axis: np.any(x != 0, axis=axis).astype(_F32), 0.0))
_add(BinaryOp("logical_xor", _logical(np.logical_xor), "logical"))
_add(BinaryOp("bitwise_and", np.bitwise_and, "bitvec", lambda x, axis: np.bitwise_and.reduce(x, axis=axis), -1))
_add(BinaryOp("bitwise_or", np.bitwise_or, "bitvec", lambda x, axis: np.bitwise_or.reduce(x, axis=axis), 0))
_add(BinaryOp("bitwise_xor", np.bitwise_xor, "bitvec", lambda x, axis: np.bitwise_xor.reduce(x, axis=axis), 0))
_add(BinaryOp("left_shift", np.left_shift, "bitvec"))
_add(BinaryOp("right_shift", np.right_shift, "bitvec"))
_add(BinaryOp("arith_shift_right", np.right_shift, "bitvec"))


# -- activation functions -----------------------------------------------------------------------

def erf(values: Values) -> Values:
    """erf in float64 (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7, below fp32 resolution)."""
    x = np.asarray(values, dtype=np.float64)
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y: Values = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-a * a)
    return s * y


def _sigmoid(x: Values) -> Values:
    y: Values = 1.0 / (1.0 + np.exp(-x))
    return y


def _gelu(x: Values) -> Values:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _gelu_tanh(x: Values) -> Values:
    y: Values = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    return y


def _gelu_dx(x: Values) -> Values:
    y: Values = 0.5 * (1.0 + erf(x / np.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return y


def _silu_dx(x: Values) -> Values:
    s = _sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def _softplus(x: Values) -> Values:
    y: Values = np.logaddexp(0.0, x)
    return y


_ACT_DEFS: dict[str, UnaryFn] = {
    "copy": lambda x: x,
    "identity": lambda x: x,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": _gelu,
    "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "gelu_dx": _gelu_dx,
    "silu": lambda x: x * _sigmoid(x),
    "silu_dx": _silu_dx,
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "erf": erf,
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
    "square": np.square,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "abs": np.abs,
    "sign": np.sign,
    "negative": np.negative,
    "sin": np.sin,  # ScalarE sin has no range reduction: valid input range [-pi, pi]
    "cos": np.cos,
    "tan": np.tan,
    "arctan": np.arctan,
    "ceil": np.ceil,
    "floor": np.floor,
    "trunc": np.trunc,
}

ACTIVATIONS: dict[str, ActivationFn] = {}
for _n, _f in _ACT_DEFS.items():
    def _wrap(f: UnaryFn = _f) -> UnaryFn:
        def run(x: Values) -> Values:
            return np.asarray(f(x)).astype(_F32, copy=False)
        return run
    ACTIVATIONS[_n] = ActivationFn(_n, _wrap())


# -- resolution of user-supplied op objects -----------------------------------------------------

_NUMPY_NAMES: dict[object, str] = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.true_divide: "divide", np.maximum: "maximum", np.minimum: "minimum", np.power: "power",
    np.fmod: "fmod", np.mod: "mod", np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater",
    np.greater_equal: "greater_equal", np.less: "less", np.less_equal: "less_equal",
    np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_xor: "logical_xor",
    np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift", np.right_shift: "right_shift", np.max: "maximum", np.min: "minimum",
    np.amax: "maximum", np.amin: "minimum", np.sum: "add", np.prod: "multiply",
    np.exp: "exp", np.log: "log", np.tanh: "tanh", np.square: "square", np.sqrt: "sqrt",
    np.reciprocal: "reciprocal", np.abs: "abs", np.absolute: "abs", np.sign: "sign",
    np.negative: "negative", np.sin: "sin", np.cos: "cos", np.tan: "tan", np.arctan: "arctan",
    np.ceil: "ceil", np.floor: "floor", np.trunc: "trunc", np.copy: "copy", np.mean: "mean",
}
# keyed by object.__hash__ (identity like id(), without id()'s audit event, which the kernel's process hooks)
_key = object.__hash__
_REGISTERED: dict[int, str] = {}


class OpError(EngineOpError, TypeError):
    """An op argument that is not a known ALU operator / activation function."""


def register(fn: object, name: str) -> None:
    """Front ends register their op functions (e.g. legacy `nl.exp`) under an NKI op name."""
    _REGISTERED[_key(fn)] = name


def op_name(obj: object) -> str | None:
    if isinstance(obj, str):
        return obj
    n = _REGISTERED.get(_key(obj))
    if n is not None:
        return n
    try:
        n = _NUMPY_NAMES.get(obj)
    except TypeError:
        n = None
    if n is not None:
        return n
    named = getattr(obj, "nki_op_name", None)
    return named if named is None or isinstance(named, str) else str(named)


_FAST_BINARY: dict[int, BinaryOp] = {}


# The same cache keyed by the object itself, for Python functions and numpy ufuncs only: their hash and
# equality are identity, in C (no task-defined __hash__ or __eq__ runs), and the look-up needs no call of
# object.__hash__ (a slot wrapper: an argument tuple per call). Every instruction resolves its operators.
_IDENTITY_HASHED = frozenset({types.FunctionType, np.ufunc})
_FAST_BY_OBJECT: dict[object, BinaryOp] = {}


def resolve_binary(obj: object, what: str = "op") -> BinaryOp:
    if type(obj) in _IDENTITY_HASHED:
        op = _FAST_BY_OBJECT.get(obj)
        if op is not None:
            return op
    op = _FAST_BINARY.get(_key(obj)) if not isinstance(obj, str) else BINARY.get(obj)
    if op is not None:
        return op
    name = op_name(obj)
    op = BINARY.get(name) if name else None
    if op is not None and not isinstance(obj, str) and (_key(obj) in _REGISTERED or obj in _NUMPY_NAMES):
        _FAST_BINARY[_key(obj)] = op  # long-lived op objects (nl functions, numpy ufuncs) only
        if type(obj) in _IDENTITY_HASHED:
            _FAST_BY_OBJECT[obj] = op
    if op is None:
        raise OpError(f"{what}={_show(obj)} is not an ALU operator: use e.g. nl.add, nl.multiply, "
                      "nl.maximum, nl.subtract, np.add")
    return op


def resolve_activation(obj: object, what: str = "op") -> ActivationFn:
    name = op_name(obj)
    act = ACTIVATIONS.get(name) if name else None
    if act is None:
        raise OpError(f"{what}={_show(obj)} is not an activation function: use e.g. nl.exp, nl.tanh, "
                      "nl.copy, nl.gelu, nl.silu, nl.rsqrt")
    return act


def _show(obj: object) -> str:
    return str(getattr(obj, "__name__", None) or repr(obj))

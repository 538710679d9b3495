"""Engine-sequencer registers (`nisa.register_alloc` and friends) and dynamic scalars.

The emulator executes eagerly, so a register simply holds its current 32-bit integer value.
Registers index tensors (`t[reg]`, `nl.ds(reg * 128, 128)`), bound `nl.fori_loop` /
`nl.dynamic_range` loops and drive `nl.while_loop`; arithmetic on them gives plain ints.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, SupportsInt, TypeAlias

import numpy as np

from nkitui.emulator.errors import OperandShapeError


# an integer operand of the nki namespace: an int, a numpy integer or a register (its current value)
IntLike: TypeAlias = "int | np.integer[Any] | VirtualRegister"


def _i32(v: SupportsInt) -> int:
    """Wrap to a signed 32-bit value (registers are 32 bits wide)."""
    v = int(v) & 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


class VirtualRegister:
    """A 32-bit sequencer register (value known at run time, here: always)."""

    __slots__ = ("value", "frozen", "name")

    def __init__(self, state: SupportsInt | None = None, frozen: bool = False, name: str = "") -> None:
        self.value = 0 if state is None else _i32(state)
        self.frozen = frozen  # loop counters handed to a body: writing them has no effect on the loop
        self.name = name

    def set(self, value: SupportsInt) -> None:
        self.value = _i32(value)

    def __index__(self) -> int:
        return self.value

    def __int__(self) -> int:
        return self.value

    def __float__(self) -> float:
        return float(self.value)

    def __bool__(self) -> bool:
        return self.value != 0

    def __repr__(self) -> str:
        return f"VirtualRegister({self.value})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VirtualRegister):
            return self.value == other.value
        return self.value == other

    def __hash__(self) -> int:
        return id(self)

    def __neg__(self) -> int:
        return -self.value

    # the binary operators (+ - * // % << >> & | ^ / < <= > >= and their reflected forms) are set below


def _binop(fn: Callable[[Any, Any], Any], reflected: bool = False) -> Callable[[VirtualRegister, object], Any]:
    # operands are whatever the kernel wrote (ints, registers, numpy integers); the result is the operator's
    def method(self: VirtualRegister, other: object) -> Any:
        o = other.value if isinstance(other, VirtualRegister) else other
        return fn(o, self.value) if reflected else fn(self.value, o)
    return method


for _name, _fn in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("floordiv", operator.floordiv), ("mod", operator.mod), ("lshift", operator.lshift),
                   ("rshift", operator.rshift), ("and", operator.and_), ("or", operator.or_),
                   ("xor", operator.xor), ("lt", operator.lt), ("le", operator.le), ("gt", operator.gt),
                   ("ge", operator.ge), ("truediv", operator.truediv)):
    setattr(VirtualRegister, f"__{_name}__", _binop(_fn))
    if _name not in ("lt", "le", "gt", "ge"):
        setattr(VirtualRegister, f"__r{_name}__", _binop(_fn, reflected=True))


def scalar_value(x: object, what: str) -> int:
    """An int from an int, a register, or a 1-element tensor (its current value)."""
    from nkitui.emulator.runtime import current
    from nkitui.emulator.tensor import Tensor

    if isinstance(x, VirtualRegister):
        return x.value
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, Tensor):
        if x.size != 1:
            raise OperandShapeError(f"{what} must be a 1-element tensor (shape (1, 1)), got shape {x.shape}")
        if not current().execute or x.storage.data is None:
            return 0  # shape-only mode: run-time values are unknown
        return int(np.asarray(x.array()).reshape(-1)[0].astype(np.int64))
    raise OperandShapeError(f"{what} must be an int, a VirtualRegister or a (1, 1) tensor, got {type(x).__name__}")

"""Operators the nki namespace adds to the shared ALU / activation tables (nkitui.emulator.alu).

* `abs` as an ALU operator (tensor_scalar's unary form: `op0=nl.abs, operand0=0`);
* `bypass`: passes its left operand through (activate2's "no operation" stage, also usable as op1
  of tensor_scalar);
* `gelu_apprx_sigmoid_dx`: derivative of the sigmoid GELU approximation x * sigmoid(1.702 x).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import alu

_F32 = np.float32
# an ALU operand: an fp32 array, or a scalar broadcast over it (the engine's BinaryOp convention)
_Arg = NDArray[Any] | np.generic | float


def _abs(a: _Arg, b: _Arg) -> NDArray[np.float32]:
    return np.abs(a).astype(_F32, copy=False)


def _bypass(a: _Arg, b: _Arg) -> NDArray[np.float32]:
    return np.asarray(a, dtype=_F32)


def _gelu_sigmoid_dx(x: NDArray[np.float32]) -> NDArray[np.float32]:
    s = 1.0 / (1.0 + np.exp(-1.702 * x))
    return np.asarray(s + 1.702 * x * s * (1.0 - s)).astype(_F32, copy=False)


alu.BINARY.setdefault("abs", alu.BinaryOp("abs", _abs, "arith"))
alu.BINARY.setdefault("bypass", alu.BinaryOp("bypass", _bypass, "arith"))
alu.ACTIVATIONS.setdefault("gelu_apprx_sigmoid_dx", alu.ActivationFn("gelu_apprx_sigmoid_dx", _gelu_sigmoid_dx))

"""Types of the arguments the NKI API takes, for both front ends' signatures.

NKI's calling conventions are dynamic: an operator is an nl function, a numpy ufunc or its name; an
operand is a tile or a scalar broadcast to every element. The engine resolves and checks each at run
time (`alu.resolve_binary`, `engine.common.scalar_or_vector`, ...), because kernels are not type
checked; these aliases say in a signature what a kernel may pass. `Dims` is the range-view layout both
front ends' tensor classes pass to `Tensor`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, SupportsInt, TypeAlias

import numpy as np

from nkitui.emulator.tensor import Tensor

Op: TypeAlias = "Callable[..., object] | str"  # an ALU or activation operator: nl.add, np.add, "add"
Scalar: TypeAlias = "bool | int | float | np.integer[Any] | np.floating[Any]"  # a Python or numpy number
Operand: TypeAlias = "Tensor | Scalar"  # a tile, or a scalar for every element
DTypeLike: TypeAlias = object  # any dtype spelling (nl constant, numpy type or dtype, name): dtypes.dtype_of resolves it
Shape: TypeAlias = "int | Sequence[SupportsInt]"  # a tensor shape: sizes per dimension (one int for 1-D)
# a range view's entries (Tensor.dims): (start, step, length, result axis) per storage dimension; None for a
# gather view
Dims: TypeAlias = "tuple[tuple[int, int, int, int], ...] | None"
Axis: TypeAlias = "SupportsInt | list[SupportsInt] | tuple[SupportsInt, ...]"  # one axis or several

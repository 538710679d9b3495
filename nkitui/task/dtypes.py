"""Element types a task may declare for its inputs and outputs, mapped to numpy dtypes.

Validating a manifest needs only the names; numpy and ml_dtypes are imported the first time a real
dtype is asked for, so loading a task (every command does) stays cheap.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from nkitui.common.names import DTYPE_ALIASES as ALIASES
from nkitui.common.names import DTYPE_NAMES, FLOAT_DTYPE_NAMES

__all__ = ["ALIASES", "DTYPE_NAMES", "canonical_dtype_name", "dtype_name", "is_float", "numpy_dtype"]

_FLOAT_NAMES = frozenset(FLOAT_DTYPE_NAMES)


@cache
def _dtypes() -> dict[str, "np.dtype"]:
    # ml_dtypes provides the bf16/fp8 types with round-to-nearest-even casts.
    import ml_dtypes
    import numpy as np

    table = {
        "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
        "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
        "float8_e5m2": ml_dtypes.float8_e5m2, "int8": np.int8, "int16": np.int16, "int32": np.int32,
        "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "bool": np.bool_,
    }
    return {name: np.dtype(table[name]) for name in DTYPE_NAMES}


def canonical_dtype_name(name: str) -> str | None:
    """The manifest name for `name` (accepting common aliases), or None if unknown."""
    name = ALIASES.get(name, name)
    return name if name in DTYPE_NAMES else None


_NARROW_NAMES = frozenset({"bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"})


def numpy_dtype(name: str) -> "np.dtype":
    canonical = canonical_dtype_name(name)
    if canonical is None:
        raise KeyError(name)
    if canonical not in _NARROW_NAMES:  # numpy's own types: no need to import ml_dtypes (~0.5 s of CPU)
        import numpy as np

        return np.dtype(canonical)
    return _dtypes()[canonical]


def dtype_name(dtype: "np.typing.DTypeLike") -> str:
    """The manifest name of a numpy dtype (inverse of numpy_dtype)."""
    import numpy as np

    dt = np.dtype(dtype)
    if dt.kind != "V":  # numpy's own types are named as the manifest names them; ml_dtypes' are opaque
        return dt.name
    for name, candidate in _dtypes().items():
        if candidate == dt:
            return name
    return dt.name


def is_float(name: str) -> bool:
    return canonical_dtype_name(name) in _FLOAT_NAMES

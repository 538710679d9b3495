"""Element types a task may declare for its inputs and outputs, mapped to numpy dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

# Name in a manifest -> numpy dtype. ml_dtypes provides the bf16/fp8 types with round-to-nearest-even
# casts. tfloat32 has no storage type of its own (it lives in 4 bytes), so tasks declare float32.
_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
}

ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32"}

DTYPE_NAMES = tuple(_DTYPES)


def canonical_dtype_name(name: str) -> str | None:
    """The manifest name for `name` (accepting common aliases), or None if unknown."""
    name = ALIASES.get(name, name)
    return name if name in _DTYPES else None


def numpy_dtype(name: str) -> np.dtype:
    canonical = canonical_dtype_name(name)
    if canonical is None:
        raise KeyError(name)
    return _DTYPES[canonical]


def dtype_name(dtype: np.dtype | type) -> str:
    """The manifest name of a numpy dtype (inverse of numpy_dtype)."""
    dt = np.dtype(dtype)
    for name, candidate in _DTYPES.items():
        if candidate == dt:
            return name
    return dt.name


def is_float(name: str) -> bool:
    return canonical_dtype_name(name) in {"float32", "float16", "bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"}

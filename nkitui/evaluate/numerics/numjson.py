"""JSON-safe numbers for numerics results: NaN and infinities become strings and come back."""

from __future__ import annotations

import math
from typing import Any

_SPECIAL = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def jfloat(x: float | None) -> float | str | None:
    """A float as strict JSON allows it: finite floats as they are, 'nan'/'inf'/'-inf' as strings."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def unjfloat(x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, str):
        if x in _SPECIAL:
            return _SPECIAL[x]
        raise ValueError(f"expected a number or 'nan'/'inf'/'-inf', got {x!r}")
    return float(x)


def jfloats(xs: list[float] | tuple[float, ...]) -> list[float | str | None]:
    return [jfloat(x) for x in xs]


def unjfloats(xs: list[Any]) -> list[float]:
    return [unjfloat(x) for x in xs]  # type: ignore[misc]


def jsonable(value: Any) -> Any:
    """Recursively turn numpy scalars/arrays and non-finite floats into strict-JSON values."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return jfloat(float(value))
    return value

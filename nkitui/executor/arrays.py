"""Arrays between the evaluator and its untrusted children: plain .npy files, never pickles.

    meta = save_array(folder / "a.npy", array)      # {"file": "a.npy", "dtype": "bfloat16", "shape": [4, 8]}
    array = load_array(folder, meta, max_elements=n)  # checks the header before reading any data

numpy's .npy cannot name the ml_dtypes types (bf16, fp8): they travel as unsigned integers of their
width and are viewed back by name. The reader trusts nothing in `meta`: the file must be a plain
.npy of numbers, its header must agree with the claimed dtype and shape, and its size must stay
under `max_elements` (so a hostile child cannot make the evaluator read a 10 GB file).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

PLAIN_KINDS = "biufc"  # bool, int, uint, float, complex: numbers only (no objects, strings, records)


class ArrayTransferError(Exception):
    """An array that cannot be passed (e.g. an object array), or a file that is not what it claims."""


NARROW_NAMES = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


@cache
def _narrow_types() -> dict[str, np.dtype]:
    # imported only when a narrow array is met: ml_dtypes costs ~0.6 s of CPU to import
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - ml_dtypes is a core dependency
        return {}
    return {n: np.dtype(getattr(ml_dtypes, n)) for n in NARROW_NAMES if hasattr(ml_dtypes, n)}


def dtype_label(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind == "V":  # the ml_dtypes types are opaque to numpy
        for name, narrow in _narrow_types().items():
            if dtype == narrow:
                return name
    return dtype.name


def save_array(path: Path, array: Any) -> dict[str, Any]:
    arr = np.asarray(array)
    label = dtype_label(arr.dtype)
    if label in NARROW_NAMES and arr.dtype.kind == "V":
        raw = np.ascontiguousarray(arr).view(f"u{arr.dtype.itemsize}")
    elif arr.dtype.kind in PLAIN_KINDS:
        raw = arr
    else:
        raise ArrayTransferError(f"an array of dtype {arr.dtype} cannot be passed: only arrays of numbers can")
    np.save(path, raw, allow_pickle=False)
    return {"file": path.name, "dtype": label, "shape": [int(n) for n in arr.shape]}


def _header(path: Path) -> tuple[tuple[int, ...], np.dtype]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ArrayTransferError(f"{path.name}: unknown .npy version {version}")
    return tuple(int(n) for n in shape), np.dtype(dtype)


def load_array(folder: Path, meta: Any, *, max_elements: int) -> np.ndarray:
    """The array `meta` describes, read from `folder` (the file name may not leave it)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("file"), str) or not isinstance(meta.get("dtype"), str):
        raise ArrayTransferError("the array description is not {file, dtype, shape}")
    name = meta["file"]
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise ArrayTransferError(f"array file name {name!r} leaves its folder")
    path = folder / name
    if not path.is_file() or path.is_symlink():
        raise ArrayTransferError(f"{name} is missing or not a regular file")
    try:
        shape, stored = _header(path)
    except (OSError, ValueError) as exc:
        raise ArrayTransferError(f"{name} is not a readable .npy file: {exc}") from None
    count = 1
    for n in shape:
        count *= n
    if count > max_elements:
        raise ArrayTransferError(f"{name} holds {count} elements, more than the {max_elements} allowed here")
    label = meta["dtype"]
    narrow = _narrow_types().get(label) if label in NARROW_NAMES else None
    if narrow is not None:
        if stored != np.dtype(f"u{narrow.itemsize}"):
            raise ArrayTransferError(f"{name} claims {label} but stores {stored}")
    elif stored.kind not in PLAIN_KINDS or stored.name != label:
        raise ArrayTransferError(f"{name} claims {label} but stores {stored}")
    try:
        arr: np.ndarray = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ArrayTransferError(f"{name} could not be read: {exc}") from None
    if narrow is not None:
        arr = arr.view(narrow)
    return arr

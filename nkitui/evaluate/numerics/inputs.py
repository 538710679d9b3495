"""Inputs generated from a task's manifest policy, and the layout transforms the kernel expects.

Each input gets its own random stream, seeded from (seed, name), so adding an input to a task
never changes the values of the others. Values are drawn in float64 and cast once to the declared
dtype (ml_dtypes rounds to nearest even for bf16/fp8).
"""

from __future__ import annotations

import zlib

import numpy as np

from nkitui.task.dtypes import numpy_dtype
from nkitui.task.model import Task, TensorSpec


def input_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])


def make_input(spec: TensorSpec, seed: int) -> np.ndarray:
    """One input in its natural (reference) layout and declared dtype."""
    dtype = numpy_dtype(spec.dtype)
    dist, p = spec.init.dist, spec.init.params
    rng = input_rng(seed, spec.name)
    shape = spec.shape
    if dist == "normal":
        values = rng.normal(p.get("mean", 0.0), p.get("std", 1.0), size=shape)
    elif dist == "uniform":
        values = rng.uniform(p.get("low", -1.0), p.get("high", 1.0), size=shape)
    elif dist == "randint":
        values = rng.integers(int(p.get("low", 0)), int(p.get("high", 10)), size=shape).astype(np.float64)
    elif dist == "ones":
        values = np.ones(shape)
    elif dist == "zeros":
        values = np.zeros(shape)
    elif dist == "arange":
        values = (p.get("start", 0.0) + p.get("step", 1.0) * np.arange(spec.size, dtype=np.float64)).reshape(shape)
    elif dist == "constant":
        values = np.full(shape, p.get("value", 0.0))
    else:  # validated by the manifest reader; kept for callers that build specs by hand
        raise ValueError(f"unknown distribution {dist!r} for input {spec.name!r}")
    if dtype.kind in "iub":
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        if info is not None:
            values = np.clip(np.rint(values), info.min, info.max)
        return values.astype(dtype)
    return values.astype(dtype)


def make_inputs(task: Task, seed: int) -> dict[str, np.ndarray]:
    """All inputs of `task` for `seed`, natural layout, in manifest order."""
    return {spec.name: make_input(spec, seed) for spec in task.inputs}


def to_kernel_layout(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    """The array as the kernel receives it (e.g. the transpose), contiguous like an HBM tensor."""
    if spec.layout is None:
        return np.ascontiguousarray(array)
    return np.ascontiguousarray(np.transpose(array, spec.layout))


def from_kernel_layout(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    """Undo `to_kernel_layout` on an output the kernel produced."""
    if spec.layout is None:
        return array
    return np.transpose(array, np.argsort(spec.layout))


# -- replay stage 2 on tasks whose inputs are deterministic (docs/executor.md, "Fresh inputs") --------------
def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit for bit the same array (dtype, shape and bytes: NaN payloads and signed zeros count)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    xb = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    yb = np.ascontiguousarray(y).reshape(-1).view(np.uint8)
    return bool(np.array_equal(xb[:64], yb[:64]) and np.array_equal(xb, yb))  # random inputs differ at once


def predictable_inputs(task: Task, fresh: dict[str, np.ndarray], seen: list[dict[str, np.ndarray]]) -> list[str]:
    """The inputs whose values in `fresh` are bit for bit those of a set the kernel's process saw (`seen`): the
    task's policy draws them the same for every seed (arange, constant, ones, zeros; or a random policy that
    cannot vary, such as randint over one value), so the kernel's process knows them without seeing them."""
    return [spec.name for spec in task.inputs
            if any(spec.name in s and same_bits(fresh[spec.name], s[spec.name]) for s in seen)]


def input_variant(spec: TensorSpec, values: np.ndarray, rng: np.random.Generator,
                  strong: bool = False) -> tuple[np.ndarray | None, str]:
    """Another array for an input the policy makes the same for every seed, and the words for what was done
    (None and why when no array of the input's dtype and shape can differ).

    Gentle (the default): an input whose values are not all equal (arange) gets them in a random order, the
    same values, so an index-like input stays in range; an input of one value (constant, ones, zeros) gets
    each element jittered around it (floats: within +-25 % of the value, or +-0.25 around zero; integers: by
    up to a quarter of the value and at least 1, clipped to the dtype; booleans: drawn at random). Strong
    (when the gentle variant leaves the reference's answer where it was, e.g. a sum of a permuted arange):
    every element jittered around its own value by the same rules."""
    values = np.asarray(values)
    if values.size == 0:
        return None, f"`{spec.name}` has no elements"
    flat = values.reshape(-1)
    distinct = np.unique(flat.view(f"u{flat.dtype.itemsize}") if flat.dtype.itemsize in (1, 2, 4, 8) else flat).size > 1
    for _ in range(16):
        if distinct and not strong:
            out, how = rng.permutation(flat).reshape(values.shape), "its values in a random order"
        else:
            out, how = _jitter(flat, rng).reshape(values.shape), "each element jittered around its value"
        if not same_bits(out, values):
            return out, how
    return None, f"`{spec.name}` ({values.dtype}) could not be varied"


def _jitter(flat: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    kind = flat.dtype.kind
    if kind == "b":
        return rng.integers(0, 2, size=flat.shape).astype(flat.dtype)
    wide = flat.astype(np.float64)
    if kind in "iu":
        info = np.iinfo(flat.dtype)
        span = np.maximum(np.floor(np.abs(wide) / 4), 1.0)
        moved = wide + np.rint(rng.uniform(-1.0, 1.0, size=flat.shape) * span)
        return np.clip(moved, info.min, info.max).astype(flat.dtype)
    span = np.where(np.isfinite(wide) & (wide != 0), np.abs(wide) / 4, 0.25)
    moved = np.where(np.isfinite(wide), wide + rng.uniform(-1.0, 1.0, size=flat.shape) * span, wide)
    return moved.astype(flat.dtype)

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

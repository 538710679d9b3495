"""GpSimd gathers of the nki namespace: `nc_n_gather` and `nonzero_with_count`."""

from __future__ import annotations

import math

import numpy as np

from nkitui.emulator.engine.common import current, same_partitions, tile, write
from nkitui.emulator.errors import EngineDtypeError, EngineMemoryError, EngineOpError, OperandShapeError
from nkitui.emulator.tensor import Tensor


def _sbuf(api: str, *named: tuple[Tensor, str]) -> None:
    for t, r in named:
        if t.storage.memory != "sbuf":
            raise EngineMemoryError(f"GpSimd engine cannot access PSUM: operand '{r}' of {api} is in "
                                    f"{t.storage.memory}; GpSimd reads and writes SBUF only")


def nc_n_gather(dst: Tensor, data: Tensor, indices: Tensor, *, api: str = "nc_n_gather") -> None:
    """dst[p, j] = flat(data[p])[indices[p, j]] per partition (uint32 indices)."""
    run = current()
    for t, r in ((dst, "dst"), (data, "data"), (indices, "indices")):
        tile(t, api, r)
    _sbuf(api, (dst, "dst"), (data, "data"), (indices, "indices"))
    same_partitions(api, (dst, "dst"), (data, "data"), (indices, "indices"))
    if indices.storage.dtype.name != "uint32":
        raise EngineDtypeError(f"{api}: indices must be uint32, got {indices.storage.dtype.name}")
    if dst.storage.dtype is not data.storage.dtype:
        raise EngineDtypeError(f"{api}: dst ({dst.storage.dtype.name}) must have the dtype of data ({data.storage.dtype.name})")
    P = data.shape[0]
    F = math.prod(data.shape[1:])
    n = math.prod(indices.shape[1:])
    if math.prod(dst.shape[1:]) != n:
        raise OperandShapeError(f"{api}: dst holds {math.prod(dst.shape[1:])} elements per partition, indices {n}")
    run.record("gpsimd", "nc_n_gather", (data, indices), (dst,), partitions=P, free=n, meta={"api": api})
    if not run.execute:
        return write(run, dst, None)
    idx = indices.array().reshape(P, n).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= F):
        bad = int(idx.max() if idx.max() >= F else idx.min())
        raise OperandShapeError(f"{api}: index {bad} is outside [0, {F}) (elements per partition of data)")
    vals = np.take_along_axis(data.array().reshape(P, F), idx, axis=1)
    write(run, dst, vals.reshape(dst.shape))


def nonzero_with_count(dst: Tensor, src: Tensor, index_offset: int = 0, padding_val: int = -1, *,
                       api: str = "nonzero_with_count") -> None:
    """On partitions 0, 16, ..., 112: indices (+ index_offset) of the nonzero elements, then
    padding_val, then the count in the extra last element. Other partitions are left as they are."""
    run = current()
    if run.target.nc_version < 3:
        raise EngineOpError(f"{api} needs NeuronCore-v3 or newer (trn2/trn3); the target is {run.target.name}")
    tile(dst, api, "dst")
    tile(src, api, "src")
    _sbuf(api, (dst, "dst"), (src, "src"))
    same_partitions(api, (dst, "dst"), (src, "src"))
    if src.storage.dtype.name not in ("float32", "int32"):
        raise EngineDtypeError(f"{api}: src must be float32 or int32, got {src.storage.dtype.name}")
    if dst.storage.dtype.name != "int32":
        raise EngineDtypeError(f"{api}: dst must be int32, got {dst.storage.dtype.name}")
    P = src.shape[0]
    T = math.prod(src.shape[1:])
    if math.prod(dst.shape[1:]) != T + 1:
        raise OperandShapeError(f"{api}: dst must hold one element more per partition than src ({T + 1}), got "
                                f"{math.prod(dst.shape[1:])}")
    run.record("gpsimd", "nonzero_with_count", (src,), (dst,), partitions=P, free=T, meta={"api": api})
    if not run.execute:
        return write(run, dst, None)
    out = dst.array().reshape(P, T + 1).astype(np.int64)
    x = src.array().reshape(P, T)
    for p in range(0, P, 16):
        nz = np.flatnonzero(x[p] != 0)
        row = np.full(T + 1, int(padding_val), dtype=np.int64)
        row[:nz.size] = nz + int(index_offset)
        row[T] = nz.size
        out[p] = row
    write(run, dst, out.reshape(dst.shape))


def gather_flattened(dst: Tensor, data: Tensor, indices: Tensor) -> None:
    """The legacy front end's nl.gather_flattened, computed (the front end records its trace instruction):
    dst[p, j] = flat(data[p])[clip(indices[p, j])]; out-of-bounds indices read the nearest element (garbage
    on hardware). An engine function so the replayable log replays it from its operands."""
    run = current()
    P = data.shape[0]
    flat = data.array().reshape(P, -1)
    idx = indices.array().reshape(indices.shape[0], -1).astype(np.int64)
    idx = np.clip(idx, 0, flat.shape[1] - 1)
    vals = np.take_along_axis(flat, idx, axis=1).reshape(indices.shape)
    write(run, dst, vals if data.storage.dtype is dst.storage.dtype else vals.astype(np.float32))

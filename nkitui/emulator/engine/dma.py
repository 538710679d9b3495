"""DMA transfers: HBM <-> SBUF (and HBM <-> HBM, SBUF <-> SBUF), with casts and transposes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, SupportsInt

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import alu
from nkitui.emulator.engine.common import Mask, Op, current, hbm_or_sbuf, values, write
from nkitui.emulator.errors import OperandShapeError, OutOfBoundsError
from nkitui.emulator.tensor import Tensor


def _side(src: Tensor, dst: Tensor) -> tuple[int, int]:
    """(partitions, elements per partition) as the cost model sees a transfer."""
    onchip = dst if dst.storage.partition_dim >= 0 else (src if src.storage.partition_dim >= 0 else None)
    ref = onchip if onchip is not None else src
    p = ref.shape[0] if ref.shape else 1
    return p, (math.prod(ref.shape) // p if p else 0)  # (ref.size, without the property's call)


def _fits(src_shape: tuple[int, ...], dst_shape: tuple[int, ...]) -> bool:
    if src_shape == dst_shape:
        return True
    if len(src_shape) <= len(dst_shape) and all(s == d or s == 1 for s, d in zip(src_shape[::-1], dst_shape[::-1])):
        return True
    return math.prod(src_shape) == math.prod(dst_shape)


def in_bounds_mask(t: Tensor) -> np.ndarray:
    """Which elements of an indirect view index inside its storage (out-of-bounds gather indices)."""
    m = np.ones(t.shape, dtype=bool)
    for a, n in zip(t.index_arrays(), t.storage.shape):
        a = np.broadcast_to(a, t.shape)
        m &= (a >= 0) & (a < n)
    return m


def masked_indices(t: Tensor, where: NDArray[np.bool_], shape: tuple[int, ...]) -> Tensor:
    """A gather/scatter view whose masked-off elements point at a valid cell (the first selected
    one) so that they are neither bounds-checked nor read out of range; other views unchanged."""
    if t.gather_indices is None:
        return t
    m = np.broadcast_to(where, shape)
    if m.shape != t.shape:
        if m.size != t.size:
            return t
        m = m.reshape(t.shape)
    if m.all():
        return t
    if not m.any():
        return type(t)(t.storage, None, t.shape, tuple(np.zeros(t.shape, dtype=np.int64) for _ in t.gather_indices))
    first = np.unravel_index(int(np.argmax(m)), t.shape)
    fancy = []
    for a in t.gather_indices:
        a = np.broadcast_to(a, t.shape)
        fancy.append(np.where(m, a, a[first]))
    return type(t)(t.storage, None, t.shape, tuple(fancy))


def dma_copy(dst: Tensor, src: Tensor, *, where: Mask = None, dst_rmw_op: Op | None = None,
             oob_mode: object = None, queue: str = "sync", api: str = "dma_copy", allow_psum: bool = False,
             opcode: str = "dma_copy", meta: dict[str, Any] | None = None) -> None:
    """Copy src into dst (element counts must match; src may broadcast). Casts go through fp32."""
    run = current()
    skip_oob = oob_mode is not None and getattr(oob_mode, "name", oob_mode) == "skip"
    if where is not None:
        # a mask decides which index values a gather/scatter uses: masked-off elements are neither
        # bounds-checked nor read (nki-samples' resize kernel masks rows whose indices run past the end)
        dst = masked_indices(dst, where, dst.shape)
        src = masked_indices(src, where, dst.shape)
    for t, r in ((dst, "dst"), (src, "src")):
        try:
            hbm_or_sbuf(t, api, r, allow_psum)
        except OutOfBoundsError:
            if not skip_oob:
                raise
    if not _fits(src.shape, dst.shape):
        raise OperandShapeError(f"{api}: source shape {src.shape} does not match destination shape {dst.shape} "
                                "(element counts must be equal, or the source broadcastable)")
    rmw = alu.resolve_binary(dst_rmw_op, "dst_rmw_op") if dst_rmw_op is not None else None
    P, F = _side(src, dst)
    m: dict[str, Any] | None = None  # the trace's metadata: read only while recording (DMAs are not reordered)
    if run.recording:
        m = {"api": api, "queue": queue, "src": src.storage.memory, "dst": dst.storage.memory}
        if src.storage.dtype is not dst.storage.dtype:
            m["cast"] = f"{src.storage.dtype.name}->{dst.storage.dtype.name}"
        if rmw is not None:
            m["rmw_op"] = rmw.name
        if src.gather_indices is not None or dst.gather_indices is not None:
            m["indirect"] = True
        if meta:
            m.update(meta)
    ins = (src, dst) if rmw is not None else (src,)
    run.record("dma", opcode, ins, (dst,), partitions=P, free=F, meta=m)
    if not run.execute:
        return write(run, dst, None, where, rmw is not None)
    mask = where
    if skip_oob:
        ok_dst = in_bounds_mask(dst) if (dst.gather_indices is not None) else None
        ok_src = in_bounds_mask(src) if (src.gather_indices is not None) else None
        if ok_src is not None:
            src_vals = _gather_clipped(src)
            ok = ok_src.reshape(dst.shape) if ok_src.size == dst.size else np.broadcast_to(ok_src, dst.shape)
            mask = ok if mask is None else (np.broadcast_to(mask, dst.shape) & ok)
        else:
            src_vals = None
        if ok_dst is not None:
            mask = ok_dst if mask is None else (np.broadcast_to(mask, dst.shape) & ok_dst)
            dst = _clip_view(dst)
    else:
        src_vals = None
    if rmw is None and src.storage.dtype is dst.storage.dtype and src_vals is None:
        vals = src.array()  # same dtype: a bit-exact byte copy
    elif src_vals is not None:
        vals = src_vals
    else:
        vals = values(src, src.shape)
    if vals.shape != dst.shape:
        vals = vals.reshape(dst.shape) if vals.size == dst.size else np.broadcast_to(vals, dst.shape)
    if rmw is not None:
        vals = rmw.fn(dst.read_f32(), vals.astype(np.float32))
    write(run, dst, vals, mask, rmw is not None)


def _gather_clipped(t: Tensor) -> np.ndarray:
    idx = tuple(np.clip(np.broadcast_to(a, t.shape), 0, n - 1) for a, n in zip(t.index_arrays(), t.storage.shape))
    data = t.storage.data
    assert data is not None  # an executing run holds every storage's cells
    gathered: np.ndarray = data[idx]
    return gathered


def _clip_view(t: Tensor) -> Tensor:
    idx = tuple(np.clip(np.broadcast_to(a, t.shape), 0, n - 1) for a, n in zip(t.index_arrays(), t.storage.shape))
    return type(t)(t.storage, None, t.shape, idx)


def dma_transpose(dst: Tensor, src: Tensor, axes: Sequence[SupportsInt] | None = None, *, where: Mask = None,
                  queue: str = "sync", api: str = "dma_transpose") -> None:
    """dst = src transposed: 2-D (1,0), 3-D (2,1,0), 4-D (3,1,2,0) unless `axes` is given."""
    run = current()
    hbm_or_sbuf(dst, api, "dst")
    hbm_or_sbuf(src, api, "src")
    nd = src.ndim
    if axes is None:
        axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(nd)
        if axes is None:
            raise OperandShapeError(f"{api}: DMA transpose supports 2-D to 4-D sources, got {nd}-D {src.shape}")
    axes = tuple(int(a) for a in axes)
    want = tuple(src.shape[a] for a in axes)
    if math.prod(want) != dst.size or (dst.shape != want and dst.shape[0] != want[0]):
        raise OperandShapeError(f"{api}: destination shape {dst.shape} must be the transposed source shape {want}")
    P, F = _side(src, dst)
    m = {"api": api, "queue": queue, "src": src.storage.memory, "dst": dst.storage.memory, "transpose": list(axes)}
    if src.storage.dtype is not dst.storage.dtype:
        m["cast"] = f"{src.storage.dtype.name}->{dst.storage.dtype.name}"
    run.record("dma", "dma_transpose", (src,), (dst,), partitions=P, free=F, meta=m)
    if not run.execute:
        return write(run, dst, None, where)
    if src.storage.dtype is dst.storage.dtype:
        vals = np.transpose(src.array(), axes)
    else:
        vals = np.transpose(values(src, src.shape), axes)
    write(run, dst, np.ascontiguousarray(vals).reshape(dst.shape), where)

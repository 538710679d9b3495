"""`dma_compute`: element-wise reduction of several sources inside the DMA engines.

dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...), in fp32, cast to dst's dtype.
With an indirect (vector_offset) view among the operands this is the scatter-add / gather-add
read-modify-write of NKI 0.3+ (what `dma_copy(dst_rmw_op=nl.add)` did before).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nkitui.emulator import alu
from nkitui.emulator.engine.common import Op, Scalar, current, hbm_or_sbuf, values, write
from nkitui.emulator.engine.dma import _side, in_bounds_mask
from nkitui.emulator.errors import EngineOpError, OperandShapeError, OutOfBoundsError
from nkitui.emulator.tensor import Tensor


def dma_compute(dst: Tensor, srcs: Sequence[Tensor], reduce_op: Op = "add",
                scales: Sequence[Scalar] | None = None, *, oob_mode: object = None,
                api: str = "dma_compute") -> None:
    run = current()
    srcs = list(srcs)
    if not 1 <= len(srcs) <= 16:
        raise OperandShapeError(f"{api}: between 1 and 16 source tensors, got {len(srcs)}")
    op = alu.resolve_binary(reduce_op, "reduce_op")
    if op.name != "add":
        raise EngineOpError(f"{api}: reduce_op must be nl.add (the only DMA reduction), got {op.name}")
    scales = [1.0] * len(srcs) if scales is None else [float(s) for s in scales]
    if len(scales) != len(srcs) or any(s != 1.0 for s in scales):
        raise OperandShapeError(f"{api}: scales must be one 1.0 per source (other scales are not supported), "
                                f"got {scales}")
    skip = getattr(oob_mode, "name", oob_mode) == "skip"
    for t, r in [(dst, "dst")] + [(s, f"srcs[{i}]") for i, s in enumerate(srcs)]:
        try:
            hbm_or_sbuf(t, api, r)
        except OutOfBoundsError:
            if not skip or t.gather_indices is None:
                raise
        if t.size != dst.size:
            raise OperandShapeError(f"{api}: {r} has {t.size} elements, dst has {dst.size} (counts must match)")
    P, F = _side(srcs[0], dst)
    m: dict[str, Any] = {"api": api, "queue": "sync", "src": srcs[0].storage.memory, "dst": dst.storage.memory, "rmw_op": op.name}
    if any(t.gather_indices is not None for t in (dst, *srcs)):
        m["indirect"] = True
    run.record("dma", "dma_compute", tuple(srcs), (dst,), partitions=P, free=F, meta=m)
    if not run.execute:
        return write(run, dst, None, None, True)
    mask = None
    parts = []
    for s in srcs:
        if s.gather_indices is not None and skip:
            ok = in_bounds_mask(s)
            mask = ok if mask is None else mask & ok.reshape(mask.shape)
            parts.append(_clipped_values(s).reshape(dst.shape))
        else:
            parts.append(values(s, s.shape).reshape(dst.shape))
    total = parts[0].astype(np.float32)
    for p in parts[1:]:
        total = total + p
    target = dst
    if dst.gather_indices is not None and skip:
        ok = in_bounds_mask(dst).reshape(dst.shape)
        mask = ok if mask is None else (mask.reshape(dst.shape) & ok)
        idx = tuple(np.clip(np.broadcast_to(a, dst.shape), 0, n - 1) for a, n in zip(dst.index_arrays(), dst.storage.shape))
        target = type(dst)(dst.storage, None, dst.shape, idx)
    write(run, target, total.astype(np.float32), None if mask is None else mask.reshape(dst.shape), True)


def _clipped_values(t: Tensor) -> np.ndarray:
    idx = tuple(np.clip(np.broadcast_to(a, t.shape), 0, n - 1) for a, n in zip(t.index_arrays(), t.storage.shape))
    data = t.storage.data
    assert data is not None  # an executing run holds every storage's cells
    vals: np.ndarray = data[idx].astype(np.float32)
    return vals

"""Cross-core instructions of a logical NeuronCore (LNC=2): `sendrecv` and `core_barrier`.

The cores of `kernel[2]` run concurrently (see newns/cores.py); these functions synchronise them
through the launch's core group. `sendrecv` copies the source values at send time, so the sender
may overwrite its tile right after the call; the receiver's `dst` is written when the partner's
data arrives. Both are recorded as DMA-class instructions (`sendrecv`) or a GpSimd barrier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol, SupportsIndex, SupportsInt

from nkitui.emulator.engine.common import Run, current, same_partitions, tile, write
from nkitui.emulator.errors import EngineDtypeError, EngineMemoryError, EngineOpError, OperandShapeError
from nkitui.emulator.tensor import Tensor

_GPSIMD_DMA_LIMIT = {4: 1024, 2: 512, 1: 256}  # bytes per partition by element size
# what sendrecv sends: (shape, dtype name, the tile's cells or None in shape-only runs)
Payload = tuple[tuple[int, ...], str, Any]
CoreId = SupportsInt | SupportsIndex  # a core or pipe number: an int, or a register holding one (its .value)


class CoreGroup(Protocol):
    """The cores of one logical-core launch (kernel[2]), as the `nki` front end sets `run.group`."""

    n: int

    def exchange(self, core: int, send_to: int, recv_from: int, pipe: int, payload: Payload,
                 what: str) -> Payload: ...

    def barrier(self, core: int, cores: tuple[int, ...], what: str) -> None: ...


def _group(run: Run, api: str) -> CoreGroup:
    group: CoreGroup | None = getattr(run, "group", None)
    if group is None:
        raise EngineOpError(f"{api} is an instruction of the nki namespace's logical cores (kernel[2])")
    if run.target.nc_version < 3:
        raise EngineOpError(f"{api} needs NeuronCore-v3 or newer (trn2/trn3) with logical cores; the target is "
                            f"{run.target.name}")
    return group


def _rank(x: CoreId, n: int, api: str, what: str) -> int:
    r = int(getattr(x, "value", x))
    if not 0 <= r < n:
        raise OperandShapeError(f"{api}: {what} {r} is not a core of this launch (kernel[{n}] has cores 0..{n - 1})")
    return r


def sendrecv(src: Tensor, dst: Tensor, send_to_rank: CoreId, recv_from_rank: CoreId,
             pipe_id: CoreId, *, dma_engine: str = "dma", api: str = "sendrecv") -> None:
    """Send `src` to core `send_to_rank`'s `dst` while receiving core `recv_from_rank`'s `src`
    into this core's `dst`."""
    run = current()
    group = _group(run, api)
    tile(src, api, "src")
    tile(dst, api, "dst")
    for t, r in ((src, "src"), (dst, "dst")):
        if t.storage.memory != "sbuf":
            raise EngineMemoryError(f"{api}: '{r}' must be in SBUF, got {t.storage.memory}")
    if src.storage.dtype is not dst.storage.dtype:
        raise EngineDtypeError(f"{api}: src ({src.storage.dtype.name}) and dst ({dst.storage.dtype.name}) must have the same "
                               "dtype")
    same_partitions(api, (src, "src"), (dst, "dst"))
    if src.shape != dst.shape:
        raise OperandShapeError(f"{api}: src {src.shape} and dst {dst.shape} must have the same shape")
    F = math.prod(src.shape[1:])
    if dma_engine == "gpsimd_dma":
        limit = _GPSIMD_DMA_LIMIT.get(src.storage.dtype.itemsize, 256)
        if F * src.storage.dtype.itemsize > limit:
            raise OperandShapeError(f"{api}: dma_engine=gpsimd_dma moves at most {limit} B per partition for "
                                    f"{src.storage.dtype.itemsize}-byte types, got {F * src.storage.dtype.itemsize}")
    to = _rank(send_to_rank, group.n, api, "send_to_rank")
    frm = _rank(recv_from_rank, group.n, api, "recv_from_rank")
    pipe = int(getattr(pipe_id, "value", pipe_id))
    run.record("dma", "sendrecv", (src,), (dst,), partitions=src.shape[0], free=F,
               meta={"api": api, "queue": "gpsimd" if dma_engine == "gpsimd_dma" else "sync", "src": "sbuf",
                     "dst": "sbuf", "send_to": to, "recv_from": frm, "pipe": pipe})
    payload: Payload = (src.shape, src.storage.dtype.name, src.array().copy() if run.execute else None)
    shape, dtype, data = group.exchange(run.core, to, frm, pipe, payload, api)
    if shape != dst.shape or dtype != dst.storage.dtype.name:
        raise OperandShapeError(f"{api}: core {frm} sent a {shape} {dtype} tile on pipe {pipe}, but this core "
                                f"receives into a {dst.shape} {dst.storage.dtype.name} tile")
    write(run, dst, data if run.execute else None)


def core_barrier(data: object, cores: Iterable[SupportsInt], *, engine: str = "gpsimd",
                 api: str = "core_barrier") -> None:
    """Wait until every core in `cores` has reached this barrier (for `data` in shared HBM)."""
    run = current()
    group = _group(run, api)
    members = tuple(int(c) for c in cores)
    if sorted(members) != list(range(group.n)) and group.n > 1:
        raise OperandShapeError(f"{api}: cores={members}: only all cores of the logical core, {tuple(range(group.n))}, "
                                "are supported")
    if isinstance(data, Tensor) and data.storage.memory != "hbm":
        raise EngineMemoryError(f"{api}: data must be a shared HBM tensor, got a {data.storage.memory} tile "
                                "(nki.isa.core_barrier docs: 'This must be data in shared HBM that multiple cores "
                                "are accessing')")
    meta: dict[str, Any] = {"api": api, "cores": list(members)}
    if isinstance(data, Tensor):
        meta["data"] = data.storage.id  # the barrier orders accesses to this tensor; it moves no data
    run.record(engine if engine in ("gpsimd", "vector", "scalar", "tensor", "sync") else "gpsimd", "core_barrier",
               (), (), partitions=1, free=0, meta=meta)
    if group.n > 1:
        group.barrier(run.core, members, api)

"""`nki.collectives`: collectives across the ranks of replica groups.

A kernel launched normally runs as rank 0 of a world of one; `nki.multi_rank_simulate(kernel,
world_size=N, per_rank_inputs=...)` runs N ranks concurrently, one thread each
(`nkitui.emulator.ranks`), and these functions exchange data between them. Semantics (the
nki.collectives docs):

* `all_reduce`: every member's dst = op over the members' srcs (`nl.add`, `nl.minimum`,
  `nl.maximum`), computed in fp32 in replica-group order — the same order on every rank, so every
  rank gets bit-identical results — and rounded once to the dst dtype;
* `all_gather`: dst = the members' srcs concatenated along `collective_dim` in replica-group order
  (HBM: dim 0; SBUF: dim 0 or 1);
* `reduce_scatter`: src split into as many chunks along dim 0 as there are members; member i gets
  op over the members' chunk i;
* `all_to_all` (HBM, dim 0): member i's dst chunk j is member j's src chunk i;
* `all_to_all_v`: flat element buffers; metadata rows send counts / send displacements (/ recv
  counts / recv displacements), one column per rank; row 2 is written with what each sender sent;
* `collective_permute(srcs, dsts, source_target_pairs)` (HBM): each target's dst gets its
  source's src; a rank that is nobody's target keeps its dst;
* `collective_permute_implicit(_reduce)`: a ring in replica-group order, one per channel: each
  rank sends to its successor and receives from its predecessor (the `_reduce` form sends
  op(src0, src1)); `collective_permute_implicit_current_processing_rank_id(i, group)` is the rank
  `i` steps back along the ring (its own rank at iteration 0);
* `rank_id()`: this rank. Collectives are recorded as DMA-engine instructions named after the
  collective, with `meta["collective"]`, the group size and the replica group.

The two cores of an LNC=2 rank each take part with the same core of the other ranks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import SupportsInt, TypeAlias, TypeVar

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import alu
from nkitui.emulator.engine.common import write
from nkitui.emulator.engine.dma import _side
from nkitui.emulator.errors import OperandShapeError, UnsupportedError
from nkitui.emulator.newns.tensor import NKIObject
from nkitui.emulator.ranks import World
from nkitui.emulator.runtime import Run, current
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
_REDUCE_OPS = ("add", "minimum", "maximum")

F32Array: TypeAlias = NDArray[np.float32]
Groups: TypeAlias = "ReplicaGroup | Sequence[Sequence[SupportsInt]]"  # a ReplicaGroup or its rank lists
P = TypeVar("P")


@dataclass
class ReplicaGroup(NKIObject):
    """Groups of ranks that take part in a collective (sub-groups must not overlap)."""

    replica_groups: list[list[int]] = field(default_factory=lambda: [[0]])

    def __post_init__(self) -> None:
        groups = [[int(r) for r in g] for g in self.replica_groups]
        seen = [r for g in groups for r in g]
        if len(seen) != len(set(seen)):
            raise OperandShapeError(f"ReplicaGroup {groups}: sub-groups overlap (each rank may appear once)")
        self.replica_groups = groups


# -- the rank this code runs as -----------------------------------------------------------------------
def _where(api: str) -> tuple[Run, World | None, int, int, int]:
    """(run, world, rank, core, world size) of the calling core (nki launches run a CoreRun)."""
    run = current()
    world: World | None = getattr(run, "world", None)
    rank: int = getattr(run, "rank", 0)
    return run, world, rank, run.core, (world.size if world is not None else 1)


def rank_id() -> int:
    """This rank's id in the world (0 outside nki.multi_rank_simulate)."""
    return _where("ncoll.rank_id")[2]


def world_size() -> int:
    return _where("ncoll.world_size")[4]


def _group_of(replica_group: Groups, rank: int, size: int, api: str) -> list[int]:
    lists = replica_group.replica_groups if isinstance(replica_group, ReplicaGroup) else replica_group
    groups = [[int(r) for r in g] for g in lists]
    for g in groups:
        bad = [r for r in g if not 0 <= r < size]
        if bad:
            how = ("the kernel ran as a single rank; run it on several with nki.multi_rank_simulate(kernel, "
                   "world_size=N, per_rank_inputs=...)") if size == 1 else f"the world has ranks 0..{size - 1}"
            raise UnsupportedError(f"{api}: replica group {g} names rank(s) {bad}, but {how}")
    for g in groups:
        if rank in g:
            return g
    raise OperandShapeError(f"{api}: rank {rank} is in no rank-list of replica group {groups}")


def _exchange(run: Run, world: World | None, rank: int, core: int, kind: str, group: list[int], payload: P,
              api: str) -> dict[int, P]:
    """Every member's payload (rank -> payload) for this collective; {rank: payload} alone (and in
    shape-only mode, where nothing is exchanged and the payload is not read)."""
    if world is None or len(group) == 1 or not run.execute:
        return {rank: payload}
    got = world.rendezvous((rank, core), kind, tuple((r, core) for r in group), payload,
                           f"{api} on rank {rank}")
    return {r: p for (r, _c), p in got.items()}


# -- operands ------------------------------------------------------------------------------------------
def _lists(srcs: Iterable[Tensor], dsts: Iterable[Tensor], api: str, *, hbm_only: bool = False,
           one: bool = False) -> list[tuple[Tensor, Tensor]]:
    src_list, dst_list = list(srcs), list(dsts)
    if len(src_list) != len(dst_list) or not src_list:
        raise OperandShapeError(f"{api}: srcs and dsts must be equally long non-empty lists, got {len(src_list)} and "
                                f"{len(dst_list)}")
    for t in src_list + dst_list:
        if not isinstance(t, Tensor):
            raise OperandShapeError(f"{api}: srcs and dsts hold tensors, got {type(t).__name__}")
    mems = {t.storage.memory for t in src_list + dst_list}
    if "psum" in mems:
        raise OperandShapeError(f"{api}: collectives move HBM or SBUF tensors, not PSUM")
    if len(mems) > 1:
        raise OperandShapeError(f"{api}: all tensors must be on HBM or all on SBUF (mixing is not supported)")
    if hbm_only and mems != {"hbm"}:
        raise OperandShapeError(f"{api}: tensors must reside on HBM (SBUF is not supported for this collective)")
    if len(src_list) > 1 and (one or mems != {"hbm"}):
        raise OperandShapeError(f"{api}: coalesced communication (several tensors) is "
                                + ("not supported" if one else "only supported on HBM"))
    return list(zip(src_list, dst_list))


def _op(op: object, api: str) -> alu.BinaryOp:
    o = alu.resolve_binary(op, "op")
    if o.name not in _REDUCE_OPS:
        raise OperandShapeError(f"{api}: op must be nl.add, nl.minimum or nl.maximum, got {o.name}")
    return o


def _dim(collective_dim: SupportsInt, src: Tensor, api: str, allowed: tuple[int, ...] = (0,)) -> int:
    d = int(collective_dim)
    if src.storage.memory == "sbuf" and api.endswith("all_gather"):
        allowed = (0, 1)
    if d not in allowed:
        raise OperandShapeError(f"{api}: collective_dim={d} is not supported on {src.storage.memory.upper()} tensors "
                                f"(supported: {', '.join(map(str, allowed))})")
    return d


def _record(run: Run, kind: str, api: str, srcs: Sequence[Tensor], dsts: Sequence[Tensor], group: list[int],
            extra: dict[str, object] | None = None) -> None:
    ref_s, ref_d = srcs[0], dsts[0]
    P, F = _side(ref_s, ref_d)
    meta: dict[str, object] = {"api": api, "collective": kind, "queue": "collective", "src": ref_s.storage.memory, "dst": ref_d.storage.memory,
            "ranks": len(group), "replica_group": list(group)}
    if extra:
        meta.update(extra)
    for t in list(srcs) + list(dsts):
        t.check_bounds(api)
    run.record("dma", kind, tuple(srcs), tuple(dsts), partitions=P, free=F, meta=meta)


def _raw(t: Tensor) -> NDArray[np.generic]:
    return np.array(t.array(), copy=True)


def _f32(t: Tensor) -> F32Array:
    return np.array(t.read_f32(), dtype=_F32, copy=True)


def _reduce(op: alu.BinaryOp, parts: Sequence[NDArray[np.generic]]) -> F32Array:
    acc = np.asarray(parts[0], dtype=_F32)
    for p in parts[1:]:
        acc = np.asarray(op.fn(acc, np.asarray(p, dtype=_F32)), dtype=_F32)
    return acc


def _put(run: Run, dst: Tensor, values: NDArray[np.generic] | None) -> None:
    write(run, dst, values if run.execute else None)


# -- the collectives -----------------------------------------------------------------------------------
def all_reduce(srcs: Sequence[Tensor], dsts: Sequence[Tensor], replica_group: Groups, op: object,
               priority: object = None, name: str | None = None) -> None:
    api = "ncoll.all_reduce"
    run, world, rank, core, size = _where(api)
    pairs = _lists(srcs, dsts, api)
    o = _op(op, api)
    group = _group_of(replica_group, rank, size, api)
    for s, d in pairs:
        if s.size != d.size:
            raise OperandShapeError(f"{api}: src {s.shape} and dst {d.shape} must have the same number of elements")
    _record(run, "all_reduce", api, [s for s, _ in pairs], [d for _, d in pairs], group, {"op": o.name})
    got = _exchange(run, world, rank, core, "all_reduce", group, [_f32(s) for s, _ in pairs] if run.execute else [],
                    api)
    for i, (_s, d) in enumerate(pairs):
        _put(run, d, _reduce(o, [got[r][i] for r in group]).reshape(d.shape) if run.execute else None)


def all_gather(srcs: Sequence[Tensor], dsts: Sequence[Tensor], replica_group: Groups, collective_dim: int = 0,
               priority: object = None, name: str | None = None) -> None:
    api = "ncoll.all_gather"
    run, world, rank, core, size = _where(api)
    pairs = _lists(srcs, dsts, api)
    group = _group_of(replica_group, rank, size, api)
    n = len(group)
    dims = []
    for s, d in pairs:
        dim = _dim(collective_dim, s, api)
        want = tuple(x * n if i == dim else x for i, x in enumerate(s.shape))
        if d.shape != want:
            raise OperandShapeError(f"{api}: dst {d.shape} must be src {s.shape} with dim {dim} times the {n} ranks "
                                    f"of the group ({want})")
        dims.append(dim)
    _record(run, "all_gather", api, [s for s, _ in pairs], [d for _, d in pairs], group, {"collective_dim": dims[0]})
    got = _exchange(run, world, rank, core, "all_gather", group, [_raw(s) for s, _ in pairs] if run.execute else [],
                    api)
    for i, ((_s, d), dim) in enumerate(zip(pairs, dims)):
        _put(run, d, np.concatenate([got[r][i] for r in group], axis=dim) if run.execute else None)


def reduce_scatter(srcs: Sequence[Tensor], dsts: Sequence[Tensor], replica_group: Groups, collective_dim: int = 0,
                   op: object = None, priority: object = None, name: str | None = None) -> None:
    api = "ncoll.reduce_scatter"
    run, world, rank, core, size = _where(api)
    pairs = _lists(srcs, dsts, api)
    o = _op(op if op is not None else "add", api)
    group = _group_of(replica_group, rank, size, api)
    n, me = len(group), group.index(rank)
    for s, d in pairs:
        dim = _dim(collective_dim, s, api)
        want = tuple(x // n if i == dim else x for i, x in enumerate(s.shape))
        if s.shape[dim] % n or d.shape != want:
            raise OperandShapeError(f"{api}: src {s.shape} must split into {n} chunks along dim {dim} of dst's shape "
                                    f"{d.shape}")
    _record(run, "reduce_scatter", api, [s for s, _ in pairs], [d for _, d in pairs], group, {"op": o.name})
    got = _exchange(run, world, rank, core, "reduce_scatter", group,
                    [_f32(s) for s, _ in pairs] if run.execute else [], api)
    for i, (_s, d) in enumerate(pairs):
        if run.execute:
            chunks = [np.split(got[r][i], n, axis=0)[me] for r in group]
            _put(run, d, _reduce(o, chunks))
        else:
            _put(run, d, None)


def all_to_all(srcs: Sequence[Tensor], dsts: Sequence[Tensor], replica_group: Groups, collective_dim: int = 0,
               priority: object = None, name: str | None = None) -> None:
    api = "ncoll.all_to_all"
    run, world, rank, core, size = _where(api)
    pairs = _lists(srcs, dsts, api, hbm_only=True)
    group = _group_of(replica_group, rank, size, api)
    n, me = len(group), group.index(rank)
    for s, d in pairs:
        _dim(collective_dim, s, api)
        if s.shape != d.shape or s.shape[0] % n:
            raise OperandShapeError(f"{api}: src {s.shape} and dst {d.shape} must have the same shape, with dim 0 "
                                    f"divisible by the {n} ranks of the group")
    _record(run, "all_to_all", api, [s for s, _ in pairs], [d for _, d in pairs], group)
    got = _exchange(run, world, rank, core, "all_to_all", group, [_raw(s) for s, _ in pairs] if run.execute else [],
                    api)
    for i, (_s, d) in enumerate(pairs):
        _put(run, d, np.concatenate([np.split(got[r][i], n, axis=0)[me] for r in group], axis=0)
             if run.execute else None)


def all_to_all_v(srcs: Sequence[Tensor], dsts: Sequence[Tensor], replica_group: Groups, metadata_tensor: Tensor,
                 recv_counts_known: bool = False, has_rdispls: bool = False, priority: object = None,
                 name: str | None = None) -> None:
    """Flat element buffers; metadata (uint32, one column per rank of the group, or per rank of the
    world): row 0 send counts, row 1 send displacements, row 2 recv counts (written unless
    `recv_counts_known`), row 3 recv displacements (`has_rdispls`; else chunks are packed in
    replica-group order)."""
    api = "ncoll.all_to_all_v"
    run, world, rank, core, size = _where(api)
    ((src, dst),) = _lists(srcs, dsts, api, hbm_only=True, one=True)
    group = _group_of(replica_group, rank, size, api)
    n = len(group)
    if not isinstance(metadata_tensor, Tensor):
        raise OperandShapeError(f"{api}: metadata_tensor must be a tensor, got {type(metadata_tensor).__name__}")
    rows = 4 if has_rdispls else 3
    meta_shape = metadata_tensor.shape
    cols = meta_shape[-1] if len(meta_shape) >= 2 else metadata_tensor.size // rows
    if metadata_tensor.size < rows * cols or cols not in (n, size):
        raise OperandShapeError(f"{api}: metadata_tensor {meta_shape} needs {rows} rows and one column per rank "
                                f"({n} in the group or {size} in the world)")
    col = {r: (group.index(r) if cols == n else r) for r in group}
    _record(run, "all_to_all_v", api, [src], [dst], group)
    if not run.execute:
        _put(run, dst, None)
        return
    meta = np.asarray(metadata_tensor.array(), dtype=np.int64).reshape(-1)[:rows * cols].reshape(rows, cols)
    flat = _raw(src).reshape(-1)
    chunks: dict[int, NDArray[np.generic]] = {}
    for r in group:
        c, disp = int(meta[0, col[r]]), int(meta[1, col[r]])
        if disp < 0 or c < 0 or disp + c > flat.size:
            raise OperandShapeError(f"{api}: rank {rank} sends elements [{disp}, {disp + c}) to rank {r}, outside its "
                                    f"src of {flat.size} elements")
        chunks[r] = flat[disp:disp + c]
    got = _exchange(run, world, rank, core, "all_to_all_v", group, chunks, api)
    out = np.array(dst.array(), copy=True).reshape(-1)
    pos = 0
    received: dict[int, int] = {}
    for s in group:
        part = got[s][rank]
        start = int(meta[3, col[s]]) if has_rdispls else pos
        if start < 0 or start + part.size > out.size:
            raise OperandShapeError(f"{api}: rank {rank} receives {part.size} elements from rank {s} at {start}, "
                                    f"outside its dst of {out.size} elements")
        out[start:start + part.size] = part
        pos = start + part.size
        received[s] = part.size
    _put(run, dst, out.reshape(dst.shape))
    if not recv_counts_known:  # row 2: the number of elements received from each rank
        counts = np.asarray(metadata_tensor.array(), dtype=np.int64).reshape(-1).copy()
        for s in group:
            counts[2 * cols + col[s]] = received[s]
        write(run, metadata_tensor, counts[:metadata_tensor.size].reshape(metadata_tensor.shape))


def collective_permute(srcs: Sequence[Tensor], dsts: Sequence[Tensor],
                       source_target_pairs: Iterable[Iterable[SupportsInt]], priority: object = None,
                       name: str | None = None) -> None:
    api = "ncoll.collective_permute"
    run, world, rank, core, size = _where(api)
    ((src, dst),) = _lists(srcs, dsts, api, hbm_only=True, one=True)
    pairs = [tuple(int(x) for x in p) for p in source_target_pairs]
    bad = [p for p in pairs if len(p) != 2 or not all(0 <= r < size for r in p)]
    if bad:
        how = ("the kernel ran as a single rank; use nki.multi_rank_simulate(kernel, world_size=N, ...)" if size == 1
               else f"the world has ranks 0..{size - 1}")
        raise UnsupportedError(f"{api}: source_target_pairs {bad} name ranks outside the world ({how})")
    targets = [t for _s, t in pairs]
    if len(targets) != len(set(targets)):
        raise OperandShapeError(f"{api}: a rank may receive from one source only, got pairs {pairs}")
    members = sorted({r for p in pairs for r in p})
    _record(run, "collective_permute", api, [src], [dst], members, {"pairs": [list(p) for p in pairs]})
    if rank not in members:
        return
    got = _exchange(run, world, rank, core, "collective_permute", members, _raw(src) if run.execute else None, api)
    source = next((s for s, t in pairs if t == rank), None)
    if source is not None:
        _put(run, dst, got[source] if run.execute else None)


def _ring(replica_group: Groups, rank: int, size: int, api: str) -> tuple[list[int], int]:
    group = _group_of(replica_group, rank, size, api)
    return group, group.index(rank)


def collective_permute_implicit(srcs_by_channel: Sequence[Sequence[Tensor]], dsts_by_channel: Sequence[Sequence[Tensor]],
                                replica_group: Groups, channel_ids: Sequence[int] = (0,), priority: object = None,
                                name: str | None = None) -> None:
    """A ring in replica-group order per channel: send src to the successor, receive the
    predecessor's src into dst."""
    api = "ncoll.collective_permute_implicit"
    run, world, rank, core, size = _where(api)
    group, me = _ring(replica_group, rank, size, api)
    channels = [_lists(s, d, api, one=True)[0] for s, d in zip(srcs_by_channel, dsts_by_channel)]
    if len(list(srcs_by_channel)) != len(list(dsts_by_channel)):
        raise OperandShapeError(f"{api}: srcs_by_channel and dsts_by_channel need one entry per channel")
    _record(run, "collective_permute_implicit", api, [s for s, _ in channels], [d for _, d in channels], group,
            {"channels": len(channels)})
    got = _exchange(run, world, rank, core, "collective_permute_implicit", group,
                    [_raw(s) for s, _ in channels] if run.execute else [], api)
    pred = group[(me - 1) % len(group)]
    for i, (_s, d) in enumerate(channels):
        _put(run, d, got[pred][i] if run.execute else None)


def collective_permute_implicit_reduce(srcs0_by_channel: Sequence[Sequence[Tensor]],
                                       srcs1_by_channel: Sequence[Sequence[Tensor]],
                                       dsts_by_channel: Sequence[Sequence[Tensor]], replica_group: Groups, op: object,
                                       channel_ids: Sequence[int] = (0,), priority: object = None,
                                       name: str | None = None) -> None:
    """Like collective_permute_implicit, sending op(src0, src1) (fp32) to the successor."""
    api = "ncoll.collective_permute_implicit_reduce"
    run, world, rank, core, size = _where(api)
    o = _op(op, api)
    group, me = _ring(replica_group, rank, size, api)
    s0 = [_lists(a, d, api, one=True)[0] for a, d in zip(srcs0_by_channel, dsts_by_channel)]
    s1 = [t for lst in srcs1_by_channel for t in lst]
    if len(s1) != len(s0):
        raise OperandShapeError(f"{api}: srcs1_by_channel needs one tensor per channel ({len(s0)})")
    for (a, _d), b in zip(s0, s1):
        if not isinstance(b, Tensor) or b.size != a.size:
            raise OperandShapeError(f"{api}: src1 must be a tensor with as many elements as src0 {a.shape}")
    _record(run, "collective_permute_implicit_reduce", api, [a for a, _ in s0] + s1, [d for _, d in s0], group,
            {"op": o.name, "channels": len(s0)})
    payload = [_reduce(o, [_f32(a), _f32(b).reshape(a.shape)]) for (a, _), b in zip(s0, s1)] if run.execute else []
    got = _exchange(run, world, rank, core, "collective_permute_implicit_reduce", group, payload, api)
    pred = group[(me - 1) % len(group)]
    for i, (_a, d) in enumerate(s0):
        _put(run, d, got[pred][i].reshape(d.shape) if run.execute else None)


def collective_permute_implicit_current_processing_rank_id(iteration_id: SupportsInt, replica_group: Groups,
                                                           channel_id: int = 0, num_channels: int = 1,
                                                           name: str | None = None) -> int:
    """The rank whose data this rank holds after `iteration_id` ring steps: its own at 0, then
    its predecessor's, and so on around the ring (replica-group order)."""
    api = "ncoll.collective_permute_implicit_current_processing_rank_id"
    _run, _world, rank, _core, size = _where(api)
    group, me = _ring(replica_group, rank, size, api)
    step = int(getattr(iteration_id, "value", iteration_id))
    return group[(me - step) % len(group)]


# -- the replayable log (nkitui.emulator.replaylog) ------------------------------------------------------
def _replayable(name: str) -> None:
    """Collective `name` as an instruction of the replayable log: a launch's own collectives (one rank: the
    exchange is with itself) replay from their operands. Across simulated ranks (nki.multi_rank_simulate)
    the other ranks' data is not in this rank's log: the log is unavailable then, and says why."""
    import functools

    from nkitui.emulator import replaylog as _replaylog

    fn = globals()[name]
    recorded = _replaylog.instruction(f"collectives.{name}", fn)
    _replaylog.REGISTRY[f"collectives.{name}"] = fn

    @functools.wraps(fn)
    def call(*args: object, **kwargs: object) -> object:
        rec = _replaylog._rec
        if rec is not None and _replaylog.depth() == 0 and getattr(current(), "world", None) is not None:
            rec.fail(f"ncoll.{name} across simulated ranks (nki.multi_rank_simulate): the other ranks' data is not "
                     "in this launch's log")
        return recorded(*args, **kwargs)

    globals()[name] = call


for _name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v", "collective_permute",
              "collective_permute_implicit", "collective_permute_implicit_reduce"):
    _replayable(_name)

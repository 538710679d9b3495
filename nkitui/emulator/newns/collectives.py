"""`nki.collectives`: collectives across the ranks (logical cores on devices) of a replica group.

The emulator runs one device with one logical core per launch, so the world has one rank (rank 0).
Collectives over a replica group that contains only rank 0 are executed exactly (an all-reduce of
one rank is a copy, a ring of one passes data to itself, ...), recorded as DMA instructions with
`meta["collective"]`. A replica group naming other ranks raises `UnsupportedError`: multi-device
collectives need more than one emulated device. Cross-core traffic inside a logical core is
`nisa.sendrecv` / `nisa.core_barrier` (kernel[2]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nkitui.emulator import alu, engine
from nkitui.emulator.errors import OperandShapeError, UnsupportedError
from nkitui.emulator.newns.language import NKIObject
from nkitui.emulator.runtime import current
from nkitui.emulator.tensor import Tensor

WORLD_SIZE = 1


@dataclass
class ReplicaGroup(NKIObject):
    """Groups of ranks that take part in a collective (sub-groups must not overlap)."""

    replica_groups: list = field(default_factory=lambda: [[0]])

    def __post_init__(self) -> None:
        groups = [list(g) for g in self.replica_groups]
        seen = [r for g in groups for r in g]
        if len(seen) != len(set(seen)):
            raise OperandShapeError(f"ReplicaGroup {groups}: sub-groups overlap")
        self.replica_groups = groups


def rank_id() -> int:
    """This rank's id in the world (always 0: the emulator runs one device)."""
    current()
    return 0


def world_size() -> int:
    current()
    return WORLD_SIZE


def _group_of(replica_group, api: str) -> list[int]:
    groups = replica_group.replica_groups if isinstance(replica_group, ReplicaGroup) else replica_group
    for g in groups:
        if 0 in g:
            if list(g) != [0]:
                raise UnsupportedError(f"{api}: replica group {list(g)} spans {len(g)} ranks; the emulator runs one "
                                       "device (rank 0), so collectives over several ranks cannot be emulated")
            return [0]
    raise UnsupportedError(f"{api}: rank 0 (the emulated device) is not in replica group {groups}")


def _pairs(srcs, dsts, api: str):
    srcs, dsts = list(srcs), list(dsts)
    if len(srcs) != len(dsts) or not srcs:
        raise OperandShapeError(f"{api}: srcs and dsts must be equally long non-empty lists, got {len(srcs)} and "
                                f"{len(dsts)}")
    mems = {t.st.memory for t in srcs + dsts if isinstance(t, Tensor)}
    if "psum" in mems:
        raise OperandShapeError(f"{api}: collectives move HBM or SBUF tensors, not PSUM")
    if len(mems) > 1:
        raise OperandShapeError(f"{api}: all tensors must be on HBM or all on SBUF (mixing is not supported)")
    return list(zip(srcs, dsts))


def _copy(dst, src, api: str, kind: str) -> None:
    engine.dma_copy(dst, src, api=api, meta={"collective": kind})


def _one_rank_copies(kind: str, srcs, dsts, replica_group, reduce_op=...) -> None:
    """A collective over a group of one rank: each source arrives in its destination unchanged
    (`reduce_op`, when given, is still checked to be an operator the collective supports)."""
    api = f"ncoll.{kind}"
    _group_of(replica_group, api)
    if reduce_op is not ... and alu.resolve_binary(reduce_op, "op").name not in ("add", "minimum", "maximum"):
        raise OperandShapeError(f"{api}: op must be nl.add, nl.minimum or nl.maximum")
    for s, d in _pairs(srcs, dsts, api):
        _copy(d, s, api, kind)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    _one_rank_copies("all_reduce", srcs, dsts, replica_group, op)


def all_gather(srcs, dsts, replica_group, collective_dim: int = 0, priority=None, name=None) -> None:
    _one_rank_copies("all_gather", srcs, dsts, replica_group)


def reduce_scatter(srcs, dsts, replica_group, collective_dim: int = 0, op=None, priority=None, name=None) -> None:
    _one_rank_copies("reduce_scatter", srcs, dsts, replica_group)


def all_to_all(srcs, dsts, replica_group, collective_dim: int = 0, priority=None, name=None) -> None:
    _one_rank_copies("all_to_all", srcs, dsts, replica_group)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known: bool = False,
                 has_rdispls: bool = False, priority=None, name=None) -> None:
    """One rank: send_counts[0] elements from send_displs[0] of src land at recv_displs[0] of dst
    (or 0), and row 2 (recv counts) is written unless recv_counts_known."""
    api = "ncoll.all_to_all_v"
    _group_of(replica_group, api)
    ((src, dst),) = _pairs(srcs, dsts, api)
    run = current()
    meta = np.asarray(metadata_tensor.array()).reshape(-1) if run.execute else np.zeros(4, dtype=np.int64)
    rows = 4 if has_rdispls else 3
    if meta.size < rows:
        raise OperandShapeError(f"{api}: metadata_tensor needs {rows} rows of one rank, got {meta.size} values")
    count, sdisp = int(meta[0]), int(meta[1])
    rdisp = int(meta[3]) if has_rdispls else 0
    flat_src = src.reshape(src.size) if len(src.shape) != 1 else src
    flat_dst = dst.reshape(dst.size) if len(dst.shape) != 1 else dst
    if count:
        _copy(flat_dst[rdisp:rdisp + count], flat_src[sdisp:sdisp + count], api, "all_to_all_v")
    if not recv_counts_known:  # row 2: the number of elements received from each rank
        from nkitui.emulator.newns import language as nl

        tmp = nl.ndarray((1, 1), metadata_tensor.dtype, buffer=nl.sbuf)
        engine.memset(tmp, count, api=api)
        cell = metadata_tensor.reshape(metadata_tensor.size)[2:3] if metadata_tensor.st.memory == "hbm" else \
            metadata_tensor.reshape((1, metadata_tensor.size))[:, 2:3]
        if cell.st.memory == "hbm":
            engine.dma_copy(cell, tmp, api=api, meta={"collective": "all_to_all_v"})
        else:
            engine.tensor_copy(cell, tmp, api=api)


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    api = "ncoll.collective_permute"
    pairs = [tuple(int(x) for x in p) for p in source_target_pairs]
    if any(r != 0 for p in pairs for r in p):
        raise UnsupportedError(f"{api}: pairs {pairs} name ranks other than 0; the emulator runs one device")
    for s, d in _pairs(srcs, dsts, api):
        if (0, 0) in pairs:
            _copy(d, s, api, "collective_permute")


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), priority=None,
                                name=None) -> None:
    """A ring of one rank: each channel's source arrives in its own destination."""
    api = "ncoll.collective_permute_implicit"
    _group_of(replica_group, api)
    for srcs, dsts in zip(srcs_by_channel, dsts_by_channel):
        for s, d in _pairs(srcs, dsts, api):
            _copy(d, s, api, "collective_permute_implicit")


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), priority=None, name=None) -> None:
    """A ring of one rank: dst = op(src0, src1) (the rank's own reduced data comes back to it)."""
    api = "ncoll.collective_permute_implicit_reduce"
    _group_of(replica_group, api)
    for s0s, s1s, ds in zip(srcs0_by_channel, srcs1_by_channel, dsts_by_channel):
        for (a, d), b in zip(_pairs(s0s, ds, api), s1s):
            engine.dma_copy(d, a, api=api, meta={"collective": "collective_permute_implicit_reduce"})
            engine.dma_copy(d, b, dst_rmw_op=op, api=api, meta={"collective": "collective_permute_implicit_reduce"})


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id: int = 0,
                                                           name=None) -> int:
    """The rank whose data is processed at ring iteration `iteration_id` (a ring of one: rank 0)."""
    _group_of(replica_group, "ncoll.collective_permute_implicit_current_processing_rank_id")
    return 0

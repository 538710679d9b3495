"""List-scheduling simulation of one NeuronCore running an instruction trace.

Model (nki-spec.md §2.5, §6.4, §6.5, §7):

* each compute engine (Tensor, Vector, Scalar, GpSimd) runs its instructions in program order;
  an instruction starts when its engine is free and its inputs are ready;
* dependencies come from overlapping `Access` boxes: read-after-write waits for the producer's
  result (its end plus a dependency latency), write-after-read and write-after-write wait for the
  earlier access to finish. Matmuls accumulating into the same PSUM tile follow each other
  without that latency (the accumulation is pipelined inside PSUM);
* an instruction that had to wait exposes its start-up cost: the ~100-cycle static overhead on
  Vector/Scalar/GpSimd, the foreground LoadStationary on TensorE;
* a DMA is triggered by the sequencer `meta["queue"]` names (Sync by default), starts no earlier
  than the fixed ~1.3 µs latency after the trigger, keeps the order of its queue (one per issuer
  for loads, one for stores, one for other copies), and needs bytes / (engines x per-engine
  bandwidth x efficiency) on the 16 DMA engines, bounded by the per-core HBM bandwidth. The
  engines serve all queues round-robin: a transfer fills any idle engine time from its release on
  (a store waiting for its data does not hold back later loads, and a load can use the gaps
  between other transfers);
* a zero-fill of a PSUM tile (legacy `nl.zeros(..., buffer=psum)` before `+=` matmuls) costs no
  engine time: the first matmul resets the accumulator (acc_flags / psum_zero [N-ISA]);
* PSUM has 8 banks: a new PSUM tile takes the least recently used bank(s) and waits until the
  tile that held them was last touched (bank rotation: TensorE stalls behind slow evictions);
* NC-v2 port sharing (Vector+GpSimd on SBUF, Vector+Scalar on PSUM) and the trn2/trn3 TensorE
  throttle after idle periods are modelled as documented.

Dependency lookup is indexed by storage id and drops accesses that a later write covers, so a
trace costs O(n x live accesses per storage), not O(n^2). Reads of an HBM tensor nothing has written
yet (a kernel input) are not kept one by one: a later in-place write waits for all of them.
Instruction costs are cached by their signature (engine, opcode, shapes, dtypes, memories, meta), so
repeated loop bodies cost one lookup.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from heapq import heappop, heappush
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from nkitui.common.gcpause import collector_paused
from nkitui.emulator.trace import ENGINES, Access, Instruction, StorageInfo, Trace
from nkitui.perf.costs import (
    MATMUL_OPCODES, TRANSPOSE_OPCODES, ComputeCost, DmaPlan, MatmulCost, compute_cost, dma_plan, matmul_cost,
)
from nkitui.perf.hardware import TargetSpec, itemsize

# A storage keeps at most this many live write/read records; beyond it the oldest half is merged
# into one bounding record (conservative: it can only add dependencies, never drop one).
_MAX_RECORDS = 64
# trn2/trn3 TensorE throttle [NX-SUM]: starts at 50% after idle and ramps to 100% over ~3 µs; it
# re-engages when utilisation over a ~3 µs window falls below 50%, i.e. after a gap > 1.5 µs (inferred).
_THROTTLE_RAMP_S = 3e-6
_THROTTLE_GAP_S = 1.5e-6
_ISSUERS = frozenset({"tensor", "vector", "scalar", "gpsimd"})
_ACTIVATE = frozenset({"activation", "activate", "activation_reduce", "activate2"})
_EPS = 1e-15


@dataclass
class DmaTotals:
    transfer_count: int = 0
    total_bytes: int = 0
    packet_time: float = 0.0  # sum over DMA engines of busy time
    transfer_time: float = 0.0  # sum over transfers of their duration
    queues: set[str] = field(default_factory=set)
    small_run_transfers: int = 0  # transfers with < 2 KiB contiguous per partition
    small_run_bytes: int = 0
    efficiency_weighted: float = 0.0  # sum(bytes x efficiency), for the mean efficiency
    spill_save_bytes: int = 0  # compiler-inserted SBUF -> HBM spills (the allocator's model)
    spill_reload_bytes: int = 0
    spill_transfers: int = 0


def _tally() -> dict[str, float]:
    """A Counter that sums seconds or FLOPs: a missing key reads 0 and is not inserted. Typed as a dict of
    floats because typeshed types a Counter's values as int."""
    return cast("dict[str, float]", Counter())


@dataclass
class Schedule:
    """Result of simulating a trace: per-instruction times, per-lane busy intervals, totals."""

    spec: TargetSpec
    start: list[float]  # seconds, per instruction in trace order
    end: list[float]
    total_time: float = 0.0
    intervals: dict[str, list[list[float]]] = field(default_factory=dict)  # lane -> merged active intervals
    # execution only: the DMA lanes' data-movement intervals (`intervals` holds them from the moment a transfer
    # is queued, in flight and waiting, as the profiler counts them); compute lanes: sum of pure durations
    exec_intervals: dict[str, list[list[float]]] = field(default_factory=dict)
    lane_exec_time: dict[str, float] = field(default_factory=_tally)  # base lane -> execution-only seconds
    # (file, line, lane, opcode) -> [seconds, count, flops, hbm bytes]; lane is "tensor", "dma", ...
    by_line: dict[tuple[str, int, str, str], list[Any]] = field(default_factory=dict)
    lane_time: dict[str, float] = field(default_factory=_tally)  # base lane -> sum of instruction busy time
    lane_count: Counter[str] = field(default_factory=Counter)
    model_flops: float = 0.0
    hardware_flops: float = 0.0
    adjusted_hardware_flops: float = 0.0
    transpose_flops: float = 0.0
    adjusted_transpose_flops: float = 0.0
    matmul_count: int = 0
    matmul_dtype_flops: dict[str, float] = field(default_factory=_tally)
    activate_time: float = 0.0
    activate_count: int = 0
    hbm_read: int = 0
    hbm_write: int = 0
    mem_bytes: Counter[str] = field(default_factory=Counter)  # sbuf/psum read/write bytes
    psum_to_sbuf_bytes: int = 0
    psum_to_sbuf_count: int = 0
    perf_modes: Counter[str] = field(default_factory=Counter)
    dma: DmaTotals = field(default_factory=DmaTotals)
    throttled_time: float = 0.0
    psum_bank_stall: float = 0.0  # engine time lost only because no PSUM bank was free
    folded_psum_zeroing: int = 0  # PSUM zero-fills folded into the next matmul's accumulator reset
    undocumented_opcodes: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    cores: int = 1
    sbuf_peak_bytes: int = 0  # peak SBUF bytes per partition the allocator held (<= usable)
    sbuf_demand_bytes: int = 0  # peak live SBUF bytes per partition in program order (first..last use)
    sbuf_alloc_stall: float = 0.0  # instruction time lost waiting for SBUF space (allocator)
    input_bytes: int = 0  # HBM tensors read before any write: the kernel's inputs and weights


# A storage's dependency record is a plain list (creating one per fresh tile must be cheap):
# [write records, read records, last end, first index, last index, memory, first write's byte extent (the trace's
# storage ranges hold the full extent), first was a write];
# an empty record list is () rather than a list of its own (fewer objects to build and free)
# write record: (p0, p1, b0, b1, result ready, end, written by a matmul); read record: (p0, p1, b0, b1, end)
S_WRITES, S_READS, S_LAST_END, S_FIRST, S_LAST, S_MEM, S_EXTENT, S_FIRST_WRITE = range(8)
_StorageRecord = list[Any]  # the fields above, of different types: a list because it is built per fresh tile
_WriteRecord = tuple[int, int, int, int, float, float, bool]
_ReadRecord = tuple[int, int, int, int, float]
# one plan per signature (engine, opcode, shapes, dtypes, memories, bytes, flops, line, file): the first meta seen
# and its plan, then [(meta, plan), ...] for other metas under the same signature
_PlanKey = tuple[str, str, int, int, tuple[str, ...], str, tuple[str, ...], str, int, int, int, int, int, int, str]
_PlanEntry = list[Any]


class _Core:
    """Per-physical-core scheduling state."""

    __slots__ = ("pool", "dma_iv", "dma_late", "flight_s", "flight_e", "sync_s", "sync_e", "queue_start", "psum", "free", "lanes",
                 "sbuf")

    def __init__(self, psum_banks: int, sbuf: _SbufAllocator) -> None:
        self.pool = _Calendar()  # the 16 DMA engines
        # busy intervals merged as they come when they come in order; the others wait in *_late
        self.dma_iv: list[list[float]] = []
        self.dma_late: list[list[float]] = []
        # when every transfer was queued and when it ended (in flight and waiting, as the profiler counts DMA)
        self.flight_s: list[float] = []
        self.flight_e: list[float] = []
        # DMA triggers on the Sync engine, in program order (mostly out of time order): starts, ends
        self.sync_s: list[float] = []
        self.sync_e: list[float] = []
        self.queue_start: dict[str, float] = {}  # queue -> start of its last transfer
        self.psum = _PsumBanks(psum_banks)
        self.free: dict[str, float] = {}  # engine -> when its in-order queue is free
        self.lanes: dict[str, list[list[float]]] = {}  # engine -> merged busy intervals
        self.sbuf = sbuf


def _merge_oldest(records: Sequence[tuple[float, ...]], is_write: bool) -> list[tuple[float, ...]]:
    """Replace the oldest half of a storage's records by one record covering all of them."""
    half = len(records) // 2
    cols = list(zip(*records[:half]))  # column-wise, so that min/max run in C
    merged: tuple[float, ...]
    if is_write:
        merged = (min(cols[0]), max(cols[1]), min(cols[2]), max(cols[3]), max(cols[4]), max(cols[5]), False)
    else:
        merged = (min(cols[0]), max(cols[1]), min(cols[2]), max(cols[3]), max(cols[4]))
    return [merged, *records[half:]]


class _Calendar:
    """Busy intervals of a shared, work-conserving resource (the DMA engines of one core).

    A job released at time r with `work` seconds of service fills the idle gaps from r onwards
    until its work is done, as round-robin service of several queues would; it never preempts
    work already booked.
    """

    __slots__ = ("bs", "be")

    def __init__(self) -> None:
        self.bs: list[float] = []  # sorted, disjoint busy intervals
        self.be: list[float] = []

    def fill(self, release: float, work: float) -> tuple[float, float]:
        """Book `work` seconds from `release` on; returns (first start, last end)."""
        bs, be = self.bs, self.be
        if work <= 0:
            return release, release
        n = len(be)
        if n == 0 or release >= bs[-1]:  # at or after the start of the last booking: no gap to fill
            if n and release <= be[-1] + _EPS:
                start = be[-1] if release < be[-1] else release
                be[-1] = start + work
            else:
                start = release
                bs.append(release)
                be.append(release + work)
            return start, start + work
        i = bisect_right(be, release)  # first interval that ends after release
        first = i
        t = release
        start = -1.0
        remaining = work
        pieces: list[tuple[float, float]] = []
        while remaining > _EPS:
            if i < n and bs[i] <= t + _EPS:  # inside a busy interval: skip it
                if be[i] > t:
                    t = be[i]
                i += 1
                continue
            gap_end = bs[i] if i < n else math.inf
            take = min(gap_end - t, remaining)
            if start < 0:
                start = t
            pieces.append((t, t + take))
            t += take
            remaining -= take
        # splice: merge the touched intervals [first - 1, i) with the new pieces
        lo = first - 1 if first > 0 else 0
        hi = min(i + 1, n)
        merged: list[list[float]] = []
        for s_, e_ in sorted([(bs[k], be[k]) for k in range(lo, hi)] + pieces):
            if merged and s_ <= merged[-1][1] + _EPS:
                if e_ > merged[-1][1]:
                    merged[-1][1] = e_
            else:
                merged.append([s_, e_])
        bs[lo:hi] = [m[0] for m in merged]
        be[lo:hi] = [m[1] for m in merged]
        return start, t


class _PsumBanks:
    """Least-recently-used assignment of PSUM tiles to the 8 banks of one core."""

    __slots__ = ("occupant",)

    def __init__(self, banks: int) -> None:
        self.occupant: list[int | None] = [None] * banks

    def acquire(self, sid: int, need: int, storages: dict[int, _StorageRecord]) -> float:
        """Banks for new tile `sid`; returns when their previous tiles were last touched."""
        order = []
        for b, occ in enumerate(self.occupant):
            st = storages.get(occ) if occ is not None else None
            order.append((st[S_LAST] if st else -2, st[S_LAST_END] if st else 0.0, b))
        order.sort()
        ready = 0.0
        for _, t, b in order[:need]:
            self.occupant[b] = sid
            if t > ready:
                ready = t
        return ready


class _SbufAllocator:
    """SBUF capacity of one core as the compiler's allocator sees it [L-PM, L-ALLOC].

    A tile holds its bytes per partition from its first write to the end of the last instruction that
    touches it (compiler live ranges, as the emulator's capacity check counts them). The first writer of a
    new tile waits until enough earlier tiles have died, so prefetching is limited by the space there is.
    When the tiles still needed exceed the usable SBUF, the compiler spills: the tiles used last are
    saved to HBM (a DMA before their space is reused) and reloaded before their next use (a DMA the user
    waits for) — the `spill_save_bytes` / `spill_reload_bytes` traffic of the profiler [PERF Opt #2, MAMBA].
    """

    __slots__ = ("cap", "live", "held", "heap", "spilled", "peak", "uses", "sizes", "rows", "dirty", "idx",
                 "evict_after", "writer_dirty")

    def __init__(self, cap: int, uses: "_Uses", sizes: dict[int, int], rows: dict[int, int]) -> None:
        self.cap = cap
        self.live = 0  # bytes per partition held now
        self.held: dict[int, int] = {}  # sid -> size, allocated and still to be used
        self.heap: list[tuple[float, int]] = []  # (time it frees, size) of tiles past their last use
        self.spilled: dict[int, float] = {}  # sid -> when its save to HBM completes
        self.peak = 0
        self.uses = uses  # the instructions that access each tile, in order
        self.sizes = sizes  # sid -> bytes per partition
        self.rows = rows  # sid -> partitions it spans (what a spill moves is size x rows)
        self.dirty: set[int] = set()  # tiles written by an engine (not plain copies of HBM data)
        self.idx = 0  # the instruction being scheduled
        self.evict_after: list[int] = []  # tiles written by the current instruction that leave SBUF right after
        self.writer_dirty = True  # the current instruction computes (not a plain load of HBM data)

    def allocate(self, sid: int, now: float, busy: set[int]) -> tuple[float, list[tuple[int, int]]]:
        """Space for `sid` from `now` on: (when it is there, [(victim, size), ...] evicted to make room).

        In order of cost: space already free; clean tiles (plain copies of HBM data) needed later than this
        one, dropped to be loaded again; space that frees later (the allocation waits); dirty tiles needed
        later than this one, spilled (saved, then reloaded). A tile needed sooner than the new one is never
        evicted (Belady's rule)."""
        size = self.sizes[sid]
        heap, live, cap = self.heap, self.live, self.cap
        while heap and heap[0][0] <= now:
            live -= heappop(heap)[1]
        t = now
        victims: list[tuple[int, int]] = []
        if live + size > cap:
            while live + size > cap and heap:  # wait for tiles past their last use to free their space
                f, freed = heappop(heap)
                live -= freed
                if f > t:
                    t = f
            if live + size > cap:  # what is still needed does not fit: evict what is needed furthest ahead
                for _, v in self._ahead(sid, busy):
                    freed = self.held.pop(v)
                    live -= freed
                    victims.append((v, freed))
                    if live + size <= cap:
                        break
                if live + size > cap and self.writer_dirty:
                    # the new tile itself is needed last: it goes out as soon as it is written (Belady); a
                    # plain load of HBM data is not (the compiler would issue it later rather than twice)
                    self.evict_after.append(sid)
        live += size
        self.held[sid] = size
        if live > self.peak and live <= cap:  # a tile streamed out as it is written holds no space
            self.peak = live
        self.live = live
        return t, victims

    def _ahead(self, sid: int, busy: set[int]) -> list[tuple[int, int]]:
        """Held tiles needed later than `sid` (next use, id), the furthest first."""
        uses, idx = self.uses, self.idx
        own_next = uses.next_after(sid, idx)
        ahead = []
        for v in self.held:
            if v not in busy:
                nxt = uses.next_after(v, idx)
                if nxt > own_next:
                    ahead.append((nxt, v))
        ahead.sort(reverse=True)
        return ahead

    def release(self, sid: int, end: float) -> None:
        size = self.held.pop(sid, None)
        if size is not None:
            heappush(self.heap, (end, size))


class _Uses:
    """The instructions that access each SBUF storage, in order; looked up only when the allocator must choose
    what to evict (Belady's rule asks for the next use), so built on the first eviction, not for every trace."""

    __slots__ = ("instrs", "by_sid")

    def __init__(self, instrs: list[Instruction]) -> None:
        self.instrs = instrs
        self.by_sid: dict[int, list[int]] | None = None

    def next_after(self, sid: int, i: int) -> int:
        """First access of `sid` after instruction i (i itself when there is none)."""
        by_sid = self.by_sid
        if by_sid is None:
            by_sid = self.by_sid = _sbuf_uses(self.instrs)
        idx = by_sid.get(sid)
        if not idx:
            return i
        k = bisect_right(idx, i)
        return idx[k] if k < len(idx) else i


def _sbuf_uses(instrs: list[Instruction]) -> dict[int, list[int]]:
    uses: dict[int, list[int]] = {}
    for i, ins in enumerate(instrs):
        for accesses in (ins.reads, ins.writes):
            for a in accesses:
                if a[1] == "sbuf":
                    lst = uses.get(a[0])
                    if lst is None:
                        uses[a[0]] = [i]
                    elif lst[-1] != i:
                        lst.append(i)
    return uses


class _SbufTiles:
    """What the allocator knows of every SBUF tile before the schedule, from the trace's storage ranges: its
    bytes per partition, the partitions it spans, and the instruction after which it is dead."""

    __slots__ = ("sizes", "rows", "release_at", "first", "last", "span_bytes")

    def __init__(self, trace: Trace) -> None:
        sizes: dict[int, int] = {}
        rows: dict[int, int] = {}
        release_at: dict[int, list[int]] = {}
        first: list[int] = []
        last: list[int] = []
        span_bytes: list[int] = []  # each tile's share of the partitions (the program-order demand, as the emulator counts)
        storage_info = trace.storages
        tile_bytes: dict[tuple[tuple[int, ...], str], int] = {}  # (shape, dtype) -> bytes per partition, once per kind of tile
        for sid, (mem, f, la, r, ext) in trace.storage_ranges().items():
            if mem != "sbuf":
                continue
            info = storage_info.get(sid)
            size = ext
            if info is not None:
                k = (info.shape, info.dtype)
                tb = tile_bytes.get(k)
                if tb is None:
                    tb = tile_bytes[k] = _tile_bytes(info)
                if tb > size:
                    size = tb
            # A tile of <= 32 partitions may start at partition 0, 32, 64 or 96, one of <= 64 at 0 or 64 [ARCH2,
            # L-ALLOC]: four (two) such tiles share one byte range, so each holds a quarter (half) of it.
            sizes[sid] = -(-size // 4) if r <= 32 else (-(-size // 2) if r <= 64 else size)
            rows[sid] = r
            at = release_at.get(la)
            if at is None:
                release_at[la] = [sid]
            else:
                at.append(sid)
            first.append(f)
            last.append(la)
            span_bytes.append(sizes[sid])
        self.sizes, self.rows, self.release_at = sizes, rows, release_at
        self.first, self.last, self.span_bytes = first, last, span_bytes


def _spill_transfer(cs: "_Core", spec: TargetSpec, release: float, per_partition: int,
                    rows: int) -> tuple[float, float]:
    """Book one compiler spill DMA (save or reload) of `per_partition` bytes on `rows` partitions, queued at
    `release` on the spill queue; returns (start, end). Costed like any DMA of that shape."""
    rows = max(1, min(rows, spec.partitions))
    nbytes = per_partition * rows
    engines = min(spec.dma_engines, max(1, math.ceil(rows / (spec.partitions / spec.dma_engines))))
    eff = spec.dma_curve.efficiency(float(per_partition))
    dur = nbytes / (engines * spec.dma_engine_bytes_per_s * eff)
    if spec.hbm_core_bytes_per_s:
        dur = max(dur, nbytes / spec.hbm_core_bytes_per_s)
    qs = cs.queue_start.get("sync:spill", 0.0)
    begin = release + spec.dma_fixed_latency_s
    if qs > begin:
        begin = qs
    start, fill_end = cs.pool.fill(begin, dur * engines / spec.dma_engines)
    end = max(start + dur, fill_end)
    cs.queue_start["sync:spill"] = start
    cs.dma_late.append([start, end])
    cs.flight_s.append(release)
    cs.flight_e.append(end)
    return start, end


def _make_room(alloc: _SbufAllocator, cs: "_Core", spec: TargetSpec, sid: int, now: float, busy: set[int],
               storages: dict[int, _StorageRecord], totals: DmaTotals) -> float:
    """Allocate `sid`; spill what must go (each save starts once the tile's last writer is done). Returns
    when the space is there."""
    t, victims = alloc.allocate(sid, now, busy)
    for v, size in victims:
        vst = storages.get(v)
        last_end = t if vst is None or vst[S_LAST_END] < t else vst[S_LAST_END]
        if v not in alloc.dirty:
            # a plain copy of HBM data: dropped, and loaded again from its source before its next use
            # (the profiler's "input reloading" [MAMBA]); its space is free once its readers are done
            alloc.spilled[v] = last_end
            if last_end > t:
                t = last_end
            continue
        _, save_end = _spill_transfer(cs, spec, last_end, size, alloc.rows[v])
        alloc.spilled[v] = save_end
        totals.spill_save_bytes += size * alloc.rows[v]
        totals.spill_transfers += 1
        if save_end > t:
            t = save_end
    return t


def _evict_written(alloc: _SbufAllocator, cs: "_Core", spec: TargetSpec, end: float,
                   totals: DmaTotals) -> None:
    """Tiles the instruction just computed that SBUF cannot keep until their next use: saved right after the
    write, reloaded before that use."""
    for sid in alloc.evict_after:
        size = alloc.held.pop(sid, None)
        if size is None:
            continue
        alloc.live -= size
        _, save_end = _spill_transfer(cs, spec, end, size, alloc.rows[sid])
        totals.spill_save_bytes += size * alloc.rows[sid]
        totals.spill_transfers += 1
        alloc.spilled[sid] = save_end
    alloc.evict_after = []


def _reload(alloc: _SbufAllocator, cs: "_Core", spec: TargetSpec, sid: int, need_by: float, busy: set[int],
            storages: dict[int, _StorageRecord], totals: DmaTotals) -> float:
    """A spilled or dropped tile is used again: room for it, then a reload DMA; returns when its data is back.

    A dropped plain copy of HBM data comes back by the kernel's own load issued again (rematerialised), which
    the compiler's static schedule places like any load: as early as its space allows (a prefetch that
    queues with the other transfers). A spilled tile comes back by compiler spill code placed for its user:
    issued ahead of `need_by` (the user's earliest start) by its own latency and transfer time, once its save
    is done. (Issuing rematerialised loads just in time left TensorE waiting behind the other transfers in the
    trn2 walkthrough's blocked-M,N kernel, which the profile does not show; issuing spill reloads early made
    the blocked-M,N,K kernel's DMA queues busy all the time, which the profile does not show either.)"""
    saved = alloc.spilled.pop(sid)
    size = alloc.sizes[sid]
    if sid in alloc.dirty:
        rows = max(1, min(alloc.rows[sid], spec.partitions))
        lead = spec.dma_fixed_latency_s + size * rows / (
            min(spec.dma_engines, max(1, math.ceil(rows * spec.dma_engines / spec.partitions)))
            * spec.dma_engine_bytes_per_s * spec.dma_curve.efficiency(float(size)))
        now = need_by - lead if need_by - lead > saved else saved
    else:
        now = saved
    t = _make_room(alloc, cs, spec, sid, now, busy, storages, totals)
    _, end = _spill_transfer(cs, spec, t if t > saved else saved, size, alloc.rows[sid])
    totals.spill_reload_bytes += size * alloc.rows[sid]
    totals.spill_transfers += 1
    return end


def _lane_name(engine: str, core: int) -> str:
    return engine if core == 0 else f"{engine}@{core}"


class _Plan:
    """Everything about an instruction that follows from its signature, computed once per signature."""

    __slots__ = ("kind", "engine", "opcode", "dur", "extra", "queue", "issuer", "issue", "occupancy",
                 "cost", "matmul", "transpose", "activate", "psum_to_sbuf", "ports", "flops", "hbm_read",
                 "hbm_write", "mem", "mm_dtype", "file", "line", "busy", "count", "evict", "src_mems", "computes")

    KIND_COMPUTE, KIND_TENSOR, KIND_DMA, KIND_FOLDED = 0, 1, 2, 3

    def __init__(self, ins: Instruction, spec: TargetSpec) -> None:
        eng = ins.engine
        clock = spec.clock_hz
        self.engine = eng
        self.opcode = ins.opcode
        self.flops = float(ins.flops)
        self.hbm_read = int(ins.hbm_read)
        self.hbm_write = int(ins.hbm_write)
        self.matmul = self.transpose = self.activate = self.psum_to_sbuf = False
        self.ports: tuple[str, ...] = ()
        self.queue = self.issuer = ""
        self.mm_dtype = ins.in_dtypes[0] if ins.in_dtypes else "bfloat16"
        # totals of the instructions with this signature on its first source line (others go to a dict)
        self.file, self.line = ins.file, ins.line
        self.busy = 0.0
        self.count = 0
        self.issue = self.occupancy = self.extra = self.evict = 0.0
        self.src_mems = ins.in_mems
        # what it writes was computed by an engine (not a plain copy of HBM data): the allocator must save it
        # before reusing its space
        self.computes = eng != "dma" or "hbm" not in ins.in_mems
        nin = max(1, len(ins.in_mems))
        mem = [0, 0, 0, 0]  # sbuf read, psum read, sbuf write, psum write
        for m in ins.in_mems:
            if m == "sbuf":
                mem[0] += ins.bytes_read // nin
            elif m == "psum":
                mem[1] += ins.bytes_read // nin
        if ins.out_mem == "sbuf":
            mem[2] += ins.bytes_written
        elif ins.out_mem == "psum":
            mem[3] += ins.bytes_written
        self.mem = tuple(mem)
        if eng == "dma":
            self.kind = self.KIND_DMA
            plan = dma_plan(ins, spec)
            self.cost: DmaPlan | MatmulCost | ComputeCost = plan
            dur = plan.seconds
            if plan.hbm_bytes and spec.hbm_core_bytes_per_s:
                dur = max(dur, plan.hbm_bytes / spec.hbm_core_bytes_per_s)  # per-core HBM limit
            self.dur = dur
            # the 16 engines as one fluid server: a transfer on k engines occupies k/16 of it
            self.occupancy = dur * plan.engines / spec.dma_engines
            meta = ins.meta
            # meta["queue"] names the engine whose instruction stream triggers the DMA (trace
            # contract); the compiler gives loads, stores and other copies rings of their own
            issuer = str(meta.get("queue") or "sync")
            self.issuer = issuer if issuer in _ISSUERS else "sync"
            self.queue = f"{issuer}:{meta.get('ring') or _default_queue(ins)}"
            if meta.get("dge_mode") == "hwdge" and spec.hwdge_issue_s:
                self.issue = spec.hwdge_issue_s
            else:
                self.issue = spec.cycles.min_ii / clock[self.issuer]
        elif eng == "tensor" and (ins.opcode in MATMUL_OPCODES or ins.opcode in TRANSPOSE_OPCODES):
            self.kind = self.KIND_TENSOR
            mm = matmul_cost(ins, spec)
            self.cost = mm
            self.dur = mm.cycles / clock["tensor"]
            self.extra = mm.load_stationary / clock["tensor"]  # foreground LoadStationary if it waited
            self.transpose = mm.transpose
            self.matmul = not mm.transpose and ins.opcode in MATMUL_OPCODES
            if ins.meta.get("purpose") == "partition_broadcast":
                # A PSUM tile holds at most one bank per partition (512 fp32, TC#2 [L-PM]): a wider
                # broadcast row cannot be used from PSUM and is evicted to SBUF by a VectorE copy of F
                # elements (tensor_copy, N cycles [L-ISA]) after the matmuls (inferred lowering).
                psum_elems = (spec.hardware.psum_tile_max_bytes if spec.hardware else spec.psum_bank_bytes) // 4
                if ins.free > psum_elems:
                    self.evict = (max(float(ins.free), spec.cycles.min_ii) + spec.cycles.static_overhead) \
                        / clock["vector"]
        elif ins.opcode == "memset" and ins.out_mem == "psum" and ins.meta.get("value", 0) in (0, 0.0):
            # nl.zeros(..., buffer=psum) before `+=` matmuls: the first matmul resets the
            # accumulator itself (acc_flags / psum_zero [N-ISA]), so no engine executes this fill
            self.kind = self.KIND_FOLDED
            self.cost = compute_cost(ins, spec)
            self.dur = 0.0
        else:
            self.kind = self.KIND_COMPUTE
            cc = compute_cost(ins, spec)
            self.cost = cc
            self.dur = cc.cycles / clock[eng]
            self.extra = spec.cycles.static_overhead / clock[eng]  # exposed if it waited
            self.activate = ins.opcode in _ACTIVATE
            self.psum_to_sbuf = "psum" in ins.in_mems and ins.out_mem == "sbuf"
            if spec.port_serialization:
                mems = set(ins.in_mems) | {ins.out_mem}
                ports = []
                if eng in ("vector", "gpsimd") and "sbuf" in mems:
                    ports.append("sbuf")
                if eng in ("vector", "scalar") and "psum" in mems:
                    ports.append("psum")
                self.ports = tuple(ports)


def simulate(trace: Trace, spec: TargetSpec) -> Schedule:
    """Schedule every instruction of `trace` on `spec`; see the module docstring for the model."""
    with collector_paused():
        return _simulate(trace, spec)


def _frozen(value: object) -> object:
    """A copy of a meta dict that compares by value: itself when its values are plain (a dict copy), else with
    lists as tuples, nested dicts as sorted item tuples and anything else that is not hashable as its repr."""
    if isinstance(value, dict):
        if all(type(v) in _PLAIN for v in value.values()):
            return dict(value)
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set)):
        return tuple(_frozen(v) for v in value)
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _plan_for(ins: Instruction, key: _PlanKey, plans: dict[_PlanKey, _PlanEntry], all_plans: list[_Plan],
              spec: TargetSpec) -> "_Plan":
    """The plan of `ins` when the fast look-up missed: another meta under the same key, or a new plan. A key
    maps to [meta, plan, {hashable meta: plan}, [(meta, plan), ...]]: the first signature seen, then the
    others by a hashable form of their meta (a kernel writing 8192 immediates from one line has 8192
    metas under one key: a list searched each time made the schedule quadratic), and the few whose meta
    has no hashable form (an array in it) in a list."""
    meta = ins.meta
    ent = plans.get(key)
    hashed = _meta_key(meta)
    if ent is not None:
        if _same_meta(ent[0], meta):
            return cast(_Plan, ent[1])
        if hashed is not None:
            found = ent[2].get(hashed)
            if found is not None:
                return cast(_Plan, found)
        else:
            m: object
            plan: _Plan
            for m, plan in ent[3]:
                if _same_meta(m, meta):
                    return plan
    if ins.engine not in ENGINES:
        raise ValueError(
            f"instruction {ins.seq} ({ins.opcode} at {ins.location}): unknown engine {ins.engine!r}; "
            f"expected one of {', '.join(ENGINES)}")
    plan = _Plan(ins, spec)
    all_plans.append(plan)
    if ent is None:
        # compared by value later, whatever the caller does to its meta afterwards
        plans[key] = [_frozen(meta), plan, {}, []]
    elif hashed is not None:
        ent[2][hashed] = plan
    else:
        ent[3].append((_frozen(meta), plan))
    return plan


def _meta_key(meta: dict[str, Any]) -> object | None:
    """A hashable form of `meta` that is equal exactly when the metas are (None when it has none: an
    array, or a value whose equality is not plain)."""
    try:
        items = []
        for k, v in meta.items():
            if type(v) not in _PLAIN:
                v = _frozen(v)
                hash(v)
                if isinstance(v, str) and type(meta[k]) is not str:  # a repr: equal reprs need not be equal values
                    return None
            items.append((k, type(v).__name__, v))
        items.sort(key=lambda item: item[0])
        return tuple(items)
    except TypeError:
        return None


def _same_meta(snapshot: object, meta: dict[str, Any]) -> bool:
    try:
        return bool(snapshot == meta) or snapshot == _frozen(meta)
    except (TypeError, ValueError):  # a value that does not compare to a truth value (an array)
        return snapshot == _frozen(meta)


def _simulate(trace: Trace, spec: TargetSpec) -> Schedule:
    instrs = trace.instructions
    tiles = _SbufTiles(trace)
    n = len(instrs)
    cyc = spec.cycles
    clock = spec.clock_hz
    sched = Schedule(spec=spec, start=[0.0] * n, end=[0.0] * n)
    notes = sched.notes
    starts, ends = sched.start, sched.end

    storages: dict[int, _StorageRecord] = {}
    hbm_ids: list[int] = []  # HBM storages, in order of first access
    port_free: dict[tuple[int, str], float] = {}
    core_state: dict[int, _Core] = {}
    tensor_state: dict[int, list[float]] = {}  # core -> [last_end, warm_since]
    storage_info = trace.storages
    plans: dict[_PlanKey, _PlanEntry] = {}  # signature and source line -> [meta, plan, [(meta, plan), ...]]
    all_plans: list[_Plan] = []
    psum_count = spec.psum_banks
    sbuf_uses = _Uses(instrs)
    sbuf_sizes, sbuf_rows = tiles.sizes, tiles.rows
    release_at: list[list[int] | None] = [None] * n  # instruction -> the SBUF tiles whose last access it is
    for at, sids in tiles.release_at.items():
        if 0 <= at < n:
            release_at[at] = sids
    sbuf_cap = spec.sbuf_usable_bytes_per_partition
    dma_totals = sched.dma
    sbuf_stall = 0.0

    dep_latency = {e: cyc.dependency_latency / clock[e] for e in clock}
    dep_latency["tensor"] = cyc.mm_init_latency / clock["tensor"]
    dma_latency = spec.dma_fixed_latency_s
    throttle = spec.tensor_throttle
    throttled = 0.0
    psum_stall = 0.0
    KIND_DMA, KIND_TENSOR, KIND_FOLDED = _Plan.KIND_DMA, _Plan.KIND_TENSOR, _Plan.KIND_FOLDED
    cs: _Core  # the state of the instruction's core: set by the first instruction (cs_core starts unmatched)
    cs_core: int | None = None

    for idx, ins in enumerate(instrs):
        # the plan: by the instruction's signature and source line (a plain tuple, cheap to build and hash),
        # then its meta compared by value (usually the first one seen under that key)
        key = (ins.engine, ins.opcode, ins.partitions, ins.free, ins.in_dtypes, ins.out_dtype, ins.in_mems,
               ins.out_mem, ins.bytes_read, ins.bytes_written, ins.hbm_read, ins.hbm_write, ins.flops, ins.line,
               ins.file)
        ent = plans.get(key)
        try:
            plan = ent[1] if ent is not None and ent[0] == ins.meta else None
        except (TypeError, ValueError):  # a meta value that does not compare to a truth value (an array)
            plan = None
        if plan is None:
            plan = _plan_for(ins, key, plans, all_plans, spec)
        eng = plan.engine
        core = ins.core
        if core != cs_core:
            found = core_state.get(core)
            if found is None:
                found = core_state[core] = _Core(psum_count, _SbufAllocator(sbuf_cap, sbuf_uses, sbuf_sizes, sbuf_rows))
            cs, cs_core = found, core
        kind = plan.kind
        is_tensor = kind == KIND_TENSOR
        reads = ins.reads
        writes = ins.writes

        # ---- dependency-ready time (and the storage records, reused when registering) ----
        # Access boxes are unpacked once (much cheaper than their named fields) and kept for later.
        ready = 0.0
        psum_ready = 0.0
        read_st = []
        for a in reads:
            sid, mem, ap0, ap1, ab0, ab1 = a
            st = storages.get(sid)
            if st is None:
                st = storages[sid] = [(), (), 0.0, idx, idx, mem, 0, False]
                if mem == "hbm":
                    hbm_ids.append(sid)
            else:
                wl = st[0]
                if wl:
                    for w in wl:
                        if ap0 < w[1] and w[0] < ap1 and ab0 < w[3] and w[2] < ab1:
                            t = w[5] if (is_tensor and w[6]) else w[4]
                            if t > ready:
                                ready = t
            read_st.append((st, ap0, ap1, ab0, ab1))
        write_st = []
        fresh = None  # first accesses of storages written here: their records are made when registering
        for a in writes:
            sid, mem, ap0, ap1, ab0, ab1 = a
            st = storages.get(sid)
            if st is None:
                if fresh is None:
                    fresh = [a]
                else:
                    fresh.append(a)
                if mem == "psum":
                    t = _new_psum_tile(a, cs.psum, storages, storage_info, spec)
                    if t > psum_ready:
                        psum_ready = t
                continue
            elif not st[0] and not st[7] and st[5] == "hbm":
                # first write to an HBM tensor that was only read so far (an input updated in place): its
                # reads were not recorded one by one, so wait for all of them (conservative)
                if st[2] > ready:
                    ready = st[2]
            else:
                for w in st[0]:
                    if ap0 < w[1] and w[0] < ap1 and ab0 < w[3] and w[2] < ab1 and w[5] > ready:
                        if not (is_tensor and w[6]):  # accumulation into PSUM keeps the order by itself
                            ready = w[5]
                for r in st[1]:
                    if ap0 < r[1] and r[0] < ap1 and ab0 < r[3] and r[2] < ab1 and r[4] > ready:
                        ready = r[4]
            write_st.append((st, ap0, ap1, ab0, ab1))

        # ---- SBUF space: new tiles wait for room (or spill), spilled tiles come back ----
        alloc = cs.sbuf
        sbuf_ready = 0.0
        if fresh is not None or alloc.spilled:
            alloc.idx = idx
            alloc.writer_dirty = plan.computes
            busy_ids = None
            if alloc.spilled:
                need_by = ready if kind == KIND_DMA else max(ready, cs.free.get(eng, 0.0))
                for a in reads:
                    if a[0] in alloc.spilled:
                        busy_ids = busy_ids or {x[0] for x in (*reads, *writes)}
                        t = _reload(alloc, cs, spec, a[0], need_by, busy_ids, storages, dma_totals)
                        if t > sbuf_ready:
                            sbuf_ready = t
                for a in writes:
                    if a[0] in alloc.spilled:
                        busy_ids = busy_ids or {x[0] for x in (*reads, *writes)}
                        t = _reload(alloc, cs, spec, a[0], need_by, busy_ids, storages, dma_totals)
                        if t > sbuf_ready:
                            sbuf_ready = t
            if fresh is not None:
                for a in fresh:
                    if a[1] != "sbuf":
                        continue
                    sid = a[0]
                    size = sbuf_sizes.get(sid)
                    if size is None or sid in alloc.held:
                        continue
                    heap = alloc.heap
                    while heap and heap[0][0] <= ready:  # tiles past their last use by now
                        alloc.live -= heappop(heap)[1]
                    if alloc.live + size <= sbuf_cap:  # the common case: there is room
                        alloc.live += size
                        alloc.held[sid] = size
                        if alloc.live > alloc.peak:
                            alloc.peak = alloc.live
                        continue
                    busy_ids = busy_ids or {x[0] for x in (*reads, *writes)}
                    t = _make_room(alloc, cs, spec, sid, ready, busy_ids, storages, dma_totals)
                    if t > sbuf_ready:
                        sbuf_ready = t
            if sbuf_ready > ready and sbuf_ready > psum_ready:
                sbuf_stall += sbuf_ready - (ready if ready > psum_ready else psum_ready)
                psum_ready_before = psum_ready
                psum_ready = sbuf_ready
            else:
                psum_ready_before = psum_ready
        else:
            psum_ready_before = psum_ready

        # ---- timing ----
        if kind == KIND_FOLDED:
            start = end = result_ready = ready if ready > psum_ready else psum_ready
            busy = 0.0
        elif kind == KIND_DMA:
            if psum_ready > ready:
                ready = psum_ready
            issue = plan.issue
            if plan.issuer == "sync":
                # the Sync sequencer only triggers DMAs; the compiler spreads triggers over queues,
                # so a trigger waiting for its data does not hold back later ones (inferred)
                t0 = ready
                t1 = t0 + issue
                cs.sync_s.append(t0)
                cs.sync_e.append(t1)
            else:
                t0 = cs.free.get(plan.issuer, 0.0)
                if ready > t0:
                    t0 = ready
                cs.free[plan.issuer] = t0 + issue
                _add_interval(cs.lanes, plan.issuer, t0, t0 + issue)
            queue = plan.queue
            release = t0 + issue + dma_latency
            qs = cs.queue_start.get(queue, 0.0)
            queued = t0 + issue if t0 + issue > qs else qs  # in flight from the head of its queue on
            if qs > release:
                release = qs
            pool = cs.pool
            pbs, pbe = pool.bs, pool.be
            work = plan.occupancy
            if pbs and release >= pbs[-1] and release <= pbe[-1]:  # queued behind the last booking
                start = pbe[-1]
                pbe[-1] = fill_end = start + work
            else:
                start, fill_end = pool.fill(release, work)
            end = start + plan.dur
            if fill_end > end:  # its share of the engines was interrupted by earlier bookings
                end = fill_end
            busy = end - start
            cs.queue_start[queue] = start
            cs.flight_s.append(queued)
            cs.flight_e.append(end)
            dma_ivs = cs.dma_iv
            if not dma_ivs:
                dma_ivs.append([start, end])
            else:
                last = dma_ivs[-1]
                if start < last[0]:
                    cs.dma_late.append([start, end])
                elif start <= last[1] + _EPS:
                    if end > last[1]:
                        last[1] = end
                else:
                    dma_ivs.append([start, end])
            result_ready = end
        else:
            efree = cs.free
            free = efree.get(eng, 0.0)
            dep = ready if ready > psum_ready else psum_ready
            busy = plan.dur
            if dep > free:
                start = dep
                busy += plan.extra  # start-up cost exposed after a wait
                if psum_ready_before > ready:
                    psum_stall += psum_ready_before - (ready if ready > free else free)
            else:
                start = free
            if plan.ports:
                for port in plan.ports:
                    pf = port_free.get((core, port), 0.0)
                    if pf > start:
                        start = pf
            if is_tensor and throttle:
                tstate = tensor_state.get(core)
                if tstate is None:
                    tstate = tensor_state[core] = [0.0, 0.0]
                if start - tstate[0] > _THROTTLE_GAP_S:
                    tstate[1] = start
                elapsed = start - tstate[1]
                if elapsed < _THROTTLE_RAMP_S:
                    slow = busy / (0.5 + 0.5 * elapsed / _THROTTLE_RAMP_S) - busy
                    throttled += slow
                    busy += slow
            end = start + busy
            if plan.ports:
                for port in plan.ports:
                    port_free[(core, port)] = end
            efree[eng] = end
            if is_tensor and throttle:
                tensor_state[core][0] = end
            result_ready = end + dep_latency[eng]
            if plan.evict:
                vstart = efree.get("vector", 0.0)
                if result_ready > vstart:
                    vstart = result_ready
                vend = vstart + plan.evict
                efree["vector"] = vend
                _add_interval(cs.lanes, "vector", vstart, vend)
                sched.lane_time["vector"] += plan.evict
                sched.lane_exec_time["vector"] += plan.evict
                sched.lane_count["vector"] += 1
                result_ready = vend + dep_latency["vector"]
            ivs = cs.lanes.get(eng)
            if ivs is None:
                cs.lanes[eng] = [[start, end]]
            else:
                last = ivs[-1]
                if start <= last[1] + _EPS:
                    if end > last[1]:
                        last[1] = end
                else:
                    ivs.append([start, end])

        starts[idx] = start
        ends[idx] = end
        freed = release_at[idx]
        if freed is not None:
            held = alloc.held
            for sid in freed:
                size = held.pop(sid, None)
                if size is not None:
                    heappush(alloc.heap, (end, size))
        if alloc.evict_after:
            _evict_written(alloc, cs, spec, end, dma_totals)
        plan.busy += busy
        plan.count += 1

        # ---- register the accesses ----
        for st, ap0, ap1, ab0, ab1 in read_st:
            if st[0] or st[7] or st[5] != "hbm":  # an unwritten HBM input needs no read records
                rl = st[1]
                if rl:
                    rl.append((ap0, ap1, ab0, ab1, end))
                    if len(rl) > _MAX_RECORDS:
                        st[1] = _merge_oldest(rl, False)
                else:
                    st[1] = [(ap0, ap1, ab0, ab1, end)]
            if end > st[2]:
                st[2] = end
            st[4] = idx
        by_matmul = plan.matmul
        if plan.computes:
            dirty = alloc.dirty
            for a in writes:
                if a[1] == "sbuf":
                    dirty.add(a[0])
        for st, ap0, ap1, ab0, ab1 in write_st:
            # drop the records this write covers; empty record lists are () (no list per storage)
            wl = st[0]
            if wl:
                if len(wl) == 1:
                    w = wl[0]
                    if ap0 <= w[0] and w[1] <= ap1 and ab0 <= w[2] and w[3] <= ab1:
                        wl = None
                else:
                    wl = [w for w in wl if not (ap0 <= w[0] and w[1] <= ap1 and ab0 <= w[2] and w[3] <= ab1)]
            rl = st[1]
            if rl:
                if len(rl) == 1:
                    r = rl[0]
                    if ap0 <= r[0] and r[1] <= ap1 and ab0 <= r[2] and r[3] <= ab1:
                        st[1] = ()
                else:
                    st[1] = [r for r in rl
                             if not (ap0 <= r[0] and r[1] <= ap1 and ab0 <= r[2] and r[3] <= ab1)]
            if wl:
                wl.append((ap0, ap1, ab0, ab1, result_ready, end, by_matmul))
                st[0] = _merge_oldest(wl, True) if len(wl) > _MAX_RECORDS else wl
            else:
                st[0] = [(ap0, ap1, ab0, ab1, result_ready, end, by_matmul)]
            if end > st[2]:
                st[2] = end
            st[4] = idx
        if fresh is not None:
            for sid, mem, ap0, ap1, ab0, ab1 in fresh:
                if sid in storages:  # written twice by this instruction
                    st = storages[sid]
                    st[0].append((ap0, ap1, ab0, ab1, result_ready, end, by_matmul))
                    continue
                storages[sid] = [[(ap0, ap1, ab0, ab1, result_ready, end, by_matmul)], (), end, idx, idx, mem, ab1,
                                 True]
                if mem == "hbm":
                    hbm_ids.append(sid)

    # ---- totals from the plans' per-line rows ----
    rows: dict[tuple[str, int, _Plan], tuple[float, int]] = {}
    for plan in all_plans:
        if plan.count:
            rows[(plan.file, plan.line, plan)] = (plan.busy, plan.count)
    _totals(sched, rows)
    sched.throttled_time = throttled
    sched.psum_bank_stall = psum_stall
    intervals: dict[str, list[list[float]]] = {}
    for core, state in core_state.items():
        for eng, ivs in state.lanes.items():
            intervals[_lane_name(eng, core)] = ivs
    exec_intervals: dict[str, list[list[float]]] = {}
    for core, state in core_state.items():
        if state.dma_iv or state.dma_late:
            name = _lane_name("dma", core)
            exec_intervals[name] = _union(state.dma_iv + state.dma_late) if state.dma_late else state.dma_iv
            intervals[name] = _union_flat(state.flight_s, state.flight_e, [])
        if state.sync_s:
            name = _lane_name("sync", core)
            intervals[name] = _union_flat(state.sync_s, state.sync_e, intervals.get(name, []))
    sched.intervals = intervals
    sched.exec_intervals = exec_intervals
    sched.sbuf_alloc_stall = sbuf_stall
    sched.sbuf_peak_bytes = max((st.sbuf.peak for st in core_state.values() if st.sbuf is not None), default=0)
    sched.total_time = max(ends, default=0.0)
    sched.cores = max(1, len(core_state))
    sched.sbuf_demand_bytes = _sbuf_demand(instrs, tiles, spec, notes)
    sched.input_bytes = _input_bytes(hbm_ids, storages, storage_info)
    if sched.undocumented_opcodes:
        listed = ", ".join(sorted(sched.undocumented_opcodes))
        notes.append(f"no published cost formula for {listed}: used the VectorE rule "
                     "(N cycles per tensor input, at least MIN_II)")
    return sched


def _totals(sched: Schedule, rows: dict[tuple[str, int, _Plan], tuple[float, int]]) -> None:
    """Fold (file, line, plan) -> [busy, count] rows into the schedule's counters."""
    dt = sched.dma
    mem = [0, 0, 0, 0]
    for (f, ln, plan), (busy, count) in rows.items():
        lane = plan.engine
        sched.by_line[(f, ln, lane, plan.opcode)] = _add_row(
            sched.by_line.get((f, ln, lane, plan.opcode)), busy, count, plan.flops * count,
            (plan.hbm_read + plan.hbm_write) * count)
        if plan.kind != _Plan.KIND_FOLDED:
            sched.lane_time[lane] += busy
            sched.lane_count[lane] += count
            if plan.kind != _Plan.KIND_DMA:
                sched.lane_exec_time[lane] += plan.dur * count
        sched.hbm_read += plan.hbm_read * count
        sched.hbm_write += plan.hbm_write * count
        for i in range(4):
            mem[i] += plan.mem[i] * count
        cost = plan.cost  # its type follows the kind: DmaPlan for DMA, MatmulCost for TensorE, else ComputeCost
        if isinstance(cost, DmaPlan):
            dt.transfer_count += count
            dt.total_bytes += cost.nbytes * count
            dt.packet_time += cost.engines * plan.dur * count
            dt.transfer_time += busy
            dt.queues.add(plan.queue)
            dt.efficiency_weighted += cost.nbytes * cost.efficiency * count
            if cost.run_bytes < 2048:
                dt.small_run_transfers += count
                dt.small_run_bytes += cost.nbytes * count
        elif isinstance(cost, MatmulCost):
            if plan.transpose:
                sched.transpose_flops += cost.hardware_flops * count
                sched.adjusted_transpose_flops += cost.adjusted_flops * count
            elif plan.matmul:
                sched.matmul_count += count
                sched.model_flops += plan.flops * count
                sched.matmul_dtype_flops[plan.mm_dtype] += plan.flops * count
            sched.hardware_flops += cost.hardware_flops * count
            sched.adjusted_hardware_flops += cost.adjusted_flops * count
        elif plan.kind == _Plan.KIND_FOLDED:
            sched.folded_psum_zeroing += count
        else:
            if cost.perf_mode:
                sched.perf_modes[cost.perf_mode] += count
            if not cost.documented:
                sched.undocumented_opcodes[f"{plan.engine}:{plan.opcode}"] += count
            if plan.activate:
                sched.activate_count += count
                sched.activate_time += busy
            if plan.psum_to_sbuf:
                sched.psum_to_sbuf_count += count
                sched.psum_to_sbuf_bytes += plan.mem[2] * count
    sched.mem_bytes.update({"sbuf_read_bytes": mem[0], "psum_read_bytes": mem[1],
                            "sbuf_write_bytes": mem[2], "psum_write_bytes": mem[3]})


def _add_row(row: list[Any] | None, busy: float, count: int, flops: float, hbm: int) -> list[Any]:
    if row is None:
        return [busy, count, flops, hbm]
    row[0] += busy
    row[1] += count
    row[2] += flops
    row[3] += hbm
    return row


def _new_psum_tile(a: Access, banks: "_PsumBanks", storages: dict[int, _StorageRecord],
                   storage_info: dict[int, StorageInfo], spec: TargetSpec) -> float:
    """First write to a PSUM tile: take bank(s) and return when their previous tiles are done."""
    footprint = max(a.b1, _tile_bytes(storage_info.get(a.storage)))
    need = max(1, min(spec.psum_banks, math.ceil(footprint / spec.psum_bank_bytes)))
    return banks.acquire(a.storage, need, storages)


def _input_bytes(hbm_ids: list[int], storages: dict[int, _StorageRecord],
                 storage_info: dict[int, StorageInfo]) -> int:
    total = 0
    for sid in hbm_ids:
        if storages[sid][S_FIRST_WRITE]:
            continue
        info = storage_info.get(sid)
        if info is None or not info.shape:
            continue
        try:
            total += math.prod(info.shape) * itemsize(info.dtype)
        except ValueError:
            continue
    return total


def _tile_bytes(info: StorageInfo | None) -> int:
    """Bytes per partition of a 2-D [partitions, free] on-chip storage; 0 when the layout is not
    known from the shape alone (legacy block dimensions may precede the partition dimension, so
    for other ranks the accesses' byte extents are used instead)."""
    if info is None or len(info.shape) != 2:
        return 0
    try:
        return info.shape[1] * itemsize(info.dtype)
    except ValueError:
        return 0


def _default_queue(ins: Instruction) -> str:
    if ins.out_mem == "hbm" and any(m in ("sbuf", "psum") for m in ins.in_mems):
        return "out"
    if ins.out_mem in ("sbuf", "psum") and "hbm" in ins.in_mems:
        return "in"
    return "copy"


def _add_interval(lanes: dict[str, list[list[float]]], lane: str, start: float, end: float) -> None:
    ivs = lanes.get(lane)
    if ivs is None:
        lanes[lane] = [[start, end]]
    elif start <= ivs[-1][1] + _EPS:
        if end > ivs[-1][1]:
            ivs[-1][1] = end
    else:
        ivs.append([start, end])


def _union(ivs: list[list[float]]) -> list[list[float]]:
    out: list[list[float]] = []
    if not ivs:
        return out
    ivs = sorted(ivs)
    cur_s, cur_e = ivs[0]
    for s, e in ivs:
        if s <= cur_e + _EPS:
            if e > cur_e:
                cur_e = e
        else:
            out.append([cur_s, cur_e])
            cur_s, cur_e = s, e
    out.append([cur_s, cur_e])
    return out


def _union_flat(starts: list[float], ends: list[float], more: list[list[float]]) -> list[list[float]]:
    """Union of the intervals [starts[i], ends[i]] and `more`, merged as `_union` does (numpy: the
    Sync lane holds one trigger per DMA, far from time order)."""
    s = np.array(starts + [iv[0] for iv in more], dtype=np.float64)
    e = np.array(ends + [iv[1] for iv in more], dtype=np.float64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    breaks = np.flatnonzero(s[1:] > e[:-1] + _EPS) + 1  # first interval of each merged run
    first = np.concatenate(([0], breaks))
    last = np.concatenate((breaks - 1, [len(s) - 1]))
    merged: list[list[float]] = np.stack((s[first], e[last]), axis=1).tolist()
    return merged


def _sbuf_demand(instrs: list[Instruction], tiles: _SbufTiles, spec: TargetSpec, notes: list[str]) -> int:
    """Peak live SBUF bytes per partition in program order (each tile from its first to its last access, the
    emulator's capacity rule, before any allocation decision); a note when it is above the usable size."""
    if not tiles.first:
        return 0
    n = len(instrs)
    size = np.array(tiles.span_bytes, dtype=np.int64)
    delta = np.zeros(n + 2, dtype=np.int64)
    np.add.at(delta, np.array(tiles.first, dtype=np.int64), size)
    np.add.at(delta, np.array(tiles.last, dtype=np.int64) + 1, -size)
    live = np.cumsum(delta[:n + 1])
    at = int(live.argmax())
    peak = int(live[at])
    if peak > spec.sbuf_usable_bytes_per_partition:
        where = instrs[min(at, n - 1)].location
        notes.append(
            f"live SBUF data peaks at {peak / 1024:.1f} KiB per partition near {where}, above the "
            f"{spec.sbuf_usable_bytes_per_partition / 1024:.1f} KiB usable on {spec.name}: the compiler "
            "spills to HBM (the estimate includes the spill traffic of nkitui's allocator model)")
    return peak

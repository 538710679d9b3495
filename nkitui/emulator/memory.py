"""Storages (one allocation each) and the per-run SBUF / PSUM / HBM allocators.

An on-chip storage is a 2-D memory region: `shape[pax]` partitions (<= 128), and every other
dimension laid out row-major inside each partition. SBUF is checked against the target's usable
bytes per partition, PSUM as 8 banks of 2 KiB per partition with first-fit placement (each block
of a tile sits in one bank).

Capacity follows the compiler's liveness analysis, not Python's references: a tile is live from
the first instruction that touches it (its first write, where the compiler's allocator gives it an
address, not the `nl.ndarray` that declared it) to the last instruction that touches it (its last
read), in instruction positions. A tile declared before a loop and written inside it is therefore
not live before the loop, and a tile allocated in a loop body is dead once its iteration's last
instruction has used it, although the kernel's variable holds it until the next iteration rebinds
the name (Python builds the new tile before it rebinds). A tile no instruction touches takes no
memory. The peaks and the capacity check are computed from these live ranges when the kernel ends
(`OnChipAllocator.close`). A tile of <= 32 (<= 64) partitions counts a quarter (half) of its bytes per
partition: it may start at partition 0, 32, 64 or 96 (0 or 64), so four (two) share one byte range.

Over the usable SBUF, compiler-allocated tiles are not an error: the compiler spills them to HBM
(`capacity="error"`, the default, records a "spill" diagnostic naming the line and the KiB per partition
that must leave SBUF; the cost model charges the spill DMAs). What no allocation can fit stays an error:
the operands of one instruction together over the usable size (`working_set`), and tiles the kernel placed
itself beyond the usable bytes. `capacity="strict"` also refuses kernels that only fit by spilling.
PSUM reads count where the compiler may schedule them (`_psum_range`, `Run._schedule_psum_read`;
docs/emulator.md, "PSUM live ranges under reordering").
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nkitui.emulator import devmem
from nkitui.emulator import dtypes as dt
from nkitui.emulator.errors import (
    CapacityError,
    HostMemoryError,
    NKIEmulatorWarning,
    PartitionDimError,
    PsumBankError,
    kernel_location,
)
from nkitui.emulator.targets import PMAX, Target

if TYPE_CHECKING:
    from nkitui.emulator.tensor import Tensor

_ids = itertools.count(1)
_key = devmem.key_of  # identity without id()'s audit event

ON_CHIP = ("sbuf", "psum")


class Storage:
    """One allocation: the numpy array holding its cells plus bookkeeping."""

    __slots__ = ("id", "name", "memory", "kind", "shape", "dtype", "data", "partition_dim", "bytes_per_partition",
                 "blocks", "pp_strides", "flat_strides", "version", "_f32_copy", "_f32_version", "_misses",
                 "_alloc", "loop_depth", "lossy", "mm_zone", "init", "span", "__weakref__")

    def __init__(self, name: str, memory: str, shape: tuple[int, ...], dtype: dt.DType,
                 data: np.ndarray | None, pax: int = 0, kind: str = "", loop_depth: int = 0) -> None:
        self.id = next(_ids)
        self.name = name
        self.memory = memory
        self.kind = kind  # hbm: "input" | "shared" | "private"; on-chip: ""
        self.shape = shape
        self.dtype = dtype
        self.data = data  # type: ignore[assignment]  # None only in shape-only runs, which read no cells
        self.version = 0
        self._f32_copy: np.ndarray | None = None
        self._f32_version = -1
        self._misses = 0
        self._alloc: OnChipAllocator | None = None
        self.loop_depth = loop_depth  # the kernel's loop nesting where it was allocated (C15 checks)
        self.lossy = dtype is dt.tfloat32  # tf32 cells are fp32 rounded to 10 mantissa bits
        self.mm_zone: np.ndarray | None = None  # PSUM: True where the last write was a matmul (accumulate=None zones)
        self.init: Literal[True] | np.ndarray | None = None  # PSUM: cells written so far (None: none, True: all, else a bool array)
        self.flat_strides: tuple[int, ...] | None = None  # computed on first use (trace accesses)
        self.pp_strides: tuple[int, ...] | None = None
        self.span: Span | BlockSpans | None = None  # tracked SBUF tiles: their live range (views share their root's)
        if memory not in ON_CHIP:  # HBM
            self.partition_dim = -1
            self.bytes_per_partition = math.prod(shape) * dtype.itemsize
            self.blocks = 1
        elif pax == 0 and len(shape) == 2:  # the common tile
            self.partition_dim = 0
            self.bytes_per_partition = shape[1] * dtype.itemsize if shape[0] else 0
            self.blocks = 1
        else:
            self.partition_dim = pax
            self.bytes_per_partition = (math.prod(shape) // shape[pax] if shape[pax] else 0) * dtype.itemsize
            self.blocks = math.prod(shape[:pax]) if pax > 0 else 1

    # The cells (a numpy array; None in shape-only runs): a plain attribute, read three times per
    # instruction. In the kernel's process (device memory protection on) `guard_cells` makes it a
    # checked property: there the cells must be the emulated device's write-protected memory (devmem),
    # and cells replaced from the host are refused wherever an instruction reads or writes them.
    data: np.ndarray

    def strides(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(per-partition element strides, flat row-major element strides)."""
        if self.flat_strides is None:
            shape = self.shape
            flat = [1] * len(shape)
            for i in range(len(shape) - 2, -1, -1):
                flat[i] = flat[i + 1] * shape[i + 1]
            self.flat_strides = tuple(flat)
            if self.partition_dim >= 0:
                pp = [0] * len(shape)
                acc = 1
                for i in range(len(shape) - 1, -1, -1):
                    if i != self.partition_dim:
                        pp[i] = acc
                        acc *= shape[i]
                self.pp_strides = tuple(pp)
            else:
                self.pp_strides = self.flat_strides
        return self.pp_strides, self.flat_strides  # type: ignore[return-value]  # both set together above

    @property
    def partitions(self) -> int:
        return self.shape[self.partition_dim] if self.partition_dim >= 0 else 1

    def f32(self) -> np.ndarray:
        """The whole storage as float32 (cached until the next write)."""
        if self._f32_version == self.version:
            if devmem._on and not devmem.owns(self._f32_copy):
                raise devmem.ForeignMemoryError(f"the fp32 cache of {self!r} was replaced from the host")
        else:
            if self.data.dtype == np.float32:
                self._f32_copy = self.data
            elif devmem.enabled():  # the cache feeds instructions: as write-protected as the cells
                self._f32_copy = devmem.copy_of(dt.to_f32(self.data))
            else:
                self._f32_copy = dt.to_f32(self.data)
            self._f32_version = self.version
        return self._f32_copy  # type: ignore[return-value]  # set whenever _f32_version is current

    def __del__(self) -> None:
        alloc = self._alloc
        if alloc is not None:
            self._alloc = None
            try:
                sp = self.span
                if self.memory == "sbuf" and sp.__class__ is list and sp[SP_LAST] >= 0:
                    # the common case (a used SBUF tile: every legacy result), OnChipAllocator.release inlined
                    p = self.shape[self.partition_dim]
                    size = self.bytes_per_partition
                    alloc.sbuf_live -= size if p > 64 else sbuf_share(size, p)
                else:
                    alloc.release(self)
            except Exception:  # interpreter shutdown: nothing left to account
                pass

    def __repr__(self) -> str:
        return f"<{self.memory} {self.name or '#%d' % self.id} {self.shape} {self.dtype.name}>"


_cells_slot: Any = Storage.__dict__["data"]  # the slot's own descriptor (C): the checked property reads and sets through it


def _checked_cells(self: Storage) -> np.ndarray:
    d = _cells_slot.__get__(self, Storage)
    if devmem._on and d is not None:  # devmem.owns, its common case inlined (this runs on every access)
        b = d.base if type(d) is np.ndarray else devmem  # a look-alike never passes
        if (_key(d) if b is None else _key(b)) not in devmem._owners and not devmem.owns(d):
            raise devmem.ForeignMemoryError(f"the cells of {self!r} are not the emulated device's memory: they "
                                            "were replaced from the host, behind the instructions")
    return d  # type: ignore[no-any-return]  # the slot holds the cells


def _set_cells(self: Storage, value: np.ndarray | None) -> None:
    _cells_slot.__set__(self, value)


_CHECKED_CELLS = property(_checked_cells, _set_cells, doc="The cells, checked to be the device's memory (devmem).")


def guard_cells() -> None:
    """Make `Storage.data` check, on every read, that the cells are the emulated device's memory: called
    when a launch starts in a process whose device memory is protected (`devmem.enabled()`: the kernel's
    process), before any instruction can read a storage; elsewhere the cells are a plain attribute. The
    check applies to every storage at once, whenever it was made (a class attribute)."""
    if Storage.__dict__["data"] is not _CHECKED_CELLS:
        setattr(Storage, "data", _CHECKED_CELLS)  # noqa: B010  (mypy: a slot replaced by a property)


def cells_guarded() -> bool:
    return Storage.__dict__["data"] is _CHECKED_CELLS


def sbuf_share(bytes_per_partition: int, partitions: int) -> int:
    """What an SBUF tile of `partitions` partitions takes of every partition's bytes, as the allocator can
    pack it: a tile of <= 32 partitions may start at partition 0, 32, 64 or 96, one of <= 64 at 0 or 64
    (the partition start rules of the allocator [ARCH2, L-ALLOC]), so four (two) such tiles share one
    byte range and each holds a quarter (half) of it. The cost model's allocator counts it alike
    (perf/schedule.py, `_SbufTiles`)."""
    if partitions <= 32:
        return -(-bytes_per_partition // 4)
    if partitions <= 64:
        return -(-bytes_per_partition // 2)
    return bytes_per_partition


def _fill(data: np.ndarray, dtype: dt.DType) -> None:
    # AWS's simulator fills fresh buffers with NaN (floats) / 4 (integers) so that reads of
    # uninitialised memory show up in the results.
    if dtype.is_float:
        data.fill(np.nan)
    elif dtype.kind == "b":
        data.fill(True)
    else:
        data.fill(4)


INT_SENTINEL = 4


# A tile's live range (the compiler's view) is a plain list, cheap to build per result tile:
# [start, last, bytes per partition, blocks, memory, (path, line) | None, name, shape, dtype,
#  first, last write, last read end].
# start: instruction position before which it was allocated; last: the last instruction that
# touched it (-1: none); bytes: 0 once discarded; (path, line): SBUF: its first use, PSUM: its
# allocation (kept only when it might overflow); first: the first instruction that touched it (an
# SBUF tile is live from there, not from start; PSUM: `_psum_range`); last write: the last
# instruction that wrote it; last read end: where its last read can be scheduled (PSUM: see
# `Run.record` and `OnChipAllocator._close_psum`). -1: none.
(SP_START, SP_LAST, SP_SIZE, SP_BLOCKS, SP_MEMORY, SP_LOC, SP_NAME, SP_SHAPE, SP_DTYPE,
 SP_FIRST, SP_WRITE, SP_READ_END) = range(12)
Span = list[Any]  # a live range: the SP_* fields above (mixed types, indexed by position)


def _sbuf_range(sp: Span) -> tuple[int, int]:
    """An SBUF tile's live range: its first use to its last use (first write .. last read, as the
    compiler allocates), or (-1, -1) for a tile no instruction touched (it is never allocated)."""
    first = sp[SP_FIRST]
    if first < 0:
        return -1, -1
    return first, (sp[SP_LAST] if sp[SP_LAST] > first else first)


def _int64s(spans: list[Span], field: int) -> np.ndarray:
    """Field `field` of every span as an int64 array, taken out in C (np.fromiter over itemgetter: measured
    faster than a list converted with np.array, and than array.array, which parses each item): a launch
    has about as many spans as instructions."""
    return np.fromiter(map(operator.itemgetter(field), spans), dtype=np.int64, count=len(spans))


def _psum_range(sp: Span) -> tuple[int, int]:
    """A PSUM tile's live range under the compiler's reordering: from its first use (the compiler
    allocates at the first write, not at `nl.ndarray`) to its last write or to where its last read can
    be scheduled, whichever is later (`Run.record` moves a read only where no data dependence keeps it)."""
    first = sp[SP_FIRST] if sp[SP_FIRST] >= 0 else sp[SP_START]
    end = max(sp[SP_WRITE], sp[SP_READ_END])
    return first, (end if end >= first else first)


def _span_label(sp: Span) -> str:
    name, shape, dtype = sp[SP_NAME], sp[SP_SHAPE], sp[SP_DTYPE]
    return f"'{name}' {shape} {dtype.name}" if name else f"tile {shape} {dtype.name}"


class BlockSpans:
    """The live ranges of the blocks of an SBUF tensor with block dimensions (the dimensions left of
    `nl.par_dim`): the compiler allocates each block as a tile of its own, live from the first to
    the last instruction that touches it, so a (32, 7, par_dim(128), 1024) tensor whose blocks are
    used one after another needs one block's bytes, not 224 blocks' (issue #19). A block's span is
    created when an instruction first touches it (`touch`, called by Run.record). It has no item
    assignment on purpose: Run.record's `span[1] = n` raises TypeError for it and calls `touch`
    instead, so ordinary tiles pay nothing for block tracking."""

    __slots__ = ("alloc", "storage", "blocks", "loc")

    def __init__(self, alloc: OnChipAllocator, st: Storage, loc: tuple[str, int] | None) -> None:
        self.alloc = alloc
        self.storage = st
        self.blocks: dict[int, Span] = {}
        self.loc = loc

    def touch(self, view: Tensor, n: int) -> None:
        st = self.storage
        pax = st.partition_dim
        bounds = view.bounds()[:pax]
        if any(hi < lo for lo, hi in bounds):
            return
        shape = st.shape[:pax]
        per_block = sbuf_share(st.bytes_per_partition // st.blocks, st.shape[pax])
        blocks = self.blocks
        for idx in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds)):
            flat = 0
            for i, n_d in zip(idx, shape):
                flat = flat * n_d + i
            sp = blocks.get(flat)
            if sp is None:
                sp = blocks[flat] = [n, n, per_block, 1, "sbuf", self.loc, f"{st.name or 'tensor'}{list(idx)}",
                                     st.shape[pax:], st.dtype, n, n, -1]
                self.alloc.sbuf_spans.append(sp)
            elif sp[SP_LAST] < n:
                sp[SP_LAST] = n


class OnChipAllocator:
    """Live ranges of the SBUF and PSUM tiles of one kernel run, checked when the kernel ends.

    `position()` returns the index of the next instruction (the run's instruction count)."""

    def __init__(self, target: Target, capacity_mode: str, diagnostics: list[dict[str, object]],
                 position: Callable[[], int] | None = None) -> None:
        self.target = target
        self.mode = capacity_mode
        self.diagnostics = diagnostics
        self.position: Callable[[], int] = position or (lambda: 0)
        self.sbuf_live = 0  # bytes of SBUF tiles Python still refers to (an upper bound of the live ranges)
        self.psum_live_blocks = 0  # blocks of PSUM tiles Python still refers to (likewise)
        self.sbuf_peak = 0  # peaks of the live ranges, set by close()
        self.psum_peak = 0
        # the live ranges of the SBUF and the PSUM tiles, apart (close() sweeps each without sorting them out)
        self.sbuf_spans: list[Span] = []
        self.psum_spans: list[Span] = []
        self._warned = False
        # the largest SBUF share the operands of one instruction hold together, and that instruction's line:
        # over the usable size no allocation exists (spilling cannot help); measured only while what
        # Python holds is over it (`working_set`)
        self.working_peak = 0
        self.working_loc: tuple[str, int] | None = None
        # Python-held SBUF bytes above this: a tile used now may be the one that overflows, so its
        # first use keeps its line (first_use); never when capacity is off
        self.sbuf_loc_above = target.sbuf_usable_bytes_per_partition if capacity_mode != "off" else math.inf

    # allocation -------------------------------------------------------------------------------
    def reserve_sbuf(self, st: Storage, position: int) -> None:
        """Track SBUF tile `st`, allocated before instruction `position`."""
        size = st.bytes_per_partition
        if st.shape[st.partition_dim] <= 64:  # (sbuf_share: the full bytes above 64 partitions, no call then)
            size = sbuf_share(size, st.shape[st.partition_dim])
        self.sbuf_live += size
        if st.blocks > 1:  # block dimensions: one live range per block, from its first use
            # what Python holds bounds what is live, so only these allocations can overflow: keep
            # their line for the message close() may raise
            over = self.sbuf_live > self.sbuf_loc_above
            st.span = BlockSpans(self, st, kernel_location() if over else None)
        else:  # live from its first use: Run.record sets SP_FIRST and calls first_use
            sp = st.span = [position, -1, size, 1, "sbuf", None, st.name, st.shape, st.dtype, -1, -1, -1]
            self.sbuf_spans.append(sp)
        st._alloc = self

    def first_use(self, sp: Span) -> None:
        """SBUF tile `sp` is used for the first time (its live range starts): what Python holds bounds
        what is live, so only when that is over the usable size can this tile overflow; then keep the
        line of this first use for the message close() may raise."""
        if self.sbuf_live > self.sbuf_loc_above and sp[SP_LOC] is None:
            sp[SP_LOC] = kernel_location()

    def working_set(self, ins: Sequence[Tensor], outs: Sequence[Tensor]) -> None:
        """The SBUF share of the tiles one instruction touches (called by Run.record only while what Python
        holds is over the usable size, which bounds it): the most of it is kept with its line, since an
        instruction's operands must all be in SBUF at once: over the usable size no spill makes room."""
        seen: set[int] = set()
        total = 0
        for t in itertools.chain(ins, outs):
            st = t.storage
            if st.memory != "sbuf" or st.span is None or st.id in seen:
                continue
            seen.add(st.id)
            if st.blocks > 1:  # only the blocks this view touches
                bounds = t.bounds()[:st.partition_dim]
                touched = math.prod(max(0, hi - lo + 1) for lo, hi in bounds)
                total += touched * sbuf_share(st.bytes_per_partition // st.blocks, st.shape[st.partition_dim])
            else:
                total += sbuf_share(st.bytes_per_partition, st.shape[st.partition_dim])
        if total > self.working_peak:
            self.working_peak = total
            if total > self.target.sbuf_usable_bytes_per_partition:
                self.working_loc = kernel_location()

    def reserve_psum(self, st: Storage, position: int) -> None:
        per_block = st.bytes_per_partition // max(st.blocks, 1)
        if per_block > self.target.psum_tile_max_bytes:
            raise PsumBankError(
                f"PSUM tile {_label(st)} needs {per_block} B per partition, over one "
                f"{self.target.psum_tile_max_bytes} B PSUM bank ({self.target.psum_tile_max_bytes // 4} fp32 "
                f"elements); split the free dimension into tiles of at most "
                f"{self.target.psum_tile_max_bytes // st.dtype.itemsize} elements")
        blocks = max(st.blocks, 1)
        sp = st.span = [position, -1, st.bytes_per_partition, blocks, "psum", None, st.name, st.shape, st.dtype,
                        -1, -1, -1]
        self.psum_spans.append(sp)
        self.psum_live_blocks += blocks
        # a block fails to fit only when every bank holds a live block (or, for a multi-bank block, no
        # run of free banks is left); Python holds every live block, so keep the line only then
        if self.mode != "off" and (self.psum_live_blocks > self.target.psum_banks
                                   or per_block > self.target.psum_bank_bytes):
            sp[SP_LOC] = kernel_location()
        st._alloc = self

    def matmul_result(self, st: Storage) -> None:
        """A return-style matmul result: a PSUM tile of its own unless it is fused later."""
        self.reserve_psum(st, self.position())

    def matmul_fused(self, st: Storage) -> None:
        """`psum += result`: the matmul wrote the accumulator directly and needed no bank."""
        if st.span is not None:
            st.span[SP_SIZE] = 0  # type: ignore[index]  # a PSUM tile's span is a list (BlockSpans: SBUF only)

    def release(self, st: Storage) -> None:
        sp = st.span
        if st.memory == "sbuf":
            p = st.shape[st.partition_dim]
            self.sbuf_live -= st.bytes_per_partition if p > 64 else sbuf_share(st.bytes_per_partition, p)
        elif sp is not None:
            self.psum_live_blocks -= sp[SP_BLOCKS]  # type: ignore[index]  # a PSUM tile's span is a list
        if sp.__class__ is list and sp[SP_LAST] < 0 and sp[SP_START] == self.position():
            sp[SP_SIZE] = 0  # dropped before any instruction used it: the compiler allocates nothing

    # the check --------------------------------------------------------------------------------
    def close(self) -> None:
        """The kernel has finished: the peaks of the live ranges, checked against the capacities."""
        sbuf, self.sbuf_spans = self.sbuf_spans, []
        psum = [sp for sp in self.psum_spans if sp[SP_SIZE]]
        self.psum_spans = []
        if sbuf:
            self._close_sbuf(sbuf)
        if psum:
            self._close_psum(psum)

    def _close_sbuf(self, spans: list[Span]) -> None:
        # the sweep over the positions in numpy: a kernel of 27k instructions has about as many tiles,
        # and the loop over them and the positions in Python took a fifth of its emulated launch; the
        # fields come out of the spans in C (itemgetter), no Python per tile. A tile counts when it has
        # bytes (not dropped before use, not retargeted) and an instruction touched it; its range is
        # _sbuf_range(sp), computed here for all tiles at once.
        first = _int64s(spans, SP_FIRST)
        size = _int64s(spans, SP_SIZE)
        keep = (first >= 0) & (size != 0)
        usable = self.target.sbuf_usable_bytes_per_partition
        peak = 0
        over_at = -1
        if keep.any():
            n = self.position() + 3
            first, last, size = first[keep], _int64s(spans, SP_LAST)[keep], size[keep]
            end = np.maximum(last, first)  # a tile only written is live at its first use
            delta = np.bincount(first, weights=size, minlength=n).astype(np.int64)
            delta -= np.bincount(end + 1, weights=size, minlength=n).astype(np.int64)
            live = np.cumsum(delta)
            peak = max(0, int(live.max()))
            over = np.flatnonzero(live > usable)  # the first position over the usable size is a new peak
            if over.size:
                over_at = int(over[0])
        self.sbuf_peak = max(self.sbuf_peak, peak)
        if self.mode == "off":
            return
        if self.working_peak > usable:  # no allocation holds one instruction's operands: hardware cannot
            loc = self.working_loc
            where = f" at {os.path.basename(loc[0])}:{loc[1]}" if loc is not None and loc[0] else ""
            msg = (f"SBUF capacity exceeded: one instruction{where} needs {self.working_peak} B per partition of "
                   f"SBUF operands at once, over the {usable} usable B per partition on {self.target.name}; an "
                   "instruction's operands must all be in SBUF while it runs, so no spill can make room")
            self._over_capacity(msg, " (split the instruction's tiles along the free dimension)", "", loc)
            return
        if over_at < 0:
            return
        # the tile whose first use first took the live ranges over the usable size
        ranges = [(*_sbuf_range(spans[i]), spans[i]) for i in np.flatnonzero(keep)]
        culprit = max((sp for start, _, sp in ranges if start == over_at), key=lambda sp: sp[SP_LOC] is not None)
        others = sum(sp[SP_SIZE] for start, end, sp in ranges if sp is not culprit and start <= over_at <= end)
        if self.mode == "strict":
            msg = (f"SBUF capacity exceeded: {_span_label(culprit)} needs {culprit[SP_SIZE]} B per partition "
                   f"while {others} of {usable} usable B per partition are live on {self.target.name} (a tile is "
                   "live from its first use to its last use, as the compiler allocates it; capacity='strict' "
                   "refuses kernels that fit only by spilling)")
            raise CapacityError(msg + " (free tiles earlier, tile smaller, or run with capacity='error', which "
                                "lets the compiler spill)", location=culprit[SP_LOC] or ("", 0))
        # the compiler spills (NKI programming model: live data over SBUF goes to HBM, compiler-inserted DMAs;
        # the profiler's spill_save_bytes / spill_reload_bytes): a diagnostic, not an error
        loc = culprit[SP_LOC]
        where = f" at {os.path.basename(loc[0])}:{loc[1]}" if loc is not None and loc[0] else ""
        excess = peak - usable
        amount = f"{excess / 1024:.1f} KiB" if excess >= 1024 else f"{excess} B"
        msg = (f"the compiler would spill at least {amount} per partition of SBUF{where}: live "
               f"tiles peak at {peak} of {usable} usable B per partition on {self.target.name}, over from the first "
               f"use of {_span_label(culprit)} ({culprit[SP_SIZE]} B per partition); spills are DMAs to HBM and "
               "back (the cost model charges them)")
        self._warn(msg, loc, rule="spill")

    def _over_capacity(self, msg: str, fix: str, warning_note: str, location: tuple[str, int] | None) -> None:
        """An overflow under the capacity mode: an error carrying the fix, a warning, or nothing ('off')."""
        if self.mode in ("error", "strict"):
            raise CapacityError(msg + fix, location=location or ("", 0))
        if self.mode == "warn":
            self._warn(msg + warning_note, location)

    def _close_psum(self, spans: list[Span]) -> None:
        """Place the tiles in the 8 banks first-fit, in the order of their first use, freeing each after
        its last use as the compiler may schedule it (`_psum_range`)."""
        bank_bytes = self.target.psum_bank_bytes
        used = [0] * self.target.psum_banks
        placed: list[tuple[int, int, list[tuple[int, int]]]] = []  # heap of (last use, order, [(bank, bytes), ...])
        ranges = sorted((_psum_range(sp) + (order, sp) for order, sp in enumerate(spans)), key=lambda r: (r[0], r[2]))
        for start, end, order, sp in ranges:
            while placed and placed[0][0] < start:
                for bank, size in heapq.heappop(placed)[2]:
                    used[bank] -= size
            blocks = sp[SP_BLOCKS]
            per_block = sp[SP_SIZE] // blocks
            chosen = _first_fit(used, per_block, blocks, bank_bytes)
            if chosen is None:
                live = sum(1 for u in used if u)
                msg = (f"PSUM capacity exceeded: {_span_label(sp)} needs {blocks} block(s) of {per_block} B but "
                       f"{live} of {len(used)} PSUM banks (2 KiB per partition each) are in use (a tile is live "
                       "from its first use to its last use, each read as early as its data dependences allow)")
                self._over_capacity(msg, "; release PSUM tiles (copy results to SBUF) before allocating more", "",
                                    sp[SP_LOC])
                continue
            for bank, size in chosen:
                used[bank] += size
            heapq.heappush(placed, (end, order, chosen))
            total = sum(used)
            if total > self.psum_peak:
                self.psum_peak = total

    def _warn(self, msg: str, loc: tuple[str, int] | None = None, rule: str = "capacity") -> None:
        diag: dict[str, object] = {"rule": rule, "message": msg}
        if loc is not None and loc[0]:
            diag.update(file=os.path.basename(loc[0]), line=loc[1])
        self.diagnostics.append(diag)
        if not self._warned:
            self._warned = True
            if loc is not None and loc[0]:
                warnings.warn_explicit(msg, NKIEmulatorWarning, loc[0], loc[1])
            else:
                warnings.warn(msg, NKIEmulatorWarning, stacklevel=4)


def _first_fit(used: list[int], per_block: int, blocks: int, bank_bytes: int) -> list[tuple[int, int]] | None:
    """Banks for `blocks` blocks of `per_block` bytes: each block in the first bank with room; a
    block over one bank (trn3) takes whole free banks in a row. None if they do not fit."""
    used = list(used)
    chosen: list[tuple[int, int]] = []
    banks_per_block = max(1, -(-per_block // bank_bytes))
    for _ in range(blocks):
        if banks_per_block == 1:
            b = next((b for b in range(len(used)) if used[b] + per_block <= bank_bytes), None)
            if b is None:
                return None
            used[b] += per_block
            chosen.append((b, per_block))
        else:
            b = next((b for b in range(len(used) - banks_per_block + 1)
                      if all(used[b + k] == 0 for k in range(banks_per_block))), None)
            if b is None:
                return None
            for k in range(banks_per_block):
                used[b + k] = bank_bytes
                chosen.append((b + k, bank_bytes))
    return chosen


def _label(st: Storage) -> str:
    return f"'{st.name}' {st.shape} {st.dtype.name}" if st.name else f"tile {st.shape} {st.dtype.name}"


def check_partitions(shape: tuple[int, ...], pax: int, what: str) -> None:
    if not shape:
        raise PartitionDimError(f"{what} must have at least 2 dimensions (partition, free); got a scalar shape")
    p = shape[pax]
    if p > PMAX:
        raise PartitionDimError(f"partition dimension {p} exceeds {PMAX} in {what} of shape {tuple(shape)}")


# Allocations this large (or larger) are checked against the host's available memory first, so a
# kernel that needs more than the host has fails with a message instead of swapping the machine or
# meeting the OOM killer. Smaller ones (every tile) skip the check: it reads /proc/meminfo.
HOST_CHECK_BYTES = 256 << 20


def host_available_bytes() -> int | None:
    """Memory the host can still give this process (MemAvailable, or free pages), None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def check_host_memory(nbytes: int, what: str, emulated: int = 0) -> None:
    """Raise HostMemoryError when `nbytes` more of host memory are not available."""
    avail = host_available_bytes()
    if avail is not None and nbytes > avail:
        raise HostMemoryError(
            f"emulating {what} needs {_gib(nbytes)} of host memory (the emulator keeps every device tensor in a "
            f"host array of the same size{f'; {_gib(emulated)} of device tensors are already held' if emulated else ''}"
            f"), but only {_gib(avail)} is available; use smaller shapes, or trace shape-only "
            "(emulator.trace(execute=False)), which allocates no data", location=kernel_location())


def new_array(shape: tuple[int, ...], dtype: dt.DType, precise: bool, fill: bool) -> np.ndarray:
    sd = dt.storage_dtype(dtype, precise)
    try:
        data = devmem.empty(shape, sd) if devmem._on else np.empty(shape, dtype=sd)  # (devmem.enabled(), inlined)
    except MemoryError:  # Run.allocate checked the big ones first; this is what numpy itself refuses
        nbytes = math.prod(shape) * sd.itemsize
        raise HostMemoryError(f"emulating a tensor {tuple(shape)} {dtype.name} needs {_gib(nbytes)} of host memory, "
                              "which the host refused to allocate", location=kernel_location()) from None
    if fill:
        with devmem.writing(data):
            _fill(data, dtype)
    return data

"""Storages (one allocation each) and the per-run SBUF / PSUM / HBM allocators.

An on-chip storage is a 2-D memory region: `shape[pax]` partitions (<= 128), and every other
dimension laid out row-major inside each partition. Allocation is tracked per partition: SBUF
against the target's usable bytes per partition, PSUM as 8 banks of 2 KiB per partition with
first-fit placement (each block of a tile sits in one bank). Storages are released when the
kernel drops its last reference (CPython reference counting), which mirrors the live ranges the
compiler would see for tiles allocated inside loop bodies.
"""

from __future__ import annotations

import gc
import itertools
import math
import types
import warnings

import numpy as np

from nkitui.emulator import dtypes as dt
from nkitui.emulator.errors import (
    CapacityError,
    NKIEmulatorWarning,
    PartitionDimError,
    PsumBankError,
    assigned_name,
    kernel_frame,
)
from nkitui.emulator.targets import PMAX, Target

_ids = itertools.count(1)

ON_CHIP = ("sbuf", "psum")


class Storage:
    """One allocation: the numpy array holding its cells plus bookkeeping."""

    __slots__ = ("id", "name", "memory", "kind", "shape", "dtype", "data", "pax", "nbytes_pp",
                 "blocks", "pp_strides", "flat_strides", "version", "_f32", "_f32v", "_misses",
                 "_alloc", "banks", "loop_depth", "lossy", "mm_zone", "__weakref__")

    def __init__(self, name: str, memory: str, shape: tuple[int, ...], dtype: dt.DType,
                 data: np.ndarray | None, pax: int = 0, kind: str = "") -> None:
        self.id = next(_ids)
        self.name = name
        self.memory = memory
        self.kind = kind  # hbm: "input" | "shared" | "private"; on-chip: ""
        self.shape = shape
        self.dtype = dtype
        self.data = data
        self.pax = pax if memory in ON_CHIP else -1
        self.version = 0
        self._f32 = None
        self._f32v = -1
        self._misses = 0
        self._alloc = None
        self.banks = ()
        self.loop_depth = 0
        self.lossy = dtype is dt.tfloat32  # tf32 cells are fp32 rounded to 10 mantissa bits
        self.mm_zone = None  # PSUM: True where the last write was a matmul (accumulate=None zones)
        self.flat_strides = None  # computed on first use (trace accesses)
        self.pp_strides = None
        pax = self.pax
        if pax >= 0:
            self.nbytes_pp = (math.prod(shape) // shape[pax] if shape[pax] else 0) * dtype.itemsize
            self.blocks = math.prod(shape[:pax]) if pax > 0 else 1
        else:
            self.nbytes_pp = math.prod(shape) * dtype.itemsize
            self.blocks = 1

    def strides(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(per-partition element strides, flat row-major element strides)."""
        if self.flat_strides is None:
            shape = self.shape
            flat = [1] * len(shape)
            for i in range(len(shape) - 2, -1, -1):
                flat[i] = flat[i + 1] * shape[i + 1]
            self.flat_strides = tuple(flat)
            if self.pax >= 0:
                pp = [0] * len(shape)
                acc = 1
                for i in range(len(shape) - 1, -1, -1):
                    if i != self.pax:
                        pp[i] = acc
                        acc *= shape[i]
                self.pp_strides = tuple(pp)
            else:
                self.pp_strides = self.flat_strides
        return self.pp_strides, self.flat_strides

    @property
    def partitions(self) -> int:
        return self.shape[self.pax] if self.pax >= 0 else 1

    def f32(self) -> np.ndarray:
        """The whole storage as float32 (cached until the next write)."""
        if self._f32v != self.version:
            self._f32 = self.data if self.data.dtype == np.float32 else self.data.astype(np.float32)
            self._f32v = self.version
        return self._f32

    def __del__(self) -> None:
        alloc = self._alloc
        if alloc is not None:
            self._alloc = None
            try:
                alloc.release(self)
            except Exception:  # interpreter shutdown: nothing left to account
                pass

    def __repr__(self) -> str:
        return f"<{self.memory} {self.name or '#%d' % self.id} {self.shape} {self.dtype.name}>"


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


class OnChipAllocator:
    """Tracks live SBUF bytes per partition and PSUM bank occupancy for one kernel run."""

    def __init__(self, target: Target, capacity_mode: str, diagnostics: list) -> None:
        self.target = target
        self.mode = capacity_mode
        self.diagnostics = diagnostics
        self.sbuf_live = 0
        self.sbuf_peak = 0
        self.bank_used = [0] * target.psum_banks
        self.psum_peak = 0
        self._warned = False
        # A legacy matmul result is untracked until we know whether it fuses into `psum += ...`
        # (no bank of its own) or stays a tile of its own (one bank). At most one is undecided.
        self._undecided_mm: tuple[int, int] | None = None  # (storage id, peak if it is a tile)

    # SBUF -----------------------------------------------------------------------------------
    def reserve_sbuf(self, st: Storage) -> None:
        need = st.nbytes_pp
        usable = self.target.sbuf_usable_bytes_per_partition
        if self.sbuf_live + need > usable and self.mode != "off" and not (
                reclaim_rebound("sbuf") and self.sbuf_live + need <= usable):
            msg = (f"SBUF capacity exceeded: {_label(st)} needs {need} B per partition while "
                   f"{self.sbuf_live} of {usable} usable B per partition are live on {self.target.name}")
            if self.mode == "error":
                raise CapacityError(msg + " (free tiles earlier, tile smaller, or run with capacity='warn')")
            self._warn(msg + "; the compiler would spill to HBM")
        self.sbuf_live += need
        self.sbuf_peak = max(self.sbuf_peak, self.sbuf_live)
        st._alloc = self

    # PSUM -----------------------------------------------------------------------------------
    def reserve_psum(self, st: Storage) -> None:
        try:
            self._place_psum(st)
        except CapacityError:
            if not reclaim_rebound("psum"):
                raise
            self._place_psum(st)

    def _place_psum(self, st: Storage) -> None:
        per_block = st.nbytes_pp // max(st.blocks, 1)
        if per_block > self.target.psum_tile_max_bytes:
            raise PsumBankError(
                f"PSUM tile {_label(st)} needs {per_block} B per partition, over one "
                f"{self.target.psum_tile_max_bytes} B PSUM bank ({self.target.psum_tile_max_bytes // 4} fp32 "
                f"elements); split the free dimension into tiles of at most "
                f"{self.target.psum_tile_max_bytes // st.dtype.itemsize} elements")
        bank_bytes = self.target.psum_bank_bytes
        banks_per_block = max(1, -(-per_block // bank_bytes))
        chosen: list[tuple[int, int]] = []
        used = list(self.bank_used)
        for _ in range(st.blocks):
            placed = False
            if banks_per_block == 1:
                for b in range(len(used)):
                    if used[b] + per_block <= bank_bytes:
                        used[b] += per_block
                        chosen.append((b, per_block))
                        placed = True
                        break
            else:  # a multi-bank tile (trn3) needs whole free banks in a row
                for b in range(len(used) - banks_per_block + 1):
                    if all(used[b + k] == 0 for k in range(banks_per_block)):
                        for k in range(banks_per_block):
                            used[b + k] = bank_bytes
                            chosen.append((b + k, bank_bytes))
                        placed = True
                        break
            if not placed:
                live = sum(1 for u in self.bank_used if u)
                msg = (f"PSUM capacity exceeded: {_label(st)} needs {st.blocks} block(s) of {per_block} B but "
                       f"{live} of {len(used)} PSUM banks (2 KiB per partition each) are in use")
                if self.mode == "error":
                    raise CapacityError(msg + "; release PSUM tiles (copy results to SBUF) before allocating more")
                if self.mode == "warn":
                    self._warn(msg)
                return
        self.bank_used = used
        st.banks = tuple(chosen)
        self.psum_peak = max(self.psum_peak, sum(self.bank_used))
        st._alloc = self

    # Matmul results -------------------------------------------------------------------------
    def matmul_result(self, st: Storage) -> None:
        """A return-style matmul result: count its bank in the peak unless it is fused later."""
        self.settle_matmul()
        self._undecided_mm = (st.id, sum(self.bank_used) + st.nbytes_pp // max(st.blocks, 1))

    def matmul_fused(self, st: Storage) -> None:
        """`psum += result`: the matmul wrote the accumulator directly and needed no bank."""
        if self._undecided_mm is not None and self._undecided_mm[0] == st.id:
            self._undecided_mm = None

    def settle_matmul(self) -> None:
        if self._undecided_mm is not None:
            self.psum_peak = max(self.psum_peak, self._undecided_mm[1])
            self._undecided_mm = None

    def release(self, st: Storage) -> None:
        if st.memory == "sbuf":
            self.sbuf_live -= st.nbytes_pp
        elif st.memory == "psum":
            for bank, size in st.banks:
                self.bank_used[bank] -= size

    def _warn(self, msg: str) -> None:
        self.diagnostics.append({"rule": "capacity", "message": msg})
        if not self._warned:
            self._warned = True
            warnings.warn(msg, NKIEmulatorWarning, stacklevel=4)


def reclaim_rebound(memory: str) -> bool:
    """`x = nl.ndarray(...)` in a loop allocates the new tile while `x` still holds the old one; the
    compiler knows the old one is dead. When a memory is full, release the old tile early if the
    assignment's variable is the only thing that still refers to it. Only runs on overflow."""
    frame = kernel_frame()
    name = assigned_name(frame) if frame is not None else None
    old = frame.f_locals.get(name) if name else None
    st = getattr(old, "st", None)
    if not isinstance(st, Storage) or st.memory != memory or st._alloc is None:
        return False
    for ref in gc.get_referrers(st):
        if ref is not old and not isinstance(ref, (dict, types.FrameType)):
            return False  # another view or a container still uses the tile
    for ref in gc.get_referrers(old):
        if not isinstance(ref, (dict, types.FrameType)):
            return False
    st._alloc.release(st)
    st._alloc = None
    return True


def _label(st: Storage) -> str:
    return f"'{st.name}' {st.shape} {st.dtype.name}" if st.name else f"tile {st.shape} {st.dtype.name}"


def check_partitions(shape: tuple[int, ...], pax: int, what: str) -> None:
    if not shape:
        raise PartitionDimError(f"{what} must have at least 2 dimensions (partition, free); got a scalar shape")
    p = shape[pax]
    if p > PMAX:
        raise PartitionDimError(f"partition dimension {p} exceeds {PMAX} in {what} of shape {tuple(shape)}")


def new_array(shape, dtype: dt.DType, precise: bool, fill: bool) -> np.ndarray:
    data = np.empty(shape, dtype=dt.storage_dtype(dtype, precise))
    if fill:
        _fill(data, dtype)
    return data

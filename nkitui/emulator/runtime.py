"""The state of one kernel launch: options, allocators, SPMD ids, loops, trace recording.

Engine functions find the current run through `current()`. A launch (`launch.run_kernel`) creates
a `Run`, makes it current for the duration of the kernel body and drops it afterwards. The current
run and the open traces are context variables (`state.py`): each thread and asyncio task has its own.
"""

from __future__ import annotations

import itertools
import math
import os
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsInt, cast

import numpy as np

from nkitui.emulator import devmem as _devmem
from nkitui.emulator import dtypes as dt
from nkitui.emulator import replaylog as _replaylog
from nkitui.emulator import state
from nkitui.emulator.config import Options
from nkitui.emulator.errors import NKIEmulatorError, NKIEmulatorWarning, kernel_frame
from nkitui.emulator import memory as _memory
from nkitui.emulator.memory import (
    ON_CHIP,
    SP_FIRST,
    SP_LAST,
    SP_MEMORY,
    SP_READ_END,
    SP_SIZE,
    SP_START,
    SP_WRITE,
    BlockSpans,
    OnChipAllocator,
    Storage,
    check_partitions,
    check_host_memory,
    new_array,
)
from nkitui.emulator.targets import Target, resolve_target
from nkitui.emulator.tensor import Tensor
from nkitui.emulator.trace import Access, Instruction, StorageInfo, Trace

_current_run = state.current_run
_open_traces = state.open_traces


class OutsideKernelError(NKIEmulatorError):
    """err_nki_api_outside_of_nki_kernel: an NKI device API was called outside a running kernel."""

    rule = "outside-kernel"


# the context variable's bound `get`, looked up once: `_current_run.get()` looks the method up on every
# call (twice per instruction, not specialised by the interpreter)
_get_current_run = _current_run.get


def current() -> "Run":
    run = _get_current_run()
    if run is None:
        raise OutsideKernelError("NKI device API called outside of a running kernel: call it inside an "
                                 "@nki.jit kernel (after nkitui.emulator.install())")
    return run


def current_or_none() -> "Run | None":
    return _get_current_run()


def set_current(run: "Run | None") -> "Run | None":
    """Make `run` the current launch of this context (thread / asyncio task); returns the previous one."""
    prev = _current_run.get()
    _current_run.set(run)
    return prev


# ---------------------------------------------------------------------------------------------
# Trace collection (emulator.trace()), per context like the current run


def active_trace() -> Trace | None:
    traces = _open_traces.get()
    return traces[-1] if traces else None


def push_trace(tr: Trace) -> None:
    _open_traces.set(_open_traces.get() + (tr,))


def pop_trace(tr: Trace) -> None:
    traces = _open_traces.get()
    for i in range(len(traces) - 1, -1, -1):
        if traces[i] is tr:
            _open_traces.set(traces[:i] + traces[i + 1:])
            return


# ---------------------------------------------------------------------------------------------


# the elements a view writes: per storage dimension an arithmetic progression (start, step, length)
Region = tuple[tuple[int, int, int], ...]


@dataclass(slots=True)
class LoopFrame:
    kind: str  # "affine" | "sequential" | "static"
    index: int = 0
    count: int = 0  # iterations begun before this one (0: the first, the one a tracer sees)
    writes: dict[int, list[tuple[int, Region]]] = field(default_factory=dict)  # storage id -> (iteration, region)s
    exact: dict[tuple[int, Region], int] = field(default_factory=dict)  # (storage id, region) -> iteration


_basenames: dict[str, str] = {}

# instructions without engine state between them (no accumulator registers, no random state): the
# compiler may move one that reads PSUM up to its data dependences (Run._schedule_psum_read)
_REORDERABLE_READS = frozenset({
    "tensor_copy", "tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "tensor_reduce", "activation",
    "bn_stats", "bn_aggr", "tensor_tensor_scan", "select", "tensor_copy_predicated", "nc_transpose",
    "nc_stream_shuffle",
})


class Run:
    """One kernel launch (all SPMD programs of it)."""

    def __init__(self, options: Options, kernel_name: str, grid: tuple[int, ...],
                 trace: Trace | None) -> None:
        if _devmem._on:  # the kernel's process: storages' cells must be the device's memory (checked reads)
            _memory.guard_cells()
        self.options = options
        self.target: Target = resolve_target(options.target)
        self.execute = options.execute
        self.precise = options.precise
        self.kernel_name = kernel_name
        self.grid = grid
        self.program: tuple[int, ...] = tuple(0 for _ in grid)
        self.core = 0  # physical core (LNC) index of this run's instructions
        self.trace = trace
        self.recording = trace is not None
        self._files: dict[str, str] = trace.meta.setdefault("files", {}) if trace is not None else {}
        # the kernel frame of the last recorded instruction and its file: reading f_code is an audit
        # event (the introspection guard runs for each), and a frame's code never changes; the frame is
        # held, so no other frame can take its identity while it is remembered
        self._last_frame: object = None
        self._last_path = ""
        self.diagnostics: list[dict[str, Any]] = []
        self.alloc = OnChipAllocator(self.target, options.capacity, self.diagnostics, _position_of(self))
        self.hbm_bytes = 0
        self.shared: list[Storage] = []
        self.shared_idx = 0
        self.loops: list[LoopFrame] = []
        self.affine_depth = 0
        # direct (mod_alloc) placements by kernel line, as first seen; whether a loop body the tracer
        # runs once placed a buffer at a moving address (then the kernel's Python addresses drifted)
        self.placements: dict[tuple[str, int], int] = {}
        self.placement_drift = False
        self.check_affine = options.check_affine
        self.rng = np.random.default_rng(options.seed)
        self.instructions = 0
        self.engine_counts: dict[str, int] = {}
        self._warned_at: set[Hashable] = set()  # (file, line) of C15 warnings, warn_once keys
        self.written_inputs: set[int] = set()
        self.received: list[Any] | None = None  # the launch's array arguments as passed (provenance, while collecting)
        self.accumulating = False  # inside `+=` / loop_reduce: writes are associative accumulations
        self.act_acc: np.ndarray | None = None  # ScalarE per-partition accumulator registers
        self.vec_acc: np.ndarray | None = None  # VectorE shared accumulator registers
        self.input_ids: set[int] = set()

    # -- allocation ----------------------------------------------------------------------------
    def allocate(self, shape: Iterable[SupportsInt], dtype: object, memory: str, *, name: str = "",
                 pax: int = 0, fill: bool = True, kind: str = "private", what: str = "tensor",
                 track: bool = True) -> Storage:
        """Allocate a storage. `fill`: pre-fill with NaN / 4 sentinels (skip when fully overwritten)."""
        dims = tuple(int(s) for s in shape)
        d = dtype if type(dtype) is dt.DType else dt.dtype_of(dtype)
        if memory in ON_CHIP:
            check_partitions(dims, pax, what)
        if memory == "hbm" and kind == "shared":
            if self.shared_idx < len(self.shared):
                st = self.shared[self.shared_idx]  # the same shared tensor in every SPMD program
                self.shared_idx += 1
                if st.shape == dims and st.dtype is d:
                    return st
            else:
                self.shared_idx += 1
        if self.execute:  # the host holds every device tensor: big ones are checked against it first
            nbytes = math.prod(dims) * dt.storage_dtype(d, self.precise).itemsize
            if nbytes >= _memory.HOST_CHECK_BYTES:
                check_host_memory(nbytes, f"{memory.upper()} tensor {repr(name) + ' ' if name else ''}{dims} {d.name}",
                                  self.hbm_bytes)
        st = self.new_storage(dims, d, memory, name, pax, fill, kind, track)
        if memory == "hbm":
            self.hbm_bytes += st.bytes_per_partition
            if kind == "shared" and self.shared_idx > len(self.shared):
                self.shared.append(st)
        return st

    def new_storage(self, shape: tuple[int, ...], d: dt.DType, memory: str, name: str = "", pax: int = 0,
                    fill: bool = False, kind: str = "", track: bool = True) -> Storage:
        """The allocation fast path for trusted arguments (a tuple of ints, a DType, a valid shape)."""
        data = new_array(shape, d, self.precise, fill) if self.execute else None
        st = Storage(name, memory, shape, d, data, pax, kind, len(self.loops))
        if _replaylog._rec is not None:  # how the replay makes the same fresh storage
            _replaylog._rec.note_storage(st, fill)
        if d is dt.tfloat32:
            st.lossy = self.precise
        if track:
            if memory == "sbuf":
                self.alloc.reserve_sbuf(st, self.instructions)
            elif memory == "psum":
                self.alloc.reserve_psum(st, self.instructions)
        if self.trace is not None:  # recording
            self.trace.storages[st.id] = StorageInfo(st.id, name, memory, shape, d.name)
        return st

    def tile(self, shape: Iterable[SupportsInt], dtype: object, memory: str = "sbuf", *, fill: bool = False,
             name: str = "", cls: type[Tensor] = Tensor, track: bool = True) -> Tensor:
        """A fresh result tile (partition dim first) for a return-style instruction."""
        return cls.whole(self.allocate(shape, dtype, memory, name=name, fill=fill, what="result tile",
                                       track=track))

    def wrap_array(self, arr: np.ndarray, name: str, cls: type[Tensor] = Tensor,
                   dtype: dt.DType | None = None) -> Tensor:
        """An HBM tensor backed by a caller's numpy array (writes go straight to it)."""
        d = dtype or dt.dtype_of(arr.dtype)
        st = Storage(name, "hbm", tuple(arr.shape), d, arr if self.execute else None, kind="input")
        self.input_ids.add(st.id)
        self.hbm_bytes += st.bytes_per_partition
        if self.trace is not None:  # recording
            self.trace.storages[st.id] = StorageInfo(st.id, name, "hbm", st.shape, d.name)
        return cls.whole(st)

    # -- loops and C15 -------------------------------------------------------------------------
    def loop(self, kind: str, rng: range) -> Iterator[int]:
        frame = LoopFrame(kind)
        self.loops.append(frame)
        affine = kind == "affine"
        if affine:
            self.affine_depth += 1
        try:
            for n, i in enumerate(rng):
                frame.index = i
                frame.count = n
                yield i
        finally:
            if affine:
                self.affine_depth -= 1
            if self.loops and self.loops[-1] is frame:
                self.loops.pop()
            elif frame in self.loops:
                self.loops.remove(frame)

    def note_write(self, t: Tensor, accumulate: bool = False) -> None:
        """Record a write for the affine_range loop-carried-dependency check (C15)."""
        st = t.storage
        if st.id in self.input_ids:
            self.written_inputs.add(st.id)
        if (not self.affine_depth or st.loop_depth >= len(self.loops) or not self.check_affine or accumulate
                or self.accumulating or t.gather_indices is not None):
            return
        region = tuple((e[0], e[1], e[2]) for e in t.dims)
        for k in range(st.loop_depth, len(self.loops)):
            fr = self.loops[k]
            if fr.kind != "affine":
                continue
            key = (st.id, region)
            prev = fr.exact.get(key)
            if prev is not None and prev != fr.index:
                self._c15(t, prev, fr.index)
                return
            if prev is None and len(fr.exact) < 4096:
                fr.exact[key] = fr.index
            recent = fr.writes.setdefault(st.id, [])
            for it, reg in recent:
                if it != fr.index and _regions_overlap(reg, region):
                    self._c15(t, it, fr.index)
                    return
            recent.append((fr.index, region))
            if len(recent) > 4:
                del recent[0]

    def _c15(self, t: Tensor, first: int, second: int) -> None:
        frame = kernel_frame()
        loc = (frame.f_code.co_filename, frame.f_lineno) if frame else ("", 0)
        if loc in self._warned_at:
            return
        self._warned_at.add(loc)
        name = t.storage.name or f"{t.storage.memory} tensor {t.storage.shape}"
        where = f"{os.path.basename(loc[0])}:{loc[1]}" if loc[0] else "?"
        msg = (f"C15 err_unexpected_output_dependencies: iterations {first} and {second} of an affine_range "
               f"loop write the same elements of '{name}' at {where}; use sequential_range for a "
               f"loop-carried dependency (the emulator ran the iterations in order)")
        self.diagnostics.append({"rule": "C15", "message": msg, "file": where.rsplit(":", 1)[0],
                                 "line": loc[1]})
        if loc[0]:
            warnings.warn_explicit(msg, NKIEmulatorWarning, loc[0], loc[1])  # at the kernel's line
        else:
            warnings.warn(msg, NKIEmulatorWarning, stacklevel=3)

    # -- trace ---------------------------------------------------------------------------------
    def record(self, engine: str, opcode: str, ins: Sequence[Tensor], outs: Sequence[Tensor], *,
               partitions: int, free: int, flops: int = 0,
               meta: dict[str, Any] | None = None) -> Instruction | None:
        """Count the instruction and, inside emulator.trace(), append it to the trace."""
        n = self.instructions
        reads_psum = False
        alloc = self.alloc
        # what Python holds bounds what is live: only over the usable size can this instruction's tiles
        # overflow, and only then does a first use keep its line (alloc.first_use) or the operands get
        # summed (alloc.working_set); nothing allocates during record, so this holds throughout
        over = alloc.sbuf_live > alloc.sbuf_loc_above
        sp: Any  # a span list, or a memory.BlockSpans: its lack of item assignment routes it to touch()
        for t in ins:  # extend the live ranges of the on-chip tiles it touches (memory.SP_LAST)
            sp = t.storage.span
            if sp is not None:
                try:
                    sp[1] = n
                except TypeError:  # memory.BlockSpans (no item assignment): the blocks this view touches
                    sp.touch(t, n)
                    continue
                if sp[9] < 0:  # SP_FIRST: an SBUF tile's live range starts here
                    sp[9] = n
                    if over and sp[4] == "sbuf":
                        alloc.first_use(sp)
                if sp[4] == "psum":
                    reads_psum = True
        if reads_psum:
            self._schedule_psum_read(opcode, ins, outs, n, meta)
        for t in outs:
            sp = t.storage.span
            if sp is not None:
                try:
                    sp[1] = n
                except TypeError:
                    sp.touch(t, n)
                    continue
                sp[10] = n  # SP_WRITE
                if sp[9] < 0:
                    sp[9] = n
                    if over and sp[4] == "sbuf":
                        alloc.first_use(sp)
        if over:  # rare: only then can one instruction's operands overflow
            alloc.working_set(ins, outs)
        self.instructions = n + 1
        try:
            self.engine_counts[engine] += 1
        except KeyError:
            self.engine_counts[engine] = 1
        if self.trace is None:  # not recording
            return None
        frame = kernel_frame(2)  # this method and its caller (an engine function) are the emulator's
        if frame is not None:
            if frame is self._last_frame:
                path = self._last_path
            else:
                path = self._last_path = frame.f_code.co_filename
                self._last_frame = frame
            line = frame.f_lineno
            base = _basenames.get(path)
            if base is None:
                base = _basenames[path] = os.path.basename(path)
            files = self._files
            if base not in files:
                files[base] = path
        else:
            base, line = "", 0
        br = bw = hr = hw = 0
        # tuples grown in place, not lists made into tuples: an instruction has one to three operands
        in_dtypes: tuple[str, ...] = ()
        in_mems: tuple[str, ...] = ()
        reads: tuple[Access, ...] = ()
        for t in ins:
            st = t.storage
            n = math.prod(t.shape) * st.dtype.itemsize  # (t.size without the property's call)
            br += n
            mem = st.memory
            if mem == "hbm":
                hr += n
            in_dtypes += (st.dtype.name,)
            in_mems += (mem,)
            reads += (t.access(),)
        writes: tuple[Access, ...] = ()
        for t in outs:
            n = math.prod(t.shape) * t.storage.dtype.itemsize
            bw += n
            if t.storage.memory == "hbm":
                hw += n
            writes += (t.access(),)
        if outs:
            out_dtype, out_mem = outs[0].storage.dtype.name, outs[0].storage.memory
        else:
            out_dtype, out_mem = "", "none"
        if meta is None:
            meta = {}
        if engine == "dma":
            meta["contiguous_bytes"] = _dma_run_bytes(ins, outs)
        elif engine != "tensor":
            for t in ins:
                if t.storage.partition_dim >= 0 and not t.inner_contiguous():
                    meta["contiguous"] = False
                    break
        instrs = self.trace.instructions
        ins_ = Instruction(len(instrs), engine, opcode, partitions, free, in_dtypes, out_dtype,
                           in_mems, out_mem, br, bw, hr, hw, flops, reads, writes, base, line,
                           self.core, self.program, meta)
        instrs.append(ins_)
        return ins_

    def _schedule_psum_read(self, opcode: str, ins: Sequence[Tensor], outs: Sequence[Tensor], n: int,
                            meta: dict[str, Any] | None) -> None:
        """Where instruction `n`, which reads PSUM, can run under the compiler's reordering ("the
        compiler may reorder operations that have no data dependencies", NKI language guide): right
        after the last write of each input (read after write), the last use of each output (write
        after read / write) and the allocation of every SBUF operand; an SBUF operand it uses first is
        then live from that point (its first use). It stays at `n` if it writes PSUM or HBM, touches a
        block-dimension tensor, or carries engine state between instructions (reduce_cmd accumulators). The PSUM tiles it reads
        are then live up to that point only (memory._psum_range): a tile accumulated in a loop and
        copied out after it frees its bank once its last matmul is done, as the compiler schedules
        it, while a read that needs a value computed from other live tiles still keeps them all."""
        ready = -1
        if opcode not in _REORDERABLE_READS or (meta is not None and meta.get("reduce_cmd")):
            ready = n
        else:
            for t in ins:
                sp = t.storage.span
                if sp.__class__ is not list:
                    ready = n
                    break
                ready = max(ready, sp[SP_START], sp[SP_WRITE])
            if ready < n:
                for t in outs:
                    sp = t.storage.span
                    if sp.__class__ is not list or sp[SP_MEMORY] != "sbuf":
                        ready = n
                        break
                    ready = max(ready, sp[SP_START], sp[SP_LAST])
        for t in ins:
            sp = t.storage.span
            if sp.__class__ is list and sp[SP_MEMORY] == "psum" and sp[SP_READ_END] < ready:
                sp[SP_READ_END] = ready
        if ready < n:  # every operand has a list span here; an SBUF one first used here is live from `ready`
            for t in itertools.chain(ins, outs):
                sp = cast(list[Any], t.storage.span)  # checked list-shaped above (ready < n)
                if sp[SP_MEMORY] == "sbuf" and (sp[SP_FIRST] < 0 or sp[SP_FIRST] == n):
                    sp[SP_FIRST] = ready
                    self.alloc.first_use(sp)

    def retargeted(self, temp: Storage, dst: Storage, view: Tensor | None = None) -> None:
        """The last instruction's result was redirected from the fresh tile `temp` to `dst`
        (`t[...] = expr`, `view` the part of `dst` written): `dst` is used there, and `temp` needs
        no memory of its own."""
        n = self.instructions - 1
        sp = temp.span
        if sp.__class__ is list and sp[SP_START] == n and sp[SP_LAST] <= n:
            sp[SP_SIZE] = 0
        sp = dst.span
        if sp is None:
            return
        if isinstance(sp, BlockSpans):
            sp.touch(view if view is not None else Tensor.whole(dst), n)
            return
        if sp[SP_LAST] < n:
            sp[SP_LAST] = n
        sp[SP_WRITE] = n
        if sp[SP_FIRST] < 0:
            sp[SP_FIRST] = n
            if sp[SP_MEMORY] == "sbuf":
                self.alloc.first_use(sp)

    def warn_once(self, key: Hashable, msg: str) -> None:
        if key in self._warned_at:
            return
        self._warned_at.add(key)
        self.diagnostics.append({"rule": "note", "message": msg})
        warnings.warn(msg, NKIEmulatorWarning, stacklevel=3)


def _position_of(run: Run) -> Callable[[], int]:
    """run.instructions as a function, without a reference cycle between the run and its allocator."""
    ref = weakref.ref(run)

    def position() -> int:
        r = ref()
        return r.instructions if r is not None else 0

    return position


def _dma_run_bytes(ins: Sequence[Tensor], outs: Sequence[Tensor]) -> int:
    """Contiguous bytes per DMA descriptor: the shortest contiguous run on the HBM side (or of the
    source when both sides are on-chip), which drives DMA efficiency in the cost model."""
    # (_run_elems of a range view is contiguous_elems: called directly, a call fewer per DMA operand)
    runs = [(t.contiguous_elems() if t.gather_indices is None else _run_elems(t)) * t.storage.dtype.itemsize
            for t in (*ins, *outs) if t.storage.partition_dim < 0]
    if not runs:
        runs = [(t.contiguous_elems() if t.gather_indices is None else _run_elems(t)) * t.storage.dtype.itemsize
                for t in ins[:1] or outs[:1]]
    return min(runs) if runs else 0


def _run_elems(t: Tensor) -> int:
    """Elements per contiguous run of a view. For a gathered (indexed) view: the last axis's length when
    its last-dimension indices step by one and the other indices stay put along it (a gather of whole
    rows moves row-sized runs), else 1 (an element gather)."""
    if t.gather_indices is None:
        return t.contiguous_elems()
    shape = t.shape
    if not shape or shape[-1] <= 1:
        return 1
    *lead, last = t.gather_indices
    steps = np.diff(np.broadcast_to(last, shape), axis=-1)
    if steps.size == 0 or not (steps == 1).all():
        return 1
    for a in lead:
        a = np.asarray(a)
        if a.ndim and a.shape[-1] > 1 and (np.diff(a, axis=-1) != 0).any():
            return 1
    return shape[-1]


def _regions_overlap(a: Region, b: Region) -> bool:
    """Do two per-dimension arithmetic progressions (start, step, length) share an element?"""
    for (s1, st1, n1), (s2, st2, n2) in zip(a, b):
        if n1 <= 0 or n2 <= 0:
            return False
        lo1, hi1 = (s1, s1 + st1 * (n1 - 1)) if st1 >= 0 else (s1 + st1 * (n1 - 1), s1)
        lo2, hi2 = (s2, s2 + st2 * (n2 - 1)) if st2 >= 0 else (s2 + st2 * (n2 - 1), s2)
        if hi1 < lo2 or hi2 < lo1:
            return False
        if st1 == st2 and st1 not in (0, 1, -1) and n1 > 1 and n2 > 1 and (s1 - s2) % st1:
            return False
    return True

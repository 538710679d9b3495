"""Logical cores: the per-core Run of an `nki` launch and the group that `kernel[2]` shares.

`kernel[lnc]` runs `lnc` physical NeuronCores concurrently, like AWS's simulator: one thread per
core, each with its own `CoreRun` (SBUF, PSUM, accumulator registers, instruction counts) made
current in a thread-local, and one `CoreGroup` they share: shared HBM (`nl.shared_hbm` tensors are
the same allocation on both cores: matched by name when named, else by allocation order), the
`sendrecv` mailboxes and the `core_barrier`. Waits never hang: when a core fails, the group is
aborted and the other core's wait raises; when a core finishes without arriving at a barrier or
sending on a pipe its partner waits on, the partner gets an error that says so.

One core runs at a time and the cores hand the turn over at instruction boundaries as if they ran
in lockstep, one instruction each in round robin: the two physical cores of a logical core start
together and run at the same pace, so what both issue early (e.g. zero-filling a shared output)
lands before what they issue later (their stores), and a kernel's result never depends on how the
host schedules the threads. Only instructions the other core can observe need that order: those
with an operand in HBM (shared HBM, the kernel's arguments) and the cross-core ones (sendrecv,
core_barrier). So a core keeps the turn through its private instructions (SBUF, PSUM, registers)
and, before an observable one with index n (its n-th instruction), hands the turn to any core
waiting with a smaller (index, core) key, which is the order lockstep gives them. So there are as
many fewer thread switches as there are private instructions between observable ones (nki-library's
64-expert MoE case: 6092 hand-overs on core 0 instead of 68669). A core waiting in sendrecv or
core_barrier is skipped until what it waits for has happened.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, SupportsInt, TypeAlias

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import devmem
from nkitui.emulator import dtypes as _dt
from nkitui.emulator import ranks
from nkitui.emulator.errors import CollectiveError, NKIEmulatorError  # noqa: F401  (CollectiveError: re-exported)
from nkitui.emulator.config import Options
from nkitui.emulator.memory import Storage
from nkitui.emulator.newns.tensor import PlacedStorage, SpaceCell
from nkitui.emulator.runtime import Run
from nkitui.emulator.tensor import Tensor
from nkitui.emulator.trace import StorageInfo, Trace

_POLL_S = 0.05
# instructions that act on the other core without an HBM operand (their record's opcode)
_CROSS_CORE = frozenset({"sendrecv", "core_barrier", "barrier"})

# what sendrecv sends: the tile's shape, its dtype's name and its values (None in shape-only mode)
Payload: TypeAlias = tuple[tuple[int, ...], str, NDArray[Any] | None]


class GroupAborted(NKIEmulatorError):
    """Raised in a core whose partner core failed (the partner's error is the one reported)."""

    rule = "collective"


class CoreGroup:
    """State shared by the cores of one launch."""

    def __init__(self, n_cores: int) -> None:
        self.n = n_cores
        self.cond = threading.Condition()
        self.failed: BaseException | None = None
        self.finished: set[int] = set()
        self.shared_named: dict[str, Storage] = {}
        self.shared_ordered: list[Storage] = []
        self.mail: dict[tuple[int, int, int], deque[Payload]] = {}  # (pipe, sender, receiver) -> messages
        self.barrier_count: dict[tuple[tuple[int, ...], int], int] = {}  # (cores, generation) -> arrived
        self.barrier_seen: dict[int, int] = {}
        self.turn: int | None = 0  # the one core that runs (core 0 goes first)
        # each core's position: the index of the instruction it stopped at (in step or a wait); a core
        # that has not issued one yet is at 0. Read only by the core holding the turn.
        self.pos: list[int] = [0] * n_cores
        self.waiting: dict[int, Callable[[], bool]] = {}  # core -> ready() of the sendrecv / barrier it waits in
        self.handoffs = 0  # turns handed from one core to another, for profiling

    # -- turns (lockstep order of observable instructions) ----------------------------------
    def step(self, core: int, index: int, observable: bool) -> None:
        """Called before instruction `index` of `core`. A private instruction of the core holding
        the turn runs at once (no lock: only the holder changes the turn away from itself); an
        observable one first lets every core whose (index, core) comes before it run up to there."""
        if self.n < 2 or (not observable and self.turn == core):
            return
        with self.cond:
            self.pos[core] = index
            if self.turn == core:
                self._pass_turn(core)
            self._take_turn(core)

    def _eligible(self, c: int) -> bool:
        if c in self.finished:
            return False
        ready = self.waiting.get(c)
        return ready is None or ready()

    def _pass_turn(self, core: int) -> None:
        """Give the turn to the eligible core with the smallest (position, core), this one included
        if it is still eligible (then it keeps the turn); None when no core can run."""
        best = None
        for c in range(self.n):
            if self._eligible(c) and (best is None or (self.pos[c], c) < (self.pos[best], best)):
                best = c
        if best != core:
            if best is not None:
                self.handoffs += 1
            self.turn = best
            self.cond.notify_all()

    def _take_turn(self, core: int) -> None:
        while self.turn not in (core, None):
            if self.failed is not None:
                raise GroupAborted(f"core {core}: the other core failed ({type(self.failed).__name__})")
            self.cond.wait(_POLL_S)
        self.turn = core

    # -- shared HBM --------------------------------------------------------------------------
    def shared_storage(self, run: "CoreRun", shape: tuple[int, ...], d: _dt.DType, name: str,
                       make: Callable[[], Storage]) -> Storage:
        with self.cond:
            if name:
                st = self.shared_named.get(name)
                if st is None or st.shape != shape or st.dtype is not d:
                    st = self.shared_named[name] = make()
                return st
            i = run.shared_seq
            run.shared_seq += 1
            if i < len(self.shared_ordered):
                st = self.shared_ordered[i]
                if st.shape == shape and st.dtype is d:
                    return st
                raise CollectiveError(f"the cores allocate different unnamed shared_hbm tensors ({st.shape} "
                                      f"{st.dtype.name} on one core, {shape} {d.name} on core {run.core}); give "
                                      "shared_hbm tensors a name= so the cores agree which tensor is which")
            st = make()
            self.shared_ordered.append(st)
            return st

    # -- failure / completion ----------------------------------------------------------------
    def abort(self, exc: BaseException) -> None:
        with self.cond:
            if self.failed is None:
                self.failed = exc
            self.cond.notify_all()

    def finish(self, core: int) -> None:
        with self.cond:
            self.finished.add(core)
            self.pos[core] = 1 << 62
            if self.turn == core:
                self._pass_turn(core)
            self.cond.notify_all()

    def _wait(self, core: int, ready: Callable[[], bool], partner_gone: Callable[[], int | None], what: str) -> None:
        """Wait (with the condition held) until ready(), giving the turn away meanwhile; raise if the
        group failed or the partner finished without doing its part. Then wait for the turn."""
        self.waiting[core] = ready
        try:
            if self.turn == core:
                self._pass_turn(core)  # its position is that of the instruction waiting (set by step)
            while not ready():
                if self.failed is not None:
                    raise GroupAborted(f"{what}: the other core failed ({type(self.failed).__name__})")
                gone = partner_gone()
                if gone is not None:
                    raise CollectiveError(f"{what}: core {gone} finished the kernel without its matching call")
                self.cond.wait(_POLL_S)
        finally:
            del self.waiting[core]
        if self.n > 1:
            self._take_turn(core)

    # -- sendrecv ----------------------------------------------------------------------------
    def exchange(self, core: int, send_to: int, recv_from: int, pipe: int, payload: Payload, what: str) -> Payload:
        """Post `payload` for `send_to` and take the oldest message from `recv_from` on `pipe`."""
        with self.cond:
            self.mail.setdefault((pipe, core, send_to), deque()).append(payload)
            self.cond.notify_all()
            box = self.mail.setdefault((pipe, recv_from, core), deque())
            self._wait(core, lambda: bool(box), lambda: recv_from if recv_from in self.finished else None,
                       f"{what} (core {core} receiving from core {recv_from} on pipe {pipe})")
            return box.popleft()

    # -- core_barrier ------------------------------------------------------------------------
    def barrier(self, core: int, cores: tuple[int, ...], what: str) -> None:
        with self.cond:
            gen = self.barrier_seen.get(core, 0)
            self.barrier_seen[core] = gen + 1
            key = (cores, gen)
            self.barrier_count[key] = self.barrier_count.get(key, 0) + 1
            self.cond.notify_all()

            def missing() -> int | None:
                for c in cores:
                    if c != core and c in self.finished and self.barrier_seen.get(c, 0) <= gen:
                        return c
                return None

            self._wait(core, lambda: self.barrier_count.get(key, 0) >= len(cores), missing,
                       f"{what} (barrier {gen} of core {core})")


class CoreRun(Run):
    """The Run of one physical core of an `nki` launch."""

    def __init__(self, options: Options, kernel_name: str, grid: tuple[int, ...], trace: Trace | None, *, core: int = 0,
                 group: CoreGroup | None = None) -> None:
        super().__init__(options, kernel_name, grid, trace)
        self.core = core
        ctx = ranks.current_context()  # inside nki.multi_rank_simulate: this core's rank and world
        self.world = ctx.world if ctx is not None else None
        self.rank = ctx.rank if ctx is not None else 0
        self.group = group if group is not None else CoreGroup(grid[0] if grid else 1)
        self.shared_seq = 0
        self.program = (core,) if grid else ()
        self._spaces: dict[str, tuple[np.ndarray, SpaceCell]] = {}
        if self.group.n > 1:  # single-core launches keep the plain (hot) record
            self.record = self._lockstep_record  # type: ignore[method-assign]  # per instance: only multi-core runs pay for the lockstep

    def allocate(self, shape: Iterable[SupportsInt], dtype: object, memory: str, *, name: str = "", pax: int = 0,
                 fill: bool = True, kind: str = "private", what: str = "tensor", track: bool = True) -> Storage:
        if memory == "hbm" and kind == "shared":
            dims = tuple(int(s) for s in shape)
            d = dtype if type(dtype) is _dt.DType else _dt.dtype_of(dtype)

            def make() -> Storage:
                st = super(CoreRun, self).allocate(dims, d, "hbm", name=name, pax=pax, fill=fill, kind="private",
                                                   what=what, track=track)
                st.kind = "shared"
                return st

            return self.group.shared_storage(self, dims, d, name, make)
        return super().allocate(shape, dtype, memory, name=name, pax=pax, fill=fill, kind=kind, what=what,
                                track=track)

    def _lockstep_record(self, engine: str, opcode: str, ins: Sequence[Tensor], outs: Sequence[Tensor],
                         **kwargs: Any) -> Any:  # Run.record's arguments and result, passed through
        observable = opcode in _CROSS_CORE
        if not observable:
            for t in ins:
                if t.storage.memory == "hbm":
                    observable = True
                    break
            else:
                for t in outs:
                    if t.storage.memory == "hbm":
                        observable = True
                        break
        self.group.step(self.core, self.instructions, observable)  # lockstep order (CoreGroup.step)
        return Run.record(self, engine, opcode, ins, outs, **kwargs)

    def place(self, shape: tuple[int, ...], d: _dt.DType, memory: str, partition: int, byte: int, name: str) -> Storage:
        """A tensor at an explicit address in this core's SBUF or PSUM (allocations may overlap)."""
        space = self._spaces.get(memory)
        if space is None:
            width = (self.target.sbuf_bytes_per_partition if memory == "sbuf"
                     else self.target.psum_bytes_per_partition)
            if devmem.enabled():  # the kernel's process: write-protected device memory
                arr = devmem.empty((128, width), np.uint8)
                with devmem.writing(arr):
                    arr.fill(0xFF)  # fresh memory reads as NaN / -1
            else:
                arr = np.full((128, width), 0xFF, dtype=np.uint8)  # fresh memory reads as NaN / -1
            space = self._spaces[memory] = (arr, SpaceCell())
        arr, cell = space
        st = PlacedStorage(name, memory, shape, d, arr, cell, partition, byte)
        st.loop_depth = len(self.loops)
        if self.trace is not None:  # recording
            self.trace.storages[st.id] = StorageInfo(st.id, name, memory, tuple(shape), d.name)
        return st


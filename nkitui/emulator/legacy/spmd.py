"""SPMD programs of a legacy launch that meet in `nl.all_reduce` (the legacy collective).

A legacy launch normally runs its programs one after another. `nl.all_reduce(x, op,
program_axes)` needs the tiles of the other programs along `program_axes`, so a kernel that calls
it runs its programs as threads that take turns: one program runs at a time, in program order, and
a program that reaches an all-reduce before its peers have contributed hands the turn to the next
program that can run. The reduction is computed in fp32 in program order (row-major program ids),
the same result for every member, and rounded once to the output dtype: deterministic whatever the
turn order. All programs share the launch's Run; the per-program parts of it (program id, shared
tensor cursor, open loops) are swapped at every turn.

Whether a kernel needs this is decided from its code: the kernel function, the functions and
kernels it names in its module, and their nested functions, searched for `all_reduce`. A call the
search misses (e.g. through a helper in another module) raises UnsupportedError saying so.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypedDict

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import alu, state
from nkitui.emulator.errors import CollectiveError, UnsupportedError
from nkitui.emulator.runtime import Run, set_current

if TYPE_CHECKING:
    from nkitui.emulator.launch import Kernel

_POLL_S = 0.05
_STATE = ("program", "shared_idx", "loops", "affine_depth", "accumulating")


class _Slot(TypedDict):
    """One all-reduce of a group: each member's fp32 values (None in shape-only runs), and how many give."""

    parts: dict[int, NDArray[np.float32] | None]
    size: int


def mentions(func: Callable[..., object], name: str = "all_reduce", limit: int = 200) -> bool:
    """Does the code of `func`, or of the functions / kernels it names in its globals (recursively),
    refer to `name`?"""
    seen: set[int] = set()
    todo: list[tuple[types.CodeType | None, dict[str, object]]] = [
        (getattr(func, "__code__", None), getattr(func, "__globals__", {}))]
    while todo and len(seen) < limit:
        code, glb = todo.pop()
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        if name in code.co_names:
            return True
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                todo.append((const, glb))
        for n in code.co_names:
            obj = glb.get(n)
            obj = getattr(obj, "func", obj)  # a Kernel wraps its function
            if isinstance(obj, types.FunctionType):
                todo.append((obj.__code__, obj.__globals__))
    return False


class TurnTaking:
    """The programs of one launch as threads; `current_scheduler()` finds it from a program."""

    def __init__(self, run: Run, programs: Iterable[Iterable[int]]) -> None:
        self.run = run
        self.programs = [tuple(p) for p in programs]
        self.index = {p: i for i, p in enumerate(self.programs)}
        self.cond = threading.Condition()
        self.turn: int | None = None
        self.done: set[int] = set()
        self.waiting: dict[int, tuple[object, ...]] = {}  # program index -> all_reduce slot key
        self.slots: dict[tuple[object, ...], _Slot] = {}
        self.calls: dict[tuple[int, tuple[object, ...]], int] = {}
        self.states: list[dict[str, object]] = [self._fresh(p) for p in self.programs]
        self.failed: BaseException | None = None

    @staticmethod
    def _fresh(program: tuple[int, ...]) -> dict[str, object]:
        return {"program": program, "shared_idx": 0, "loops": [], "affine_depth": 0, "accumulating": False}

    # -- turns (call with the condition held) ---------------------------------------------------
    def _load(self, i: int) -> None:
        for k in _STATE:
            setattr(self.run, k, self.states[i][k])

    def _save(self, i: int) -> None:
        for k in _STATE:
            self.states[i][k] = getattr(self.run, k)

    def _runnable(self, i: int) -> bool:
        if i in self.done:
            return False
        key = self.waiting.get(i)
        return key is None or len(self.slots[key]["parts"]) == self.slots[key]["size"]

    def _pass_turn(self, me: int) -> None:
        n = len(self.programs)
        for step in range(1, n + 1):
            j = (me + step) % n
            if self._runnable(j):
                self.turn = j
                self.cond.notify_all()
                return
        self.turn = None
        self.cond.notify_all()
        if len(self.done) < n and self.failed is None:
            stuck = sorted(self.waiting)
            self.failed = CollectiveError(
                "nl.all_reduce: programs " + ", ".join(str(self.programs[i]) for i in stuck) + " wait on an "
                "all-reduce that the other programs of their group never reach (every program along "
                "program_axes must call nl.all_reduce the same number of times)", location=("", 0))

    def _wait_turn(self, me: int) -> None:
        while self.turn != me:
            if self.failed is not None:
                raise _Aborted()
            self.cond.wait(_POLL_S)

    # -- running -------------------------------------------------------------------------------
    def execute(self, kernel: Kernel, args: tuple[object, ...], kwargs: Mapping[str, object]) -> object:
        results: list[object] = [None] * len(self.programs)
        errors: list[BaseException | None] = [None] * len(self.programs)

        def body(i: int) -> None:
            prev = set_current(self.run)
            saved = np.seterr(all="ignore")
            state.spmd_program.set((self, i))  # in this program thread's own copy of the context
            try:
                with self.cond:
                    self._wait_turn(i)
                    self._load(i)
                results[i] = kernel.func(*args, **kwargs)
            except _Aborted:
                pass
            except BaseException as e:  # noqa: BLE001 (re-raised in the launching thread)
                errors[i] = e
                with self.cond:
                    if self.failed is None:
                        self.failed = e
                    self.cond.notify_all()
            finally:
                with self.cond:
                    self.done.add(i)
                    if self.turn == i:
                        self._save(i)
                        self._pass_turn(i)
                np.seterr(**saved)
                set_current(prev)

        threads = [state.start_thread(body, (i,), name=f"nki-program-{i}") for i in range(len(self.programs))]
        with self.cond:
            self.turn = 0
            self.cond.notify_all()
        for t in threads:
            t.join()
        real = [e for e in errors if e is not None]
        if real:
            raise real[0]
        if self.failed is not None:
            raise self.failed
        return results[-1]

    def all_reduce(self, values: NDArray[np.float32] | None, op: alu.BinaryOp, axes: tuple[int, ...],
                   shape: tuple[int, ...], api: str) -> NDArray[np.float32] | None:
        """This program's contribution; returns the group's reduction (fp32) once all have given."""
        here = state.spmd_program.get()
        assert here is not None  # all_reduce runs in a program thread (execute's body sets it)
        me: int = here[1]
        program = self.programs[me]
        others = tuple(c for a, c in enumerate(program) if a not in axes)
        members = [i for i, p in enumerate(self.programs)
                   if tuple(c for a, c in enumerate(p) if a not in axes) == others]
        base = (axes, others, tuple(shape))
        with self.cond:
            k = self.calls.get((me, base), 0)
            self.calls[(me, base)] = k + 1
            key = base + (k,)
            slot = self.slots.setdefault(key, {"parts": {}, "size": len(members)})
            slot["parts"][me] = values
            if len(slot["parts"]) < slot["size"]:
                self.waiting[me] = key
                self._save(me)
                self._pass_turn(me)
                self._wait_turn(me)
                self.waiting.pop(me, None)
                self._load(me)
        parts = [slot["parts"][i] for i in sorted(slot["parts"])]  # program order
        if any(p is None for p in parts):  # shape-only run
            return None
        acc = np.asarray(parts[0], dtype=np.float32)
        for p in parts[1:]:
            acc = np.asarray(op.fn(acc, np.asarray(p, dtype=np.float32)), dtype=np.float32)
        return acc


class _Aborted(BaseException):
    """A program stopped because another failed (that error is the one reported)."""


def current_scheduler() -> TurnTaking | None:
    program = state.spmd_program.get()
    return program[0] if program is not None else None


def require_scheduler(api: str, n_programs: int) -> TurnTaking | None:
    sched = current_scheduler()
    if sched is None and n_programs > 1:
        raise UnsupportedError(f"{api}: this launch ran its programs one after another because the kernel's code did "
                               "not show the call (it is reached through a function of another module); call "
                               "nl.all_reduce from the kernel's own module")
    return sched

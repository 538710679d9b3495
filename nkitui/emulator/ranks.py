"""Several ranks (emulated devices) in one process, for collectives across replica groups.

`run_ranks(world_size, body)` runs `body(rank)` in one thread per rank (as AWS's
`nki.multi_rank_simulate` runs every rank in one CPU process) with a `RankContext` in a
thread-local: the `World` the ranks share and this thread's rank. A front end's Run picks the
context up when it is created (`current_context()`), so the cores of a `kernel[2]` launch inside a
rank belong to that rank.

Collectives meet in `World.rendezvous`: the k-th call of a given kind over a given set of
participants on one rank matches the k-th call of the same kind on every other participant
(participants are (rank, core) pairs: core c of every rank in the replica group takes part, so
the two cores of an LNC=2 rank each run their own collective with their peers). Every participant
deposits what it sends and receives everything the others deposited, so each computes its result
from the same data in the same order: reductions are deterministic (fp32, in replica-group order).

Nothing hangs: a failing rank aborts the world (the other ranks' waits raise `RankAborted`, and the
first real error is re-raised in the launching thread, naming its rank); a rank that finishes the
kernel without a collective its peers wait on, or ranks that all wait on collectives no other rank
is about to call (different kinds, groups or counts), raise `CollectiveError` saying who waits on what.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, TypedDict, TypeVar

from nkitui.emulator import state
from nkitui.emulator.errors import CollectiveError, NKIEmulatorError

__all__ = ["CollectiveError", "RankAborted", "RankContext", "World", "current_context", "run_ranks"]

_POLL_S = 0.05
MAX_CORES = 2  # physical cores of a logical NeuronCore (kernel[2])


T = TypeVar("T")
Participant = tuple[int, int]  # (rank, core)
Members = tuple[Participant, ...]
_SlotKey = tuple[str, Members, int]  # (kind, members, call number)


class _Slot(TypedDict):
    payloads: dict[Participant, Any]  # what each participant deposited (arrays, metadata: the caller's data)
    taken: int  # participants that collected the result


class RankAborted(NKIEmulatorError):
    """Raised in a rank whose peer failed (the peer's error is the one reported)."""

    rule = "collective"


@dataclass(frozen=True)
class RankContext:
    world: "World"
    rank: int


def current_context() -> RankContext | None:
    """The rank this code runs as (None outside `run_ranks`: a world of one rank)."""
    return state.rank_context.get()


class World:
    """State shared by the ranks of one multi-rank launch."""

    def __init__(self, world_size: int) -> None:
        self.size = world_size
        self.cond = threading.Condition()
        self.failed: BaseException | None = None
        self.finished: set[tuple[int, int]] = set()  # participants (rank, core) whose kernel ended
        self.seen: dict[tuple[Participant, str, Members], int] = {}  # (participant, kind, members) -> calls so far
        self.slots: dict[_SlotKey, _Slot] = {}
        self.waiting: dict[Participant, tuple[_SlotKey, str]] = {}

    def abort(self, exc: BaseException) -> None:
        with self.cond:
            if self.failed is None:
                self.failed = exc
            self.cond.notify_all()

    def finish(self, participant: tuple[int, int]) -> None:
        with self.cond:
            self.finished.add(participant)
            self.cond.notify_all()

    def rendezvous(self, me: tuple[int, int], kind: str, members: tuple[tuple[int, int], ...], payload: Any,
                   what: str) -> dict[tuple[int, int], Any]:
        """Deposit `payload` for this participant's next `kind` collective over `members` and
        return every member's payload (participant -> payload) once all have deposited."""
        with self.cond:
            key0 = (kind, members)
            k = self.seen.get((me,) + key0, 0)
            self.seen[(me,) + key0] = k + 1
            key: _SlotKey = key0 + (k,)
            slot = self.slots.setdefault(key, {"payloads": {}, "taken": 0})
            slot["payloads"][me] = payload
            self.cond.notify_all()
            self.waiting[me] = (key, what)
            try:
                while len(slot["payloads"]) < len(members):
                    self._check(me, key, members, k, what)
                    self.cond.wait(_POLL_S)
            finally:
                self.waiting.pop(me, None)
            result = dict(slot["payloads"])
            slot["taken"] += 1
            if slot["taken"] == len(members):
                del self.slots[key]
            return result

    def _check(self, me: Participant, key: _SlotKey, members: Members, k: int, what: str) -> None:
        if self.failed is not None:
            raise RankAborted(f"{what}: another rank failed ({type(self.failed).__name__})", location=("", 0))
        kind, group = key[0], key[1]
        slot = self.slots[key]
        for m in members:
            if m not in slot["payloads"] and m in self.finished and self.seen.get((m, kind, group), 0) <= k:
                raise CollectiveError(f"{what}: rank {m[0]} (core {m[1]}) finished the kernel without calling this "
                                      f"{kind} (call {k + 1} over ranks {sorted({r for r, _ in members})})",
                                      location=("", 0))
        # every participant still running waits on a collective that cannot complete: a mismatch
        alive = [p for p in self._participants() if p not in self.finished]
        if alive and all(p in self.waiting for p in alive):
            if all(len(self.slots[self.waiting[p][0]]["payloads"]) < len(self.waiting[p][0][1]) for p in alive):
                lines = "; ".join(f"rank {p[0]} core {p[1]} waits in {self.waiting[p][1]}" for p in sorted(alive))
                raise CollectiveError(f"{what}: the ranks wait on collectives that do not match ({lines}); every "
                                      "rank of a replica group must issue the same collectives in the same order",
                                      location=("", 0))

    def _participants(self) -> set[Participant]:
        known = {p for p in self.finished} | set(self.waiting)
        for key in self.slots:
            known.update(key[1])
        return known


def run_ranks(world_size: int, body: Callable[[int], T], *, name: str = "rank") -> list[T]:
    """Run `body(rank)` for every rank in its own thread, concurrently; returns the results in rank
    order or re-raises the first real error (with the rank in its message)."""
    world = World(world_size)
    results: list[Any] = [None] * world_size  # each rank's T once it returned (all of them, or this raises)
    errors: list[BaseException | None] = [None] * world_size

    def run(rank: int) -> None:
        state.rank_context.set(RankContext(world, rank))  # in this rank thread's own copy of the context
        try:
            results[rank] = body(rank)
        except BaseException as e:  # noqa: BLE001 (re-raised in the launching thread)
            errors[rank] = e
            world.abort(e)
        finally:
            with world.cond:  # every core of this rank is done
                world.finished.update((rank, c) for c in range(MAX_CORES))
                world.cond.notify_all()

    # each rank runs in a copy of the launching context: it sees the launch's options
    threads = [state.start_thread(run, (r,), name=f"nki-{name}-{r}") for r in range(world_size)]
    for t in threads:
        t.join()
    real = [(r, e) for r, e in enumerate(errors) if e is not None and not isinstance(e, RankAborted)]
    if real or any(e is not None for e in errors):
        rank, err = (real or [(r, e) for r, e in enumerate(errors) if e is not None])[0]
        if hasattr(err, "add_note"):
            err.add_note(f"(in rank {rank} of {world_size})")
        raise err
    return results

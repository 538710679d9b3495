"""The reference pool splits a request for several input sets across its processes in order, so they
compute at once, and gives the answers back in the order asked; a single set (a search step) always goes
to the first process."""

from __future__ import annotations

from nkitui.evaluate.pipeline.reference import ReferencePool


class Process:
    """Stands in for a ReferenceProcess: records what it was sent and answers x -> x * 10 (the pool's
    logic only; the real processes are exercised by every check in tests/security and tests/evaluate)."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.calls = 0
        self.sets: list[list[int]] = []

    def send(self, sets):  # noqa: ANN001, ANN201
        self.log.append(f"send {self.name}")
        self.sets.append([s["x"] for s in sets])
        self.calls += len(sets)
        return sets

    def receive(self, sets):  # noqa: ANN001, ANN201
        self.log.append(f"receive {self.name}")
        return [{"y": s["x"] * 10} for s in sets]

    def many(self, sets):  # noqa: ANN001, ANN201
        return self.receive(self.send(sets))

    def __call__(self, inputs):  # noqa: ANN001, ANN204
        return self.many([inputs])[0]


def _pool(n: int) -> tuple[ReferencePool, list[Process], list[str]]:
    log: list[str] = []
    processes = [Process(str(i), log) for i in range(n)]
    return ReferencePool(processes), processes, log  # type: ignore[arg-type]  # stand-ins, see Process


def test_several_sets_are_split_in_order_and_asked_before_any_answer_is_read() -> None:
    pool, (a, b), log = _pool(2)
    answers = pool.many([{"x": i} for i in range(7)])
    assert [r["y"] for r in answers] == [i * 10 for i in range(7)]  # type: ignore[index]
    assert a.sets == [[0, 1, 2, 3]] and b.sets == [[4, 5, 6]]
    assert log == ["send 0", "send 1", "receive 0", "receive 1"]  # both compute at once
    assert pool.calls == 7


def test_one_set_goes_to_the_first_process() -> None:
    pool, (a, b), _log = _pool(2)
    assert pool({"x": 3}) == {"y": 30}
    assert pool.many([{"x": 4}]) == [{"y": 40}]
    assert a.sets == [[3], [4]] and b.sets == []


def test_more_processes_than_sets_leaves_the_extra_ones_idle() -> None:
    pool, procs, _log = _pool(3)
    pool.many([{"x": 1}, {"x": 2}])
    assert [p.sets for p in procs] == [[[1]], [[2]], []]

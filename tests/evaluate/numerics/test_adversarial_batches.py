"""The adversarial search asks the reference in batches only where batching pays, and builds each
candidate only when its turn comes (a slow reference process computed answers nobody looked at)."""

from __future__ import annotations

from nkitui.evaluate.numerics.adversarial import _first_accepted
from nkitui.evaluate.pipeline.reference import ReferenceProcess


class Reference:
    def __init__(self, batch: int | None) -> None:
        self.batch = batch
        self.prefetched: list[int] = []
        self.trips = 0
        self.asked: list[int] = []

    def __call__(self, inputs):  # noqa: ANN001, ANN204
        self.asked.append(int(inputs["x"]))
        return {"y": inputs["x"]}

    def prefetch(self, sets) -> None:  # noqa: ANN001
        self.trips += 1
        self.prefetched.extend(int(s["x"]) for s in sets)

    def batch_size(self, wanted: int) -> int:
        return wanted if self.batch is None else min(wanted, self.batch)


def _search(reference: Reference, accept_from: int, n: int = 20) -> tuple[object, list[int]]:
    built: list[int] = []

    def build(f: float) -> dict:
        built.append(int(f))
        return {"x": f}

    found = _first_accepted(reference, [float(i) for i in range(n)], build,
                            lambda trial: reference(trial)["y"] >= accept_from)
    return found, built


def _linear(accept_from: int, n: int = 20) -> object:
    """What trying every candidate in order finds."""
    return next(((float(i), {"x": float(i)}) for i in range(n) if i >= accept_from), None)


def test_a_slow_reference_is_searched_by_bisection_one_set_at_a_time() -> None:
    for accept_from in (1, 5, 13, 19):
        ref = Reference(batch=1)
        found, built = _search(ref, accept_from)
        assert found == _linear(accept_from)
        assert ref.prefetched == []  # single sets go straight to the call
        assert len(ref.asked) <= 1 + 5  # the first, then log2(19) rounded up (a linear search asked up to 20)
        assert len(built) == len(set(built)) == len(ref.asked)  # nothing built that is not asked, nothing twice


def test_the_first_candidate_taken_costs_one_call() -> None:
    ref = Reference(batch=1)
    found, built = _search(ref, accept_from=0)
    assert found == (0.0, {"x": 0.0})
    assert ref.asked == [0] and built == [0]


def test_nothing_taken_is_none_after_the_last_candidate_was_asked() -> None:
    ref = Reference(batch=1)
    found, _built = _search(ref, accept_from=99)
    assert found is None
    assert 19 in ref.asked


def test_a_fast_reference_gets_several_candidates_per_round_trip_with_the_same_answer() -> None:
    for accept_from in (2, 5, 11, 19, 99):
        ref = Reference(batch=None)
        found, built = _search(ref, accept_from)
        assert found == _linear(accept_from)
        # after the first candidate (one call), batches of up to 7 evenly spaced ones: an 8-ary search
        assert ref.trips <= 2 and len(built) <= 1 + 2 * 7
        assert set(ref.prefetched) <= set(built)


def _fresh() -> ReferenceProcess:
    proc = ReferenceProcess.__new__(ReferenceProcess)
    proc.work_per_set_s = proc.overhead_s = None
    proc._work_s = proc._overhead_s = 0.0  # noqa: SLF001
    proc._sets = proc._trips = 0  # noqa: SLF001
    return proc


def _process(work_s: float, round_trip_s: float) -> ReferenceProcess:
    proc = _fresh()
    proc._timed([{"seconds": work_s}, {"seconds": work_s}], round_trip_s)  # noqa: SLF001
    return proc


def test_the_reference_process_advises_batches_only_when_round_trips_dominate() -> None:
    assert _process(work_s=0.1, round_trip_s=0.25).batch_size(8) == 1  # 0.2 s of work, 0.05 s overhead
    assert _process(work_s=0.001, round_trip_s=0.04).batch_size(8) == 8
    unknown = _process(work_s=0.1, round_trip_s=0.25)
    unknown._timed([{"seconds": "lots"}], 0.1)  # noqa: SLF001 - unusable timings change nothing
    assert unknown.batch_size(3) == 1
    assert _fresh().batch_size(3) == 3


def test_one_slow_round_trip_does_not_switch_a_slow_reference_to_batches() -> None:
    proc = _process(work_s=0.1, round_trip_s=0.21)  # 0.2 s of work per round trip, 0.01 s overhead
    for _ in range(4):
        proc._timed([{"seconds": 0.1}], 0.11)  # noqa: SLF001
    proc._timed([{"seconds": 0.1}], 0.4)  # noqa: SLF001 - a load spike: 0.3 s of overhead once
    assert proc.batch_size(8) == 1

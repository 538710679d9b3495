"""The reference's answers are recorded while it is live and replayed once it is sealed."""

from __future__ import annotations

import numpy as np
import pytest

from nkitui.evaluate.numerics.callables import abs_inputs
from nkitui.evaluate.numerics.recorded import RecordedReference, UnplannedCall, inputs_digest


def test_answers_are_replayed_by_content_and_unplanned_questions_refused():
    calls = []

    def live(inputs):
        calls.append(1)
        return {"c": inputs["a"] + inputs["b"]}

    ref = RecordedReference(live)
    a, b = np.arange(4.0) - 2, np.ones(4)  # |a| differs from a
    first = ref({"a": a, "b": b})
    ref(abs_inputs({"a": a, "b": b}))
    ref.seal()
    assert np.array_equal(ref({"b": b.copy(), "a": a.copy()})["c"], first["c"])  # the same content, new arrays
    ref(abs_inputs({"a": a, "b": b}))  # rebuilt the same way: the same answer
    assert len(calls) == 2 and ref.live_calls == 2
    with pytest.raises(UnplannedCall, match="not asked about these inputs"):
        ref({"a": a * 2, "b": b})


def test_a_failure_is_recorded_and_raised_again():
    def live(inputs):
        raise ValueError("the reference cannot take these")

    ref = RecordedReference(live)
    with pytest.raises(ValueError):
        ref({"a": np.zeros(2)})
    ref.seal()
    with pytest.raises(ValueError, match="cannot take these"):
        ref({"a": np.zeros(2)})


def test_the_digest_tells_dtypes_shapes_and_names_apart():
    a = np.zeros(4, np.float32)
    assert inputs_digest({"a": a}) != inputs_digest({"a": a.astype(np.float64)})
    assert inputs_digest({"a": a}) != inputs_digest({"a": a.reshape(2, 2)})
    assert inputs_digest({"a": a}) != inputs_digest({"b": a})
    assert inputs_digest({"a": a, "b": a}) == inputs_digest({"b": a.copy(), "a": a.copy()})


def test_prefetch_asks_once_for_many_sets_and_later_calls_replay():
    batches = []

    class Live:
        def __call__(self, inputs):  # pragma: no cover - prefetch must have answered
            raise AssertionError("asked one at a time")

        def many(self, sets):
            batches.append(len(sets))
            return [ValueError("no") if s["a"][0] < 0 else {"c": s["a"] * 2} for s in sets]

    ref = RecordedReference(Live())
    sets = [{"a": np.full(2, float(i))} for i in (-1, 1, 2)]
    ref.prefetch(sets + [{"a": np.full(2, 1.0)}])  # a duplicate is asked once
    ref.prefetch(sets)  # all answered: no round trip
    assert batches == [3] and ref.live_calls == 3
    ref.seal()
    assert np.array_equal(ref({"a": np.full(2, 2.0)})["c"], np.full(2, 4.0))
    with pytest.raises(ValueError, match="no"):
        ref({"a": np.full(2, -1.0)})

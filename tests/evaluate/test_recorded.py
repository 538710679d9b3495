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

"""Saved perf records (and, on hardware, the kernel process's utilisation) are read back checked: huge
integers, NaN or infinite times, negative counts, percentages past 100 and malformed parts are a ValueError
that names the field, never an OverflowError or AttributeError escaping to the caller."""

import copy
import json

import pytest

from nkitui.cli import main as nkitui_main
from nkitui.common.codec import CodecError, decode
from nkitui.perf.summary import PerfRecord
from tests.perf.test_estimate import matmul_trace

GOOD = {
    "version": 1, "source": "estimated", "target": "trn2", "kernel": "k", "total_time": 1e-3,
    "summary": {"tensor_engine_instruction_count": 3, "mfu_estimated_percent": 12.5},
    "engines": {"tensor": {"active_time": 1e-4, "active_time_percent": 10.0, "instruction_time": 1e-4,
                           "instruction_count": 3}},
    "timeline": {"tensor": [[0.0, 1e-4]]},
}

HUGE = 10**400  # valid JSON, too large for a float


@pytest.mark.parametrize("patch, field", [
    ({"total_time": HUGE}, "total_time"),
    ({"total_time": 10**5000}, "total_time"),  # past Python's 4300-digit repr limit
    ({"total_time": float("nan")}, "total_time"),
    ({"total_time": "inf"}, "total_time"),
    ({"total_time": -1.0}, "total_time"),
    ({"core_time": HUGE}, "core_time"),
    ({"launch_overhead": HUGE}, "launch_overhead"),
    ({"summary": {"hbm_read_bytes": HUGE}}, "summary.hbm_read_bytes"),
    ({"summary": {"mfu_estimated_percent": float("inf")}}, "summary.mfu_estimated_percent"),
    ({"summary": {"mfu_estimated_percent": 250.0}}, "summary.mfu_estimated_percent"),
    ({"summary": {"dma_transfer_count": -4}}, "summary.dma_transfer_count"),
    ({"summary": [1, 2]}, "summary"),
    ({"summary": {"x": "fast"}}, "summary.x"),
    ({"engines": [1, 2]}, "engines"),
    ({"engines": {"tensor": "busy"}}, "engines.tensor"),
    ({"engines": {"tensor": {**GOOD["engines"]["tensor"], "active_time_percent": 500.0}}},
     "engines.tensor.active_time_percent"),
    ({"engines": {"tensor": {**GOOD["engines"]["tensor"], "instruction_count": -1}}},
     "engines.tensor.instruction_count"),
    ({"engines": {"tensor": {**GOOD["engines"]["tensor"], "active_time": float("nan")}}},
     "engines.tensor.active_time"),
    ({"timeline": {"tensor": [[1.0]]}}, "timeline.tensor[0]"),
    ({"timeline": {"tensor": [[2.0, 1.0]]}}, "timeline.tensor[0]"),
    ({"timeline": {"tensor": [[0.0, HUGE]]}}, "timeline.tensor[0][1]"),
    ({"hotspots": [{"location": "k.py:1"}]}, "hotspots[0]"),
    ({"roofline": {"target": "trn2"}}, "roofline"),
    ({"speed_of_light": [1]}, "speed_of_light"),
    ({"notes": 5}, "notes"),
])
def test_a_defective_record_is_a_value_error_naming_the_field(patch, field):
    data = copy.deepcopy(GOOD)
    data.update(patch)
    with pytest.raises(ValueError) as err:
        PerfRecord.from_json(data)
    assert f"field {field}" in str(err.value)


def test_a_record_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="JSON object"):
        PerfRecord.from_json([GOOD])  # type: ignore[arg-type]  # the point: a list where an object belongs


def test_an_estimate_round_trips_unchanged():
    """The checks refuse nothing the cost model writes: a real estimate, written and read back, is equal."""
    from nkitui.perf import estimate

    rec = estimate(matmul_trace())
    data = json.loads(json.dumps(rec.to_json()))
    back = PerfRecord.from_json(data)
    assert back.to_json() == rec.to_json()


def test_the_codec_refuses_an_integer_too_large_for_a_float():
    with pytest.raises(CodecError, match="x: int of 1329 bits is too large"):
        decode(float, HUGE, "x")
    with pytest.raises(CodecError, match="x: expected text, got int of 16610 bits"):
        decode(str, 10**5000, "x")


def test_perf_compare_on_a_hostile_saved_record_names_the_file_and_field(tmp_path, capsys):
    from nkitui.perf import estimate

    good = tmp_path / "good.json"
    good.write_text(json.dumps(estimate(matmul_trace()).to_json()))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**GOOD, "total_time": HUGE}))
    assert nkitui_main(["perf", "compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "total_time" in err and "Traceback" not in err

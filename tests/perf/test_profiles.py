"""Parsing recorded profiler outputs (tests/perf/data, synthesized from the documented schemas)."""

import json
from pathlib import Path

import pytest

from nkitui.perf import ProfileError, load_profile, parse_profile

DATA = Path(__file__).parent / "data"


def test_explorer_summary_json_with_fractions_keyed_by_core():
    r = load_profile(DATA / "explorer_summary_fractions.json", target="trn1", kernel="block_all")
    assert r.source == "measured" and r.tool == "neuron-explorer summary-json"
    assert r.total_time == pytest.approx(0.00697)
    assert r.summary["hfu_estimated_percent"] == pytest.approx(85.24)  # fraction 0.8524 -> percent
    assert r.engines["tensor"].active_time_percent == pytest.approx(85.97)
    assert r.engines["tensor"].instruction_count == 32768
    assert r.engines["dma"].active_time == pytest.approx(0.00301)
    assert any("fractions" in n for n in r.notes)
    assert r.extras["metadata"]["summary_key"] == "nc_0"
    assert r.roofline is not None and r.roofline.target == "trn1"
    assert r.roofline.arithmetic_intensity == pytest.approx(549755813888 / (671088640 + 67108864))


def test_explorer_summary_json_with_percent_values_is_kept():
    r = load_profile(DATA / "explorer_summary_percent.json", target="trn1")
    assert r.summary["hfu_estimated_percent"] == pytest.approx(10.98)
    assert r.engines["dma"].active_time_percent == pytest.approx(99.61)
    assert not any("fractions" in n for n in r.notes)
    assert r.timeline == {} and r.hotspots == []


def test_explorer_json_view_with_instructions():
    r = load_profile(DATA / "explorer_view.json")
    assert r.tool == "neuron-explorer json" and r.target == "trn1"  # from metadata.platform
    assert r.total_time == pytest.approx(12e-6)
    assert r.engines["tensor"].active_time == pytest.approx(2.5e-6)
    assert set(r.timeline) == {"dma", "tensor", "vector", "scalar", "sync"}
    assert r.timeline["tensor"] == [[pytest.approx(3.1e-6), pytest.approx(5.6e-6)]]  # four back-to-back matmuls
    assert r.timeline["dma"][0] == [0.0, pytest.approx(3e-6)]  # two overlapping loads merged
    top = r.hotspots[0]
    assert top.location == "matmul.py:14" and top.time == pytest.approx(3e-6)
    mm = next(h for h in r.hotspots if h.location == "matmul.py:16")
    assert mm.instructions == 4 and mm.flops == 4 * 16777216 and mm.by_engine == {"tensor": pytest.approx(2.5e-6)}
    assert next(h for h in r.hotspots if h.location == "?").by_engine == {"sync": pytest.approx(2e-7)}


def test_legacy_neuron_profile_json_derives_engine_times_from_instructions():
    r = load_profile(DATA / "neuron_profile_legacy.json", target="trn1")
    assert r.tool == "neuron-profile json"
    assert r.total_time == pytest.approx(20e-6)
    assert r.engines["tensor"].active_time == pytest.approx(4e-6)
    assert r.engines["tensor"].active_time_percent == pytest.approx(20.0)
    assert r.engines["dma"].active_time == pytest.approx(9e-6)
    assert r.engines["scalar"].instruction_count == 1
    assert r.summary["tensor_engine_active_time_percent"] == pytest.approx(20.0)
    assert r.hotspots[0].location == "kernel.py:15"


def test_a_directory_with_one_profile_is_accepted(tmp_path):
    (tmp_path / "profile.json").write_text((DATA / "explorer_view.json").read_text())
    assert load_profile(tmp_path).total_time == pytest.approx(12e-6)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProfileError, match="no profile JSON found"):
        load_profile(empty)
    (empty / "a.json").write_text("{}")
    (empty / "b.json").write_text("{}")
    with pytest.raises(ProfileError, match="several JSON files"):
        load_profile(empty)
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profile(tmp_path / "missing.json")


def test_missing_target_is_assumed_and_said(tmp_path):
    r = parse_profile({"total_time": 0.001, "tensor_engine_active_time": 0.0005})
    assert r.target == "trn2" and any("assumed trn2" in n for n in r.notes)
    assert r.engines["tensor"].active_time_percent == pytest.approx(50.0)


@pytest.mark.parametrize("content,message", [
    ("{not json", r"bad\.json:1: not valid JSON"),
    ("[1, 2]", "not of summary objects"),
    ('{"foo": 1}', "no profiler summary found"),
    ('{"summary": {"total_time": -1}}', "total_time is -1.0"),
    ('{"summary": [], "instruction": [{"timestamp": 5}]}', r"instruction\[0\] lacks"),
    ('{"summary": [], "instruction": [{"timestamp": 5, "duration": -2}]}', "negative duration"),
    ('{"summary": [], "instruction": []}', "no total_time in the summary and no timed instructions"),
])
def test_bad_profiles_are_reported_with_the_file_and_problem(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ProfileError, match=message):
        load_profile(p)


def test_core_selection_in_keyed_summaries():
    data = json.loads((DATA / "explorer_summary_fractions.json").read_text())
    data["nc_1"] = dict(data["nc_0"], total_time=0.008)
    assert parse_profile(data, core="nc_1", target="trn1").total_time == pytest.approx(0.008)
    with pytest.raises(ProfileError, match="no summary for core 'nc_9'"):
        parse_profile(data, core="nc_9", target="trn1")

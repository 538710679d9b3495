"""Run results as versioned JSON, the run store, and A/B comparison (no processes)."""

from __future__ import annotations

import json

import pytest

from nkitui.evaluate.run.result import Check, ResultVersionError, RunResult, SeedResult
from nkitui.evaluate.run.store import RunNotFound, RunStore, compare_runs, compare_timing


def make_result(run_id="20261130T120000Z-aaaaaa", status="passed", median=100.0, max_abs=1e-6, **kw) -> RunResult:
    out = {"name": "out", "max_abs": max_abs, "max_rel": 1e-5, "max_ulp": 2.0, "rel_l2": 1e-7, "mismatches": 0,
           "count": 8, "passed": True}
    return RunResult(
        run_id=run_id, task_id="add", status=status, task_title="vector add", created_at=run_id[:15],
        backend="emulator", target="trn2", seeds=[0, 1], tolerances={"out": {"kind": "allclose", "atol": 1e-5, "rtol": 1e-5}},
        seed_results=[SeedResult(0, True, [out]), SeedResult(1, True, [dict(out, max_abs=max_abs * 2)])],
        checks=[Check("kernel-runs", "runs", True), Check("output:out", "matches", status == "passed")],
        timing={"kind": "estimated", "median_us": median}, **kw,
    )


def test_json_round_trip_is_lossless():
    r = make_result(error={"kind": "x", "message": "y", "file": None, "line": None, "traceback": ""})
    again = RunResult.from_json(r.to_json())
    assert again == r
    d = json.loads(r.to_json())
    assert d["schema"] == "nkitui.run-result" and d["schema_version"] == 1


def test_unknown_versions_are_rejected_in_words():
    d = make_result().to_dict()
    with pytest.raises(ResultVersionError, match="schema version 2 is not supported .* upgrade nkitui"):
        RunResult.from_dict(d | {"schema_version": 2})
    with pytest.raises(ResultVersionError, match="not an nkitui run result"):
        RunResult.from_dict(d | {"schema": "something-else"})
    with pytest.raises(ResultVersionError, match="lacks the field 'run_id'"):
        RunResult.from_dict({k: v for k, v in d.items() if k != "run_id"})
    with pytest.raises(ResultVersionError, match="not valid JSON"):
        RunResult.from_json("{")


@pytest.mark.parametrize("status, code", [("passed", 0), ("failed", 1), ("invalid", 2), ("timeout", 1),
                                          ("crashed", 1), ("memory-limit", 1)])
def test_exit_codes_follow_the_contract(status, code):
    assert make_result(status=status).exit_code == code


def test_worst_metric_over_seeds_and_summary_line():
    r = make_result(max_abs=1e-6)
    assert r.worst("out", "max_abs") == 2e-6
    assert r.summary_line() == "run 20261130T120000Z-aaaaaa (emulator/trn2): passed, 2/2 checks, estimated 100.0 µs"
    assert r.short_id == "aaaaaa"


def test_store_saves_lists_and_reopens(tmp_path):
    store = RunStore(tmp_path)
    older = make_result("20261130T120000Z-aaaaaa")
    newer = make_result("20261130T130000Z-bbbbbb", status="failed")
    for r in (older, newer):
        store.save(r)
    listed = store.list("add")
    assert [s.run_id for s in listed] == [newer.run_id, older.run_id]
    assert listed[0].status == "failed" and listed[1].checks_passed == 2
    assert store.load("bbbbbb") == newer, "a short id finds the run"
    assert store.load(older.run_id, task_id="add") == older
    assert store.latest("add") == newer
    with pytest.raises(RunNotFound, match="no run 'cccccc'"):
        store.load("cccccc")


def test_an_unreadable_file_is_listed_not_fatal(tmp_path):
    store = RunStore(tmp_path)
    store.save(make_result())
    (tmp_path / "add" / "20261130T140000Z-broken.json").write_text('{"schema": "nkitui.run-result", "schema_version": 9}')
    listed = store.list()
    broken = next(s for s in listed if s.status == "unreadable")
    assert "schema version 9" in broken.error
    assert store.latest("add").run_id == "20261130T120000Z-aaaaaa"


def test_ab_comparison_of_metrics_checks_and_timing():
    a = make_result("20261130T120000Z-aaaaaa", median=100.0, max_abs=1e-6)
    b = make_result("20261130T130000Z-bbbbbb", median=80.0, max_abs=1e-7, status="failed")
    cmp = compare_runs(a, b)
    d = cmp.to_dict()
    max_abs = next(m for m in d["metrics"] if m["metric"] == "max_abs")
    assert max_abs["a"] == 2e-6 and max_abs["b"] == 2e-7 and max_abs["change"] == "better"
    assert {"id": "output:out", "a": True, "b": False} in d["checks"]
    assert d["timing"]["speedup"] == pytest.approx(1.25) and d["timing"]["verdict"] == "faster (estimate)"


def test_measured_speedups_inside_the_noise_are_not_called_real():
    a = {"kind": "measured", "median_us": 100.0, "ci95_us": [95.0, 105.0]}
    assert compare_timing(a, {"kind": "measured", "median_us": 98.0, "ci95_us": [93.0, 104.0]})["verdict"] == "within the noise"
    assert compare_timing(a, {"kind": "measured", "median_us": 80.0, "ci95_us": [78.0, 82.0]})["verdict"] == "faster (outside the noise)"
    assert compare_timing(a, {"kind": "estimated", "median_us": 80.0})["verdict"].startswith("not comparable")
    assert compare_timing(None, a)["verdict"] == "no timing to compare"


def test_utilisation_of_two_measured_runs_is_compared_with_the_cost_model_tools():
    from nkitui.perf import parse_profile

    from .conftest import FAKES

    explorer = json.loads((FAKES / "recorded" / "explorer_summary.json").read_text())
    legacy = json.loads((FAKES / "recorded" / "neuron_profile_summary.json").read_text())
    a = make_result(utilisation=parse_profile(legacy, target="trn2").to_json())
    b = make_result("20261130T130000Z-bbbbbb", utilisation=parse_profile(explorer, target="trn2").to_json())
    cmp = compare_runs(a, b)
    assert cmp.performance["speedup"] == pytest.approx(231.0 / 182.4)
    tensor = next(u for u in cmp.utilisation if u["lane"] == "tensor")
    assert tensor["a"] == pytest.approx(21.0) and tensor["b"] == pytest.approx(24.6)


def test_non_finite_numbers_anywhere_are_written_as_strict_json():
    import numpy as np

    r = make_result(utilisation={"engines": {"tensor": {"active_time_percent": np.float32(12.5)}}, "count": np.int64(3)})
    r.timing = {"kind": "estimated", "median_us": float("nan"), "spread": [float("inf"), -np.inf]}
    text = r.to_json()

    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    d = json.loads(text, parse_constant=refuse)
    assert d["timing"]["median_us"] == "nan" and d["timing"]["spread"] == ["inf", "-inf"]
    assert d["utilisation"] == {"engines": {"tensor": {"active_time_percent": 12.5}}, "count": 3}
    again = RunResult.from_json(text)
    assert again.timing["median_us"] == "nan"
    assert again.summary_line().endswith("2/2 checks")  # a non-number median is not shown as a time

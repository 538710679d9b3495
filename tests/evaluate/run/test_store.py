"""Run results as versioned JSON, the run store, and A/B comparison (no processes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from nkitui.evaluate.numerics.metrics import compute_metrics
from nkitui.evaluate.run.result import Check, ResultVersionError, RunError, RunResult, SeedResult, Timing
from nkitui.evaluate.run.store import RunNotFound, RunStore, compare_runs, compare_timing
from nkitui.task.model import Tolerance

V1_FILE = Path(__file__).parent / "fixtures" / "run_result_v1.json"  # written by nkitui at 9e4cd76
TOL = Tolerance(kind="allclose", atol=1e-5, rtol=1e-5)


def _metrics(max_abs: float):
    m = compute_metrics("out", np.zeros(8, np.float32), np.zeros(8), TOL, "float32")
    return replace(m, max_abs=max_abs, max_rel=1e-5, max_ulp=2.0, rel_l2=1e-7)


def make_result(run_id="20261130T120000Z-aaaaaa", status="passed", median=100.0, max_abs=1e-6, **kw) -> RunResult:
    return RunResult(
        run_id=run_id, task_id="add", status=status, task_title="vector add", created_at=run_id[:15],
        backend="emulator", target="trn2", seeds=[0, 1], tolerances={"out": TOL},
        seed_results=[SeedResult(0, True, (_metrics(max_abs),)), SeedResult(1, True, (_metrics(max_abs * 2),))],
        checks=[Check("kernel-runs", "runs", True), Check("output:out", "matches", status == "passed")],
        timing=Timing("estimated", median_us=median), **kw,
    )


def test_json_round_trip_is_lossless():
    r = make_result(error=RunError("x", "y"))
    again = RunResult.from_json(r.to_json())
    assert again == r
    d = json.loads(r.to_json())
    assert d["schema"] == "nkitui.run-result" and d["schema_version"] == 2


def test_unknown_versions_are_rejected_in_words():
    d = make_result().to_dict()
    with pytest.raises(ResultVersionError, match="schema version 3 is newer than this nkitui reads .2.; upgrade nkitui"):
        RunResult.from_dict(d | {"schema_version": 3})
    with pytest.raises(ResultVersionError, match="schema version 0 is not supported"):
        RunResult.from_dict(d | {"schema_version": 0})
    with pytest.raises(ResultVersionError, match="not an nkitui run result"):
        RunResult.from_dict(d | {"schema": "something-else"})
    with pytest.raises(ResultVersionError, match="run_id: required field is missing"):
        RunResult.from_dict({k: v for k, v in d.items() if k != "run_id"})
    with pytest.raises(ResultVersionError, match="not valid JSON"):
        RunResult.from_json("{")


def test_a_field_that_does_not_fit_is_named_by_its_path():
    d = make_result().to_dict()
    d["seed_results"][1]["kernel_s"] = "fast"
    with pytest.raises(ResultVersionError, match=r"seed_results\[1\]\.kernel_s: expected a number, got str 'fast'"):
        RunResult.from_dict(d)


def test_a_version_1_result_written_before_the_trust_split_still_loads_and_renders():
    from nkitui.evaluate.present.report import result_text

    r = RunResult.from_json(V1_FILE.read_text())
    assert r.status == "passed" and r.backend == "emulator" and r.task_id == "transpose2d"
    assert r.timing.kind == "estimated" and r.timing.median_us > 0
    assert r.utilisation.source == "estimated" and r.utilisation.engines
    assert r.seed_results[0].outputs[0].name == "out" and r.numerics.passed
    assert r.limits.timeout_s == 60.0 and r.sandbox.violations == ()
    text = result_text(r, width=100)
    assert "PASSED" in text and "transpose2d" in text
    again = RunResult.from_json(r.to_json())  # and it is written back as version 2
    assert again == r and json.loads(r.to_json())["schema_version"] == 2


def test_a_stored_file_of_an_unknown_version_fails_naming_the_file(tmp_path):
    store = RunStore(tmp_path)
    path = tmp_path / "add" / "20261130T140000Z-aaaaaa.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(make_result().to_dict() | {"schema_version": 7}))
    with pytest.raises(ResultVersionError, match=f"{path}: run result schema version 7 is newer"):
        store.load("aaaaaa")


@pytest.mark.parametrize("status, code", [("passed", 0), ("failed", 1), ("invalid", 2), ("timeout", 1),
                                          ("crashed", 1), ("memory-limit", 1)])
def test_exit_codes_follow_the_contract(status, code):
    assert make_result(status=status).exit_code == code


def test_worst_metric_over_seeds_and_summary_line():
    r = make_result(max_abs=1e-6)
    assert r.worst("out", "max_abs") == 2e-6
    assert r.summary_line() == "run 20261130T120000Z-aaaaaa (emulator/trn2): passed, 2/2 checks, estimated 100 µs"
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

    from tests.helpers.evaluation import FAKES

    explorer = json.loads((FAKES / "recorded" / "explorer_summary.json").read_text())
    legacy = json.loads((FAKES / "recorded" / "neuron_profile_summary.json").read_text())
    a = make_result(utilisation=parse_profile(legacy, target="trn2"))
    b = make_result("20261130T130000Z-bbbbbb", utilisation=parse_profile(explorer, target="trn2"))
    cmp = compare_runs(a, b)
    assert cmp.performance["speedup"] == pytest.approx(231.0 / 182.4)
    tensor = next(u for u in cmp.utilisation if u["lane"] == "tensor")
    assert tensor["a"] == pytest.approx(21.0) and tensor["b"] == pytest.approx(24.6)


def test_non_finite_numbers_anywhere_are_written_as_strict_json():
    import numpy as np

    r = make_result(versions={"count": np.int64(3), "share": np.float32(12.5)})
    r.timing = Timing("measured", median_us=float("nan"), ci95_us=(float("inf"), -np.inf))
    text = r.to_json()

    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    d = json.loads(text, parse_constant=refuse)
    assert d["timing"]["median_us"] == "nan" and d["timing"]["ci95_us"] == ["inf", "-inf"]
    assert d["versions"] == {"count": 3, "share": 12.5}
    again = RunResult.from_json(text)
    assert again.timing.median_us != again.timing.median_us  # NaN comes back as NaN
    assert again.summary_line().endswith("2/2 checks")  # a non-number median is not shown as a time

"""`nkitui check`: exit codes, JSON, the Rich report, messages for invalid tasks and commands."""

from __future__ import annotations

import json

import pytest

from nkitui.cli import main
from nkitui.evaluate.run.result import RunResult
from nkitui.evaluate.run.store import RunStore

from tests.helpers.evaluation import add_task_manifest, write_task

FAST = ["--no-static", "--no-trials", "--no-precision", "--quiet", "--memory-mb", "2048"]


def test_a_passing_task_exits_0_with_json_and_is_stored(tmp_path, capsys, isolated_user_folders):
    task = write_task(tmp_path / "ok")
    code = main(["check", str(task), "--json", "--seeds", "1", *FAST])
    out = capsys.readouterr().out
    result = RunResult.from_json(out)
    assert code == 0 and result.status == "passed" and result.seeds == [0]
    stored = RunStore(isolated_user_folders / "xdg_data_home" / "nkitui" / "runs").load(result.run_id)
    assert stored.run_id == result.run_id


def test_a_failing_task_exits_1_with_a_report(tmp_path, capsys):
    task = write_task(tmp_path / "bad", reference="def add(a, b, **kw):\n    return a * b\n")
    code = main(["check", str(task), "--no-store", *FAST])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED" in out and "FAIL" in out and "matches the reference" in out
    assert "outputs per seed" in out and "backend" in out and "built-in emulator" in out


def test_a_missing_folder_exits_2_naming_it(tmp_path, capsys):
    code = main(["check", str(tmp_path / "nowhere"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "nowhere" in err and "no such file or folder" in err


def test_an_invalid_manifest_exits_2_naming_file_and_field(tmp_path, capsys):
    manifest = add_task_manifest().replace('dtype = "float32"', 'dtype = "float33"', 1)
    task = write_task(tmp_path / "badtoml", manifest=manifest)
    code = main(["check", str(task), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["status"] == "invalid"
    assert any("inputs[0].dtype" in p and "task.toml" in p for p in out["problems"])


def test_an_unavailable_backend_exits_2_saying_what_is_missing(tmp_path, capsys):
    task = write_task(tmp_path / "hw")
    code = main(["check", str(task), "--backend", "neuron", "--no-store", *FAST])
    captured = capsys.readouterr()
    assert code == 2
    assert "needs a Neuron device" in captured.err


@pytest.mark.parametrize("args", [["--seeds", "0"], ["--timeout", "-1"], ["--backend", "gpu"]])
def test_bad_options_exit_2(tmp_path, args, capsys):
    with pytest.raises(SystemExit) as info:
        main(["check", str(tmp_path), *args])
    assert info.value.code == 2


def test_per_seed_metrics_are_never_cut_at_80_columns(tmp_path, capsys):
    from rich.console import Console

    from nkitui.evaluate.present.report import render_seed_metrics

    task = write_task(tmp_path / "bad", reference="def add(a, b, **kw):\n    return a * b + 1e-3\n")
    main(["check", str(task), "--json", "--no-store", "--seeds", "1", *FAST])
    result = RunResult.from_json(capsys.readouterr().out)
    console = Console(width=80, record=True, color_system=None)
    console.print(render_seed_metrics(result))
    text = console.export_text()
    metrics = result.seed_results[0].outputs[0]
    assert "…" not in text
    assert f"{metrics.max_abs:.3g}" in text or f"{metrics.max_abs:.2e}" in text


def test_a_failing_seed_is_logged_as_a_warning_and_the_stored_log_keeps_its_level(tmp_path, capsys):
    task = write_task(tmp_path / "bad", reference="def add(a, b, **kw):\n    return a * b\n")
    main(["check", str(task), "--json", "--no-store", "--seeds", "1", *FAST])
    result = RunResult.from_json(capsys.readouterr().out)
    failing = [line for line in result.log_excerpt if "FAILS" in line]
    assert failing and all(line.startswith("[worker:warning] seed 0: ") for line in failing)
    assert any(line.startswith("[worker] ") for line in result.log_excerpt)  # info lines keep the short tag


def test_a_phase_whose_check_fails_ends_failed_so_a_warnings_filter_shows_it(tmp_path):
    # issue #18: "trials ok ...: 1 failing" hid the failure from the log's warnings-and-errors filter
    from nkitui.evaluate.run import start_evaluation
    from nkitui.executor.events import PhaseEvent

    from tests.helpers.evaluation import quick_request

    task = write_task(tmp_path / "bad", reference="def add(a, b, **kw):\n    return a * b\n")
    handle = start_evaluation(quick_request(task, seeds=1))
    ends = {e.name: e for e in handle.events() if isinstance(e, PhaseEvent) and e.state == "end"}
    assert handle.result.status == "failed"
    assert ends["compare"].status == "failed" and "output:out: FAIL" in ends["compare"].detail
    assert ends["run"].status == "ok" and ends["load"].status == "ok"  # phases whose checks passed stay ok
    assert {p.name: p.status for p in handle.result.phases}["compare"] == "failed"

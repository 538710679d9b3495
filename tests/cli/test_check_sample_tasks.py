"""`nkitui check` on the bundled sample tasks: the CONTRACT's exit codes (0 every check passes, 1 a
check failed, 2 the task or the command is invalid) and strict JSON, with real workers."""

from __future__ import annotations

import json
import shutil

import pytest

from nkitui.cli import main
from nkitui.common.resources import bundled_dir
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.run.headless import run_check
from nkitui.evaluate.run.result import RunResult
from nkitui.evaluate.run import EvaluationRequest

SAMPLES = bundled_dir("sample_tasks")
TASKS = sorted(p.name for p in SAMPLES.iterdir() if (p / "task.toml").is_file())
GOOD = [t for t in TASKS if not t.startswith("flawed_")]
# flawed tasks whose flaw a check catches (the transliteration computes the right values; static
# analysis flags it); the loose tolerance fails the tolerance check through NUM-ZEROS-PASS
FAILING = {"flawed_partial_tile": {"output:y", "trials", "precision"}, "flawed_bf16_accum": {"trials", "precision"},
           "flawed_loose_tolerance": {"tolerance:probs"}}
QUICK = ["--quiet", "--no-static", "--no-trials", "--no-precision", "--no-store", "--seeds", "1"]


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_the_flawed_tasks_named_here_are_bundled():
    assert set(FAILING) <= set(TASKS) and GOOD


# one test per task: pytest-xdist spreads them over its workers (one evaluation each, no thread pool
# inside a worker competing with the other worker for the cores)
@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_every_sample_task_exits_with_the_contracts_code(name):
    # every check that decides the exit code runs (trials, precision); one seed keeps it short
    outcome = run_check(EvaluationRequest.of(SAMPLES / name, seeds=1, static=False, store=False))
    failed = {c.id for c in outcome.result.failed_checks()} if outcome.result else None
    assert outcome.exit_code == (1 if name in FAILING else 0), failed
    if name in FAILING:
        assert failed == FAILING[name]
    else:
        assert outcome.result.status == "passed" and not failed


def test_the_loose_tolerance_task_fails_its_tolerance_check_because_zeros_would_pass(capsys):
    code = main(["check", str(SAMPLES / "flawed_loose_tolerance"), "--json", *QUICK])
    result = RunResult.from_dict(_strict_json(capsys.readouterr().out))
    assert code == 1 and result.status == "failed"
    by_id = {c.id: c for c in result.checks}
    assert by_id["output:probs"].passed is True  # the kernel itself is right ...
    assert by_id["tolerance:probs"].passed is False  # ... the task's test is what is broken
    assert "all-zeros" in by_id["tolerance:probs"].detail
    zeros = [f for f in result.findings if f.rule == rules.ZEROS_PASS]
    assert len(zeros) == 1 and "`probs`" in zeros[0].message and "atol = 0.01" in zeros[0].message


def test_a_port_writing_nan_fails_with_strict_json(capsys):
    code = main(["check", str(SAMPLES / "flawed_partial_tile"), "--json", *QUICK])
    data = _strict_json(capsys.readouterr().out)
    assert code == 1 and data["status"] == "failed"
    out = data["seed_results"][0]["outputs"][0]
    assert out["nonfinite"]["nan_where_finite"] > 0
    assert "inf" in {v for row in out["heatmap"]["max_abs"] for v in row}  # NaN tiles rank as infinite errors
    assert {f["rule"] for f in data["findings"]} >= {rules.NONFINITE, rules.TILE_LOCALISED}


@pytest.mark.parametrize("edit, where", [
    (lambda t: t.replace('dtype = "float32"\ntolerance', 'dtype = "float33"\ntolerance'), "outputs[0].dtype"),
    (lambda t: t.replace('op = "softmax"', 'op = "softmax'), "task.toml:"),
    (lambda t: t.replace("shape = [300, 512]", "shape = [300, -512]", 1), "inputs[0].shape"),
])
def test_a_broken_manifest_exits_2_naming_the_file_and_the_field(tmp_path, capsys, edit, where):
    task = tmp_path / "broken"
    shutil.copytree(SAMPLES / "flawed_partial_tile", task)
    manifest = task / "task.toml"
    text = manifest.read_text()
    broken = edit(text)
    assert broken != text
    manifest.write_text(broken)

    assert main(["check", str(task), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "task.toml" in err and where in err and "error:" in err and "fix:" in err
    assert main(["check", str(task), "--json"]) == 2
    data = _strict_json(capsys.readouterr().out)
    assert data["status"] == "invalid" and data["exit_code"] == 2
    assert any("task.toml" in p and where in p for p in data["problems"])

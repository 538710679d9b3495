"""`nkitui check --mutants` end to end (real workers, emulator): mutants that stay within a correct
port's expected error are "undetectable", never false NUM-MUTANT-SURVIVED alarms; a weak tolerance
does let a broken port through."""

from __future__ import annotations

import re
import shutil

import pytest

from nkitui.cli import main
from nkitui.common.resources import bundled_dir
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.run.result import RunResult

SAMPLES = bundled_dir("sample_tasks")
MUTANTS_ONLY = ["--mutants", "--json", "--no-store", "--quiet", "--no-static", "--no-trials", "--no-precision",
                "--seeds", "1"]

pytestmark = pytest.mark.slow


def _check(task_dir, capsys) -> tuple[int, RunResult]:
    code = main(["check", str(task_dir), *MUTANTS_ONLY])
    return code, RunResult.from_json(capsys.readouterr().out)


def test_bf16_accumulator_mutants_of_attention_are_undetectable_not_survivors(capsys):
    code, result = _check(SAMPLES / "attention_fwd", capsys)
    assert code == 0, result.error
    mutants = result.numerics.mutants.results
    lowered = [m for m in mutants if m.operator == "lower-accumulator"]
    assert lowered and all(m.status == "undetectable" for m in lowered)
    assert not [m for m in mutants if m.status == "survived"]
    assert not [f for f in result.findings if f.rule == rules.MUTANT_SURVIVED]


def test_a_tolerance_as_weak_as_flawed_loose_tolerances_lets_a_bf16_mutant_survive(tmp_path, capsys):
    # row_softmax with the tolerance of flawed_loose_tolerance (allclose 1e-2 / 1e-2): keeping the
    # row sums in bf16 breaks the port, yet it still passes.
    loose = (SAMPLES / "flawed_loose_tolerance" / "task.toml").read_text()
    weak = re.search(r"tolerance = \{[^}]*\}", loose).group(0)
    task = tmp_path / "softmax_weak"
    shutil.copytree(SAMPLES / "row_softmax", task)
    manifest = task / "task.toml"
    text, n = re.subn(r"tolerance = \{[^}]*\}", weak, manifest.read_text())
    assert n == 1
    manifest.write_text(text)

    code, result = _check(task, capsys)
    assert code == 0  # the weak tolerance passes the correct port; mutants are advice, not a check
    survived = [m for m in result.numerics.mutants.results if m.status == "survived"]
    assert [m.operator for m in survived] == ["lower-accumulator"]
    findings = [f for f in result.findings if f.rule == rules.MUTANT_SURVIVED]
    assert len(findings) == 1 and findings[0].severity == "high"
    assert (findings[0].file, findings[0].line) == ("row_softmax_nki.py", survived[0].line)
    assert "allclose atol=0.01 rtol=0.01" in findings[0].message and "bfloat16" in findings[0].message

"""A port that does not parse is still a port to review: `check` fails it (exit 1, the syntax error in
the failed check), the analysis reports the error at its line and column, and a review of it can be
templated, validated and submitted. Exit 2 stays for tasks that are themselves invalid."""

from __future__ import annotations

import json
import re

from nkitui.cli import main
from nkitui.evaluate.run.result import RunResult
from tests.helpers.review import init_repo, write_task


def _break_port(root) -> None:
    kernel = root / "add_nki.py"
    lines = kernel.read_text().splitlines()
    lines.insert(2, "x = max(1, 2")  # line 3: an unclosed (
    kernel.write_text("\n".join(lines) + "\n")


def test_check_fails_the_port_with_its_syntax_error_and_exits_1(tmp_path, capsys):
    root = write_task(tmp_path / "add")
    _break_port(root)
    code = main(["check", str(root), "--json", "--quiet", "--no-trials", "--no-precision", "--no-store",
                 "--seeds", "1"])
    result = RunResult.from_json(capsys.readouterr().out)
    assert code == 1 and result.status == "failed"
    failed = [c for c in result.checks if c.passed is False]
    assert failed and "was never closed" in failed[0].detail
    syntax = [f for f in result.findings if f.rule == "NKI-SYNTAX"]
    assert syntax and syntax[0].line == 3 and "(line 3, column 8)" in syntax[0].title


def test_analyze_reports_line_and_column(tmp_path, capsys):
    root = write_task(tmp_path / "add")
    _break_port(root)
    assert main(["analyze", str(root), "--json"]) == 1  # a high finding
    report = json.loads(capsys.readouterr().out)
    [finding] = [f for f in report["findings"] if f["rule"] == "NKI-SYNTAX"]
    assert finding["line"] == 3 and finding["data"]["column"] == 8


def test_a_review_of_the_broken_port_is_templated_validated_and_submitted(tmp_path, capsys):
    root = write_task(tmp_path / "add")
    _break_port(root)
    repo = init_repo(root)
    assert main(["review", "template", str(root)]) == 0
    template = capsys.readouterr().out
    filled = re.sub(r'^score = ""$', "score = 1", template, flags=re.M).replace('verdict = ""', 'verdict = "reject"')
    draft = tmp_path / "draft.toml"
    draft.write_text(filled)
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 0
    assert "ready to submit" in capsys.readouterr().out
    assert main(["review", "submit", str(root), "--from", str(draft), "--auditor", "ada"]) == 0
    assert repo.head.commit.message.startswith("review(add): reject by ada")


def test_a_task_whose_reference_does_not_parse_is_still_invalid(tmp_path, capsys):
    root = write_task(tmp_path / "add")
    (root / "reference.py").write_text("def add(a, b:\n    return a + b\n")
    assert main(["check", str(root), "--quiet", "--no-store"]) == 2
    assert "reference.py:1 [sources.reference]: error: does not parse" in capsys.readouterr().err
    assert main(["review", "template", str(root)]) == 2

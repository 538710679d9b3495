"""What the headless review commands print when something is wrong: one clear line per problem, the
field named, the way out given, never a traceback."""

from __future__ import annotations

import re

import git
import pytest

from nkitui.cli import main
from nkitui.review import SubmitRefused, submit_review
from tests.helpers.review import filled_draft


def _template(root, tmp_path, capsys) -> str:
    out = tmp_path / "draft.toml"
    assert main(["review", "template", str(root), "--out", str(out)]) == 0
    capsys.readouterr()
    return out.read_text()


def _filled(text: str) -> str:
    text = re.sub(r'^score = ""$', "score = 4", text, flags=re.M)
    return text.replace('verdict = ""', 'verdict = "accept"')


def test_each_problem_is_one_line_with_its_severity_once(task_repo, tmp_path, capsys):
    root, _ = task_repo
    draft = tmp_path / "empty.toml"
    draft.write_text(_template(root, tmp_path, capsys))
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and all(line.startswith(f"{draft} [") for line in lines), lines
    assert all(len(re.findall(r"\b(error|warning): ", line)) == 1 for line in lines), lines


def test_history_and_export_print_corrupt_files_without_a_doubled_severity(task_repo, tmp_path, capsys):
    root, _ = task_repo
    bad = root / "reviews" / "mallory" / "20261130T000000Z-deadbeef.toml"
    bad.parent.mkdir(parents=True)
    bad.write_text("id = [\n")
    for argv in (["history", str(root)], ["export", str(root)]):
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "skipped a corrupt review file" in err
        if argv[0] == "history":  # a path that opens from where the command was run
            assert err.startswith(f"{bad} ") or err.startswith(f"{bad}:"), err
        assert not re.search(r"^(error|warning): .*: (error|warning): ", err, re.M), err


def test_template_into_a_missing_folder_is_an_error_not_a_traceback(task_repo, tmp_path, capsys):
    root, _ = task_repo
    target = tmp_path / "no" / "such" / "folder" / "draft.toml"
    assert main(["review", "template", str(root), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {target}" in err and "fix:" in err
    assert not target.exists()


def test_misspelt_keys_are_shown_beside_the_error_they_cause(task_repo, tmp_path, capsys):
    root, _ = task_repo
    text = _filled(_template(root, tmp_path, capsys))
    text = text.replace('summary = ""', 'summery = "looks fine"')
    text = text.replace("score = 4", "scroe = 4", 1)  # the first criterion: migration_fidelity
    draft = tmp_path / "typo.toml"
    draft.write_text(text)
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 2
    err = capsys.readouterr().err
    assert "[summery]: warning: unknown key 'summery' is ignored — fix: did you mean 'summary'?" in err
    assert "[scores.migration_fidelity.scroe]: warning: unknown key 'scroe'" in err and "did you mean 'score'?" in err
    assert "[scores.migration_fidelity.score]: error: required criterion" in err

    draft.write_text(text.replace("scroe = 4", "score = 4"))
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 0
    captured = capsys.readouterr()
    assert "ready to submit" in captured.out and "unknown key 'summery'" in captured.err


def test_a_bare_repository_is_refused_as_bare(task_repo, tmp_path, capsys, rubric):
    root, repo = task_repo
    bare = tmp_path / "origin.git"
    repo.clone(str(bare), bare=True)
    with pytest.raises(SubmitRefused) as info:
        submit_review(bare, filled_draft(rubric))
    assert info.value.kind == "bare_repo"
    draft = tmp_path / "d.toml"
    draft.write_text(filled_draft(rubric).to_toml())
    assert main(["review", "submit", str(bare), "--from", str(draft)]) == 2
    err = capsys.readouterr().err
    assert "bare repository" in err and "git clone" in err
    assert git.Repo(bare).bare and len(list(git.Repo(bare).iter_commits())) == 1


def test_evidence_pointing_at_missing_files_or_lines_is_flagged(task_repo, tmp_path, capsys, rubric):
    from nkitui.review import Evidence, validate_draft

    root, _ = task_repo
    draft = filled_draft(rubric)
    lines = len((root / "add_nki.py").read_text().splitlines())
    draft.attach_evidence(Evidence("finding", f"NKI-TILE-TINY@add_nki.py:{lines + 40}", "tiny tiles"))
    draft.attach_evidence(Evidence("source", "gone.py:3-4", "was here"))
    draft.attach_evidence(Evidence("source", f"add_nki.py:1-{lines}", "the whole port"))
    draft.attach_evidence(Evidence("diff", "abc123..def456:add_nki.py:900", "an old revision"))
    draft.attach_evidence(Evidence("finding", "NUM-ZEROS-PASS", "zeros pass"))
    problems = validate_draft(draft, rubric, root, "add", display="d.toml")
    assert not [p for p in problems if p.severity == "error"]
    flagged = {p.field: p.message for p in problems if p.severity == "warning"}
    assert set(flagged) == {"evidence[0].ref", "evidence[1].ref"}
    assert f"line {lines + 40} is not in add_nki.py ({lines} lines)" in flagged["evidence[0].ref"]
    assert "'gone.py' is not a file of the task" in flagged["evidence[1].ref"]


def test_template_lists_every_evidence_kind_with_a_real_rule_id(rubric):
    from nkitui.analysis import all_rule_specs
    from nkitui.review import render_template
    from nkitui.review.record import EVIDENCE_KINDS

    text = render_template(rubric, "add")
    kinds_line = next(line for line in text.splitlines() if line.startswith("# Evidence links: kind = "))
    assert all(kind in kinds_line for kind in EVIDENCE_KINDS)
    example = re.search(r'#   ref = "([A-Z0-9-]+)@', text)
    assert example and example.group(1) in {spec.id for spec in all_rule_specs()}


def test_a_file_given_for_a_folder_is_named_as_a_file(task_repo, capsys):
    root, _ = task_repo
    manifest = root / "task.toml"
    assert main(["history", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and f"(here: {root})" in err
    assert main(["export", str(manifest)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err

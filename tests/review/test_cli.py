"""The headless commands: review template/validate/submit, history, export."""

from __future__ import annotations

import csv
import io
import json
import re

from nkitui.cli import main
from tests.helpers.review import write_run, write_task


def _fill(template: str, score: int = 4, verdict: str = "accept") -> str:
    text = re.sub(r'^score = ""$', f"score = {score}", template, flags=re.M)
    return text.replace('verdict = ""', f'verdict = "{verdict}"')


def test_template_fill_validate_submit_history_export(task_repo, tmp_path, capsys):
    root, repo = task_repo
    assert main(["review", "template", str(root)]) == 0
    template = capsys.readouterr().out
    assert 'kind = "nkitui-review-draft"' in template and "[scores.numerical_correctness]" in template

    draft = tmp_path / "draft.toml"
    draft.write_text(template)
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 2
    err = capsys.readouterr().err
    assert "scores.migration_fidelity.score" in err and "no verdict" in err

    draft.write_text(_fill(template))
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 0
    assert "ready to submit" in capsys.readouterr().out

    run = write_run(tmp_path / "run.json", "20261130T132500Z-3fa9c1")
    assert main(["review", "submit", str(root), "--from", str(draft), "--auditor", "Dana", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("committed ") and "reviews/dana/" in out and "1 run result" in out
    assert repo.head.commit.message.startswith("review(add): accept by dana")

    draft.write_text(_fill(template, score=2, verdict="revise"))
    assert main(["review", "submit", str(root), "--from", str(draft), "--json"]) == 0
    submitted = json.loads(capsys.readouterr().out)
    assert submitted["commit"] == repo.head.commit.hexsha and submitted["review"]["auditor"] == "alice-auditor"

    assert main(["history", str(root)]) == 0
    text = capsys.readouterr().out
    assert text.index("alice-auditor  revise") < text.index("dana  accept")
    assert "migration_fidelity=2" in text and "OUTDATED" not in text

    (root / "add_nki.py").write_text((root / "add_nki.py").read_text() + "# edited\n")
    assert main(["history", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["auditor"] for r in data["reviews"]] == ["alice-auditor", "dana"]
    assert all(r["outdated"] for r in data["reviews"])
    assert data["reviews"][0]["changed_files"] == [{"file": "add_nki.py", "change": "modified"}]

    assert main(["history", str(root), "--diff", data["reviews"][1]["id"], data["reviews"][0]["id"]]) == 0
    assert "Migration fidelity: 4 -> 2 (-2)" in capsys.readouterr().out

    assert main(["history", str(root), "--blind", "--auditor", "eve"]) == 0
    blind = capsys.readouterr().out
    assert "(hidden)" in blind and "accept" not in blind and "blind mode" in blind

    assert main(["export", str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["auditor"] for r in rows] == ["dana", "alice-auditor"]
    assert rows[0]["migration_fidelity.score"] == "4" and rows[0]["runs"] == "20261130T132500Z-3fa9c1"
    assert rows[0]["outdated"] == "true" and rows[0]["weighted_score"] == "0.7500"

    out_file = tmp_path / "out" / "reviews.jsonl"
    assert main(["export", str(tmp_path), "--out", str(out_file)]) == 0
    lines = out_file.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["verdict"] == "revise"
    assert "wrote 2 review(s)" in capsys.readouterr().err

    assert main(["history", str(tmp_path), "--agreement"]) == 0
    assert "Migration fidelity [ordinal]" in capsys.readouterr().out


def test_corrupt_review_is_reported_and_skipped_by_history_and_export(task_repo, tmp_path, capsys):
    root, _ = task_repo
    bad = root / "reviews" / "mallory" / "20261130T000000Z-deadbeef.toml"
    bad.parent.mkdir(parents=True)
    bad.write_text('schema = 1\nkind = "nkitui-review"\nid = [\n')
    assert main(["history", str(root)]) == 0
    captured = capsys.readouterr()
    assert "no reviews of add yet" in captured.out
    assert "reviews/mallory/20261130T000000Z-deadbeef.toml" in captured.err and "skipped a corrupt review file" in captured.err
    assert main(["export", str(tmp_path), "--format", "jsonl"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "skipped" in captured.err


def test_refusals_exit_2_with_the_way_out(tmp_path, capsys):
    root = write_task(tmp_path / "add")  # not a git repository
    assert main(["review", "template", str(root), "--out", str(tmp_path / "d.toml")]) == 0
    capsys.readouterr()
    draft = tmp_path / "d.toml"
    draft.write_text(_fill(draft.read_text()))
    assert main(["review", "submit", str(root), "--from", str(draft)]) == 2
    err = capsys.readouterr().err
    assert "not inside a git repository" in err and "git -C" in err and "nothing was written" in err

    assert main(["review", "template", str(root), "--out", str(draft)]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err
    assert main(["review", "submit", str(root), "--from", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read the draft" in capsys.readouterr().err
    assert main(["review", "submit", str(root), "--from", str(draft), "--run", "not a run id!"]) == 2
    assert "neither a file nor a run id" in capsys.readouterr().err
    assert main(["history", str(tmp_path / "nope")]) == 2
    assert main(["export", str(tmp_path / "nope")]) == 2
    (root / "task.toml").write_text("id = 3\n")
    assert main(["review", "template", str(root)]) == 2
    assert "task.toml" in capsys.readouterr().err


def test_template_can_resume_the_autosaved_draft(task_repo, capsys, rubric):
    from nkitui.review import DraftStore

    root, _ = task_repo
    from tests.helpers.review import filled_draft

    draft = filled_draft(rubric, score=3)
    draft.summary = "resumed from the workstation"
    DraftStore().save(root, draft)
    assert main(["review", "template", str(root), "--saved"]) == 0
    text = capsys.readouterr().out
    assert "resumed from the workstation" in text and "score = 3" in text

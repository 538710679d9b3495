"""The lab's table: latest verdict for the current commit, findings, latency and current review
scores per criterion, one row per task, as CSV for a spreadsheet and as JSON lines."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from nkitui.batch import LocalExecutor, start_batch
from nkitui.batch.aggregate import aggregate, write_csv, write_jsonl
from nkitui.review import Draft, load_builtin_rubric, submit_review
from nkitui.task import load_task
from tests.batch.conftest import GIT_ENV, git_commit_all, quick_options


@pytest.fixture(autouse=True)
def git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)


def _review(task_dir: Path, auditor: str, score: int, verdict: str = "accept") -> None:
    rubric = load_builtin_rubric("nki-port-audit")
    draft = Draft.new(load_task(task_dir).id, rubric)
    for c in rubric.criteria:
        draft.set_score(c.id, score, f"{c.title}: because")
    draft.verdict = verdict
    draft.summary = "checked"
    submit_review(task_dir, draft, auditor=auditor)


def _csv_rows(table) -> list[dict[str, str]]:
    buffer = io.StringIO()
    write_csv(table, buffer)
    return list(csv.DictReader(io.StringIO(buffer.getvalue())))


def test_the_table_joins_verdicts_findings_latency_and_current_review_scores(mixed_tasks: Path):
    good = mixed_tasks / "good"
    _review(good, "bob", 1, "reject")  # outdated below: the kernel changes after it
    kernel = good / "add_nki.py"
    kernel.write_text(kernel.read_text() + "\n# second version\n")
    git_commit_all(good, "second version")
    start_batch(mixed_tasks, options=quick_options(), executor=LocalExecutor(2)).wait()
    _review(good, "alice", 4)  # these review commits must not make the run stale
    _review(good, "carol", 5)
    table = aggregate(mixed_tasks)
    rows = {r["key"]: r for r in table.rows}
    assert [r["key"] for r in table.rows] == ["broken", "discovered", "good", "group/wrong", "loose"]
    g = rows["good"]
    assert g["status"] == "passed" and g["run_id"] and g["checks_passed"] == g["checks_total"] > 0
    assert g["latency_kind"] == "estimated" and g["latency_us"] > 0
    assert g["reviews_current"] == 2 and g["reviews_outdated"] == 1 and g["auditors"] == ["alice", "carol"]
    assert g["scores"]["migration_fidelity"]["value"] == 4.5 and g["scores"]["migration_fidelity"]["n"] == 2
    assert g["review_verdicts"] == {"accept": 2}
    assert rows["group/wrong"]["status"] == "failed" and rows["group/wrong"]["failed_checks"] == ["output:out"]
    assert rows["broken"]["status"] == "invalid" and "inputs[0].shape" in rows["broken"]["note"]
    assert rows["loose"]["commit"] is None and rows["loose"]["status"] == "passed"
    assert table.criteria[:1] == ["migration_fidelity"]
    flat = {r["key"]: r for r in _csv_rows(table)}
    assert flat["good"]["migration_fidelity"] == "4.5" and flat["good"]["migration_fidelity.n"] == "2"
    assert flat["good"]["findings_high"] == "0" and flat["good"]["status"] == "passed"
    assert flat["broken"]["migration_fidelity"] == "" and flat["broken"]["status"] == "invalid"
    buffer = io.StringIO()
    write_jsonl(table, buffer)
    assert [json.loads(line)["key"] for line in buffer.getvalue().splitlines()] == list(rows)


def test_a_changed_task_has_no_verdict_for_its_current_commit(mixed_tasks: Path):
    start_batch(mixed_tasks, options=quick_options(), executor=LocalExecutor(2)).wait()
    kernel = mixed_tasks / "good" / "add_nki.py"
    kernel.write_text(kernel.read_text().replace("nl.add", "nl.subtract"))
    git_commit_all(mixed_tasks / "good", "break it")
    row = next(r for r in aggregate(mixed_tasks).rows if r["key"] == "good")
    assert row["status"] == "not run" and row["run_id"] is None and "no run for the current commit" in row["note"]


def test_text_a_spreadsheet_would_run_as_a_formula_is_quoted(tmp_path: Path):
    from tests.batch.conftest import add_task
    from tests.helpers.add_task import add_manifest

    manifest = add_manifest(task_id="evil", cuda=False).replace('title = "vector add"', 'title = "=HYPERLINK(1)"')
    add_task(tmp_path / "evil", manifest=manifest)
    row = _csv_rows(aggregate(tmp_path))[0]
    assert row["title"] == "'=HYPERLINK(1)"

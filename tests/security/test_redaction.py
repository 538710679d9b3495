"""Known secret shapes never reach a stored log, a run result, or a review commit that cites the run."""

from __future__ import annotations

import json
import subprocess

import pytest

from nkitui.common.redact import LineRedactor, redact_obj, redact_text
from nkitui.evaluate.run import EvaluationRequest, start_evaluation
from nkitui.executor.events import LogEvent

from .conftest import git_commit_all, wrong_task

AWS_ID = "AKIA" + "QWERTYUIOPASDFGH"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
GH = "ghp_" + "A1b2C3d4" * 4 + "WxYz"
KEY_LINES = ["-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2g",
             "QyNTUxOQAAACBx0vqvQHr5uq5Vv0ZqJ8bWc3ehxBn1dWfHfRtYhFdHZgAAAJg", "-----END OPENSSH PRIVATE KEY-----"]
SHAPES = {
    "aws-access-key-id": f"id {AWS_ID} in use",
    "aws-secret": f"aws_secret_access_key = {AWS_SECRET}",
    "github-token": f"GITHUB_TOKEN={GH}",
    "gitlab-token": "glpat-" + "x1Y2z3" * 4,
    "slack-token": "xoxb-123456789012-abcdefABCDEF",
    "authorization": "Authorization: Bearer " + "tok3nTOK3N" * 3,
    "secret": 'db_password: "S3cr3t-Pa55w0rd-long"',
}


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_each_known_shape_is_redacted(kind):
    text = SHAPES[kind]
    out = redact_text(text)
    assert f"[REDACTED:{kind}]" in out
    secret_part = {"aws-access-key-id": AWS_ID, "aws-secret": AWS_SECRET, "github-token": GH}.get(kind)
    if secret_part:
        assert secret_part not in out


@pytest.mark.parametrize("line", [
    "max abs error 1.19e-07 at (3, 17); 0 mismatches of 8192",
    "tokens=128 max_tokens: 4096 token 5",
    "secret sauce: tile by 128 partitions",
    "AKIAshort is not a key",
    "sha256 3f2a8c1e9b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f",
    "[stdout] partition dim 256 exceeds 128 at softmax.py:31",
])
def test_ordinary_kernel_output_is_left_alone(line):
    assert redact_text(line) == line


def test_private_key_blocks_are_redacted_across_lines():
    r = LineRedactor()
    out = [r.line(line) for line in ["before", *KEY_LINES, "after"]]
    assert out[0] == "before" and out[-1] == "after"
    assert all(line == "[REDACTED:private-key]" for line in out[1:-1])
    assert redact_obj({"log": ["x", *KEY_LINES]})["log"][1:] == ["[REDACTED:private-key]"] * 4
    assert "b3Blbn" not in json.dumps(redact_obj({"text": "\n".join(KEY_LINES)}))


def test_a_kernel_printing_secrets_stores_and_commits_none(tmp_path, record_property):
    record_property("protection", "redaction:logs-results-reviews")
    prints = "\n".join(f"print({text!r})" for text in [*SHAPES.values(), *KEY_LINES, "CWD-marker"])
    repo = tmp_path / "repo"
    task = wrong_task(repo, prelude=prints)
    git_commit_all(repo)
    handle = start_evaluation(EvaluationRequest.of(task, static=False, trials=False, precision=False, goldens=False,
                                                timeout_s=120, memory_mb=2048, store=True))
    events = list(handle.events())
    live = "\n".join(e.text for e in events if isinstance(e, LogEvent))
    result = handle.result
    assert "CWD-marker" in live, "the kernel's prints are in the log"
    from nkitui.evaluate.run.store import RunStore

    stored = RunStore().path_for(result.task_id, result.run_id).read_text()
    for text in (live, stored, result.to_json()):
        for secret in (AWS_ID, AWS_SECRET, GH, KEY_LINES[1], KEY_LINES[2], "S3cr3t-Pa55w0rd-long"):
            assert secret not in text
    assert "[REDACTED:aws-access-key-id]" in stored

    # a review citing the run commits the (redacted) run beside it
    from nkitui.review import load_builtin_rubric
    from nkitui.review.submit import submit_review
    from tests.review.conftest import filled_draft

    draft = filled_draft(load_builtin_rubric("nki-port-audit"), task_id=result.task_id)
    draft.runs = [result.run_id]
    subprocess.run(["git", "config", "user.name", "T"], cwd=repo, check=True)
    subprocess.run(["git", "config", "user.email", "t@example.com"], cwd=repo, check=True)
    submitted = submit_review(task, draft, auditor="alice")
    committed = subprocess.run(["git", "show", submitted.commit], cwd=repo, capture_output=True, text=True,
                               check=True).stdout
    assert f"reviews/runs/{result.run_id}.json" in committed
    for secret in (AWS_ID, AWS_SECRET, GH, KEY_LINES[1]):
        assert secret not in committed


def test_a_run_file_passed_to_a_review_is_redacted_before_it_is_committed(tmp_path):
    from nkitui.review.runs import RunResult

    run = RunResult("20261130T120000Z-abc123", {"run_id": "20261130T120000Z-abc123", "log_excerpt": [*KEY_LINES],
                                                "notes": [f"found {AWS_ID}"]}, "test")
    text = run.canonical_text()
    assert AWS_ID not in text and KEY_LINES[1] not in text and "[REDACTED:private-key]" in text

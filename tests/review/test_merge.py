"""Two auditors reviewing the same task in two clones: their commits merge without conflicts."""

from __future__ import annotations

import json

import git

from nkitui.review import Evidence, submit_review, task_history
from tests.helpers.review import filled_draft, init_repo, run_result, set_identity, write_task

RUN = "20261130T132500Z-3fa9c1"


def _clone(origin, path, name, email) -> git.Repo:
    repo = git.Repo.clone_from(str(origin), str(path))
    set_identity(repo, name, email)
    return repo


def test_two_clones_merge_without_conflicts(tmp_path, rubric):
    seed = write_task(tmp_path / "seed")
    init_repo(seed)
    origin = tmp_path / "origin.git"
    git.Repo(seed).clone(str(origin), bare=True)
    alice = _clone(origin, tmp_path / "alice", "Alice", "alice@example.com")
    bob = _clone(origin, tmp_path / "bob", "Bob", "bob@example.com")
    a_root, b_root = tmp_path / "alice", tmp_path / "bob"

    # the same run, handed to each auditor as differently formatted JSON
    (tmp_path / "run-a.json").write_text(json.dumps(run_result(RUN), indent=4))
    (tmp_path / "run-b.json").write_text(json.dumps(run_result(RUN), separators=(",", ":"), sort_keys=False))

    def review(root, score, verdict, run_file):
        draft = filled_draft(rubric, score=score, verdict=verdict)
        draft.attach_evidence(Evidence("run", RUN, "passes", "numerical_correctness"))
        draft.add_line_comment("add_nki.py", 8, 8, f"{verdict}: store of the sum")
        return submit_review(root, draft, run_files=[run_file])

    a1 = review(a_root, 4, "accept", tmp_path / "run-a.json")
    a2 = review(a_root, 5, "accept", tmp_path / "run-a.json")
    b1 = review(b_root, 2, "revise", tmp_path / "run-b.json")
    assert (a_root / f"reviews/runs/{RUN}.json").read_bytes() == (b_root / f"reviews/runs/{RUN}.json").read_bytes()

    alice.git.push("origin", "main")
    # Bob integrates Alice's work with a real merge (not a fast-forward: both sides have commits)
    bob.git.pull("--no-rebase", "--no-edit", "origin", "main")
    merge = bob.head.commit
    assert len(merge.parents) == 2
    assert not (b_root / ".git" / "MERGE_HEAD").exists()
    assert bob.git.status("--porcelain") == ""
    assert bob.git.diff("--name-only", "--diff-filter=U") == ""
    bob.git.push("origin", "main")
    alice.git.pull("--no-rebase", "--no-edit", "origin", "main")
    assert alice.head.commit == merge  # fast-forward: both clones agree

    for root in (a_root, b_root):
        history = task_history(root)
        assert not history.problems
        assert [e.record.id for e in history.entries] == [r.record.id for r in sorted(
            [a1, a2, b1], key=lambda r: (r.record.submitted_at, r.record.id), reverse=True)]
        assert {e.record.auditor for e in history.entries} == {"alice", "bob"}
        assert not any(e.outdated for e in history.entries)
        for r in (a1, a2, b1):
            text = (root / r.record.relpath).read_text()
            assert "<<<<<<<" not in text and text == r.record_path.read_text()
    # the merged tree holds one copy of the shared run result
    tree_files = alice.git.ls_files("reviews").splitlines()
    assert tree_files.count(f"reviews/runs/{RUN}.json") == 1
    assert len([f for f in tree_files if f.endswith(".toml")]) == 3

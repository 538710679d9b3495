"""Submitting a review into a real git repository: what is committed, by whom, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path
import tomllib

import git
import pytest

from nkitui.review import DraftInvalid, Evidence, SubmitRefused, load_record, submit_review
from nkitui.review.gitstore import make_initial_commit
from tests.helpers.review import filled_draft, init_repo, set_identity, write_run, write_task


def _index_entries(repo: git.Repo) -> dict[str, str]:
    return {line.split("\t", 1)[1]: line.split("\t", 1)[0] for line in repo.git.ls_files("-s").splitlines()}


def test_commit_holds_only_the_review_files_and_leaves_other_changes_alone(task_repo, rubric, tmp_path):
    root, repo = task_repo
    # unrelated work in progress: a staged new file, a staged edit, an unstaged edit, an untracked file
    (root / "notes.txt").write_text("staged new file\n")
    (root / "add.cu").write_text("// staged edit\n" + (root / "add.cu").read_text())
    repo.git.add("notes.txt", "add.cu")
    (root / "add.cu").write_text((root / "add.cu").read_text() + "// and an unstaged edit on top\n")
    (root / "reference.py").write_text("def add(a, b):\n    return b + a  # unstaged\n")
    (root / "scratch.log").write_text("untracked\n")
    status_before = repo.git.status("--porcelain")
    staged_before = repo.git.diff("--cached")
    unstaged_before = repo.git.diff()
    index_before = _index_entries(repo)
    head_before = repo.head.commit

    run_file = write_run(tmp_path / "result.json", "20261130T132500Z-3fa9c1")
    draft = filled_draft(rubric, verdict="revise")
    draft.add_line_comment("add_nki.py", 8, 9, "one load per tile: fine for 128x64", "performance_quality")
    draft.attach_evidence(Evidence("run", "20261130T132500Z-3fa9c1", "all checks pass on seeds 0-2", "numerical_correctness"))
    result = submit_review(root, draft, run_files=[run_file])

    commit = repo.head.commit
    assert commit.hexsha == result.commit and commit.parents == (head_before,)
    assert repo.active_branch.name == "main"
    changed = sorted(commit.stats.files)
    rel = result.record.relpath
    assert changed == sorted([rel, rel[:-5] + ".md", "reviews/runs/20261130T132500Z-3fa9c1.json"])
    assert rel.startswith("reviews/alice-auditor/") and result.record_path == root / rel

    # the auditor's other work is exactly as it was, staged and unstaged
    assert repo.git.diff("--cached") == staged_before
    assert repo.git.diff() == unstaged_before
    index_after = _index_entries(repo)
    for path, entry in index_before.items():
        assert index_after[path] == entry, path
    assert set(index_after) - set(index_before) == set(changed)  # review files are tracked, not "deleted"
    assert repo.git.status("--porcelain") == status_before

    # what the record says
    record = load_record(result.record_path)
    assert record == result.record
    assert record.task.commit == head_before.hexsha and record.task.id == "add"
    assert set(record.task.files) == {"task.toml", "add_nki.py", "add.cu", "reference.py"}
    assert sorted(record.task.dirty) == ["add.cu", "reference.py"]  # judged with uncommitted edits
    assert any("uncommitted" in w.message for w in result.warnings)
    assert record.runs == ["20261130T132500Z-3fa9c1"]
    assert record.rubric_id == "nki-port-audit" and record.rubric_version == rubric.version
    assert record.tool_version.startswith("nkitui ")
    run_copy = json.loads((root / "reviews/runs/20261130T132500Z-3fa9c1.json").read_text())
    assert run_copy["run_id"] == "20261130T132500Z-3fa9c1"
    assert "# Review of `add` — revise" in result.markdown_path.read_text()
    assert commit.message.startswith("review(add): revise by alice-auditor [nki-port-audit v")


def test_author_from_git_config_or_auditor_flag(task_repo, rubric):
    root, repo = task_repo
    first = submit_review(root, filled_draft(rubric))
    assert (repo.head.commit.author.name, repo.head.commit.author.email) == ("Alice Auditor", "alice@example.com")
    assert first.record.auditor == "alice-auditor"

    second = submit_review(root, filled_draft(rubric), auditor="Bob")
    c = repo.head.commit
    assert second.record.auditor == "bob" and second.record_path.parent.name == "bob"
    assert (c.author.name, c.author.email) == ("Bob", "bob@nkitui.invalid")
    assert (c.committer.name, c.committer.email) == ("Alice Auditor", "alice@example.com")

    draft = filled_draft(rubric)
    draft.auditor = "carol"  # a draft may name its auditor; --auditor wins over it
    assert submit_review(root, draft).record.auditor == "carol"
    assert submit_review(root, draft, auditor="dave").record.auditor == "dave"


def test_a_git_identity_without_latin_letters_is_refused_not_written_to_reviews_root(task_repo, rubric):
    root, repo = task_repo
    set_identity(repo, "张伟", "张@例子.中国")
    head = repo.head.commit.hexsha
    with pytest.raises(SubmitRefused) as info:
        submit_review(root, filled_draft(rubric))
    assert info.value.kind == "bad_auditor" and "--auditor" in info.value.problems[0].fix
    assert repo.head.commit.hexsha == head and not (root / "reviews").exists()
    assert submit_review(root, filled_draft(rubric), auditor="zhang-wei").record_path.parent.name == "zhang-wei"


def test_without_git_identity_the_os_user_is_the_auditor(tmp_path, rubric, monkeypatch):
    root = write_task(tmp_path / "add")
    repo = git.Repo.init(root, initial_branch="main")
    repo.git.add("-A")
    repo.git.commit("-m", "task", env={"GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@y",
                                       "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@y"})
    monkeypatch.setenv("USER", "Quinn")
    monkeypatch.setenv("LOGNAME", "Quinn")
    result = submit_review(root, filled_draft(rubric))
    assert result.record.auditor == "quinn"
    assert repo.head.commit.author.email == "quinn@nkitui.invalid"


def test_task_in_a_subfolder_of_a_bigger_repository(tmp_path, rubric):
    repo_root = tmp_path / "tasks-repo"
    root = write_task(repo_root / "kernels" / "add")
    write_task(repo_root / "kernels" / "other")
    repo = init_repo(repo_root)
    result = submit_review(root, filled_draft(rubric))
    assert result.record.task.path == "kernels/add"
    assert sorted(repo.head.commit.stats.files) == sorted(
        [f"kernels/add/{result.record.relpath}", f"kernels/add/{result.record.relpath[:-5]}.md"])


def _refusal(root, draft, **kw) -> SubmitRefused:
    with pytest.raises(SubmitRefused) as info:
        submit_review(root, draft, **kw)
    assert info.value.problems and all(p.fix for p in info.value.problems)
    return info.value


def test_refuses_a_folder_outside_git(tmp_path, rubric):
    root = write_task(tmp_path / "add")
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "not_a_repo" and "git -C" in exc.problems[0].fix and "init" in exc.problems[0].fix
    assert not (root / "reviews").exists()


def test_refuses_a_bare_repository(tmp_path, rubric):
    bare = tmp_path / "bare.git"
    git.Repo.init(bare, bare=True)
    write_task(bare / "add")  # a task folder inside the bare repository's directory
    exc = _refusal(bare / "add", filled_draft(rubric))
    assert exc.kind == "bare_repo" and "git clone" in exc.problems[0].fix


def test_no_commits_yet_refuses_then_offers_the_first_commit(tmp_path, rubric):
    root = write_task(tmp_path / "add")
    repo = init_repo(root, commit=False)
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "no_commits" and "--initial-commit" in exc.problems[0].fix
    assert not (root / "reviews").exists()

    result = submit_review(root, filled_draft(rubric), initial_commit=True)
    first, review = repo.head.commit.parents[0], repo.head.commit
    assert set(first.stats.files) == {"task.toml", "add_nki.py", "add.cu", "reference.py"}
    assert result.record.task.commit == first.hexsha and review.hexsha == result.commit
    with pytest.raises(SubmitRefused) as info:
        make_initial_commit(root)
    assert info.value.kind == "has_commits"


def test_the_first_commit_holds_only_the_task_folder(tmp_path, rubric):
    repo_root = tmp_path / "repo"
    root = write_task(repo_root / "tasks" / "add")
    repo = init_repo(repo_root, commit=False)
    (repo_root / "notes.txt").write_text("someone else's staged work\n")
    repo.git.add("notes.txt")
    submit_review(root, filled_draft(rubric), initial_commit=True)
    first = repo.head.commit.parents[0]
    assert all(path.startswith("tasks/add/") for path in first.stats.files), list(first.stats.files)
    assert repo.git.status("--porcelain", "--", "notes.txt") == "A  notes.txt"  # still staged, not committed


def test_the_first_commit_runs_no_hooks_and_a_git_failure_is_a_refusal(tmp_path, rubric):
    root = write_task(tmp_path / "add")
    repo = init_repo(root, commit=False)
    hook = Path(repo.git_dir) / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'lint failed' >&2\nexit 1\n")
    hook.chmod(0o755)
    lock = Path(repo.git_dir) / "index.lock"
    lock.write_text("")
    with pytest.raises(SubmitRefused) as info:
        submit_review(root, filled_draft(rubric), initial_commit=True)
    assert info.value.kind == "git_failed" and "index.lock" in info.value.problems[0].message
    assert "git commit" in info.value.problems[0].fix and not repo.head.is_valid()
    lock.unlink()
    assert repo.git.diff("--cached", "--name-only") == ""  # nothing left staged by the failed attempt
    result = submit_review(root, filled_draft(rubric), initial_commit=True)  # the failing hook does not run
    assert result.commit == repo.head.commit.hexsha and len(list(repo.iter_commits())) == 2


def test_review_files_are_readable_by_others_like_checked_out_files(task_repo, rubric, tmp_path):
    root, _ = task_repo
    result = submit_review(root, filled_draft(rubric), run_files=[write_run(tmp_path / "r.json", "20261130T132500Z-3fa9c1")])
    assert result.run_paths
    for path in (result.record_path, result.markdown_path, *result.run_paths):
        assert path.stat().st_mode & 0o777 == 0o644, path


def test_refuses_a_detached_head(task_repo, rubric):
    root, repo = task_repo
    repo.git.checkout("--detach")
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "detached_head" and "git switch" in exc.problems[0].fix


def test_refuses_during_a_merge(task_repo, rubric):
    root, repo = task_repo
    repo.git.checkout("-b", "other")
    (root / "add.cu").write_text("// other side\n")
    repo.git.commit("-am", "other")
    repo.git.checkout("main")
    (root / "add.cu").write_text("// main side\n")
    repo.git.commit("-am", "main")
    with pytest.raises(git.GitCommandError):
        repo.git.merge("other")  # conflict: the merge stays in progress
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "operation_in_progress" and "git merge --abort" in exc.problems[0].fix
    assert not (root / "reviews").exists()


def test_refuses_during_a_rebase(task_repo, rubric):
    root, repo = task_repo
    repo.git.checkout("-b", "topic")
    (root / "add.cu").write_text("// topic\n")
    repo.git.commit("-am", "topic")
    repo.git.checkout("main")
    (root / "add.cu").write_text("// main\n")
    repo.git.commit("-am", "main")
    repo.git.checkout("topic")
    with pytest.raises(git.GitCommandError):
        repo.git.rebase("main")
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "operation_in_progress" and "git rebase --abort" in exc.problems[0].fix


def test_refuses_a_gitignored_review_path(task_repo, rubric):
    root, repo = task_repo
    (root / ".gitignore").write_text("*.log\nreviews/\n")
    repo.git.add(".gitignore")
    repo.git.commit("-m", "ignore")
    head = repo.head.commit.hexsha
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "ignored_path"
    assert ".gitignore:2" in exc.problems[0].fix and "'reviews/'" in exc.problems[0].fix
    assert repo.head.commit.hexsha == head and not (root / "reviews").exists()


def test_ignored_files_inside_reviews_and_the_advised_fix(task_repo, rubric):
    root, repo = task_repo
    (root / ".gitignore").write_text("*.md\n")
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "ignored_path" and "!reviews/**" in exc.problems[0].fix
    with (root / ".gitignore").open("a") as fh:  # follow the advice
        fh.write("!reviews/**\n")
    result = submit_review(root, filled_draft(rubric))
    assert result.markdown_path.relative_to(root).as_posix() in repo.head.commit.stats.files


def test_refuses_while_another_git_process_holds_the_index(task_repo, rubric):
    root, repo = task_repo
    lock = root / ".git" / "index.lock"
    lock.write_text("")
    exc = _refusal(root, filled_draft(rubric))
    assert exc.kind == "index_locked" and str(lock) in exc.problems[0].fix


def test_a_draft_missing_required_criteria_is_refused_with_each_named(task_repo, rubric):
    root, repo = task_repo
    head = repo.head.commit.hexsha
    draft = filled_draft(rubric)
    draft.set_score("numerical_correctness", None)
    draft.set_score("task_appropriateness", None)
    draft.set_score("performance_quality", 9)
    draft.verdict = "lgtm"
    draft.add_line_comment("add_nki.py", 500, 501, "past the end")
    draft.add_line_comment("missing.py", 1, 1, "no such file")
    draft.add_line_comment("../outside.py", 1, 1, "escapes the task")
    draft.runs.append("../../etc/passwd")  # a UI bug must not write outside reviews/runs/
    with pytest.raises(DraftInvalid) as info:
        submit_review(root, draft, display="draft.toml")
    fields = {p.field for p in info.value.problems}
    assert {"scores.numerical_correctness.score", "scores.task_appropriateness.score", "scores.performance_quality.score",
            "verdict", "comments[0].lines", "comments[1].file", "comments[2].file", "runs"} <= fields
    assert all(p.file == "draft.toml" and p.fix for p in info.value.problems)
    assert any("1..5" in p.fix for p in info.value.problems if p.field.startswith("scores."))
    assert repo.head.commit.hexsha == head and not (root / "reviews").exists()


def test_run_results_are_resolved_and_checked(task_repo, rubric, tmp_path):
    root, repo = task_repo
    draft = filled_draft(rubric)
    draft.cite_run("20261130T000000Z-aaaaaa")
    exc = _refusal(root, draft)
    assert exc.kind == "run_missing" and "--run" in exc.problems[0].fix

    other = write_run(tmp_path / "other.json", "20261130T000000Z-aaaaaa", task_id="softmax")
    exc = _refusal(root, draft, run_files=[other])
    assert "run of task 'softmax'" in exc.problems[0].message

    good = write_run(tmp_path / "good.json", "20261130T000000Z-aaaaaa")
    first = submit_review(root, draft, run_files=[good])
    # cited again later: found in reviews/runs/, identical bytes, nothing new committed for it
    again = submit_review(root, draft)
    assert again.record.runs == ["20261130T000000Z-aaaaaa"]
    assert "reviews/runs/20261130T000000Z-aaaaaa.json" not in repo.head.commit.stats.files
    assert first.run_paths == again.run_paths

    changed = write_run(tmp_path / "changed.json", "20261130T000000Z-aaaaaa", checks={"out": "fail"})
    exc = _refusal(root, draft, run_files=[changed])
    assert exc.kind == "run_conflict" and "immutable" in exc.problems[0].fix

    (tmp_path / "bad.json").write_text("{not json")
    exc = _refusal(root, filled_draft(rubric), run_files=[tmp_path / "bad.json"])
    assert exc.kind == "run_invalid"


def test_run_lookup_hook_finds_runs_in_the_executor_store(task_repo, rubric):
    root, repo = task_repo
    from tests.helpers.review import run_result

    stored = {"20261130T000000Z-bbbbbb": run_result("20261130T000000Z-bbbbbb")}
    draft = filled_draft(rubric)
    draft.cite_run("20261130T000000Z-bbbbbb")
    result = submit_review(root, draft, run_lookup=stored.get)
    assert "reviews/runs/20261130T000000Z-bbbbbb.json" in repo.head.commit.stats.files
    assert json.loads(result.run_paths[0].read_text()) == stored["20261130T000000Z-bbbbbb"]


def test_records_are_append_only_one_file_per_submission(task_repo, rubric):
    root, repo = task_repo
    results = [submit_review(root, filled_draft(rubric, score=s, verdict="revise")) for s in (2, 3, 4)]
    paths = {r.record_path for r in results}
    assert len(paths) == 3
    for r in results:  # every earlier file untouched by later submissions
        assert tomllib.loads(r.record_path.read_text())["scores"]["migration_fidelity"]["score"] == r.record.scores["migration_fidelity"].value
    log = list(repo.iter_commits(paths="reviews"))
    assert len(log) == 3
    for c in log:
        assert all(not p.startswith("reviews/") or c.stats.files[p]["deletions"] == 0 for p in c.stats.files)


def test_identity_change_between_submissions_moves_the_folder(task_repo, rubric):
    root, repo = task_repo
    set_identity(repo, "Erin Example", "erin@example.com")
    assert submit_review(root, filled_draft(rubric)).record.auditor == "erin-example"


def test_cited_runs_are_found_in_the_executors_run_store(task_repo, rubric):
    from nkitui.evaluate.run.result import RunResult
    from nkitui.evaluate.run.store import RunStore

    root, repo = task_repo
    stored = RunResult(run_id="20261130T132500Z-77aa01", task_id="add", status="passed", backend="emulator")
    RunStore().save(stored)  # the XDG data dir of this test
    draft = filled_draft(rubric)
    draft.attach_evidence(Evidence.build("run", run_id=stored.run_id, excerpt="passed", criterion="numerical_correctness"))
    result = submit_review(root, draft)
    assert result.record.runs == [stored.run_id]
    committed = json.loads(repo.git.show(f"HEAD:reviews/runs/{stored.run_id}.json"))
    assert committed == stored.to_dict()

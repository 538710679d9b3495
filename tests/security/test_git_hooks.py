"""Hooks planted in a task repository never run when nkitui uses git (issue #14: a planted
`.git/hooks/reference-transaction` ran on the next `review submit`), and review files are never
written through a link."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import git
import pytest

from nkitui.common import gitsafe
from nkitui.review.errors import SubmitRefused
from nkitui.review.submit import submit_review
from tests.review.conftest import filled_draft, init_repo, write_task

from .conftest import REPO

HOOKS = ("reference-transaction", "pre-commit", "post-commit", "commit-msg", "prepare-commit-msg", "post-index-change",
         "pre-auto-gc", "post-checkout", "post-rewrite", "pre-push")


@pytest.fixture
def rubric():
    from nkitui.review import load_builtin_rubric

    return load_builtin_rubric("nki-port-audit")


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A committed task repository with every hook planted (each would touch a marker file in
    `fired/`), core.fsmonitor set to such a script and core.hooksPath to a second planted folder."""
    home = tmp_path / "home"  # made by the suite's `isolated` fixture (it holds ~/.aws/credentials)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = write_task(tmp_path / "task")
    repo = init_repo(root)
    fired = tmp_path / "fired"
    fired.mkdir()

    def script(folder: Path, name: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(f"#!/bin/sh\ntouch {fired}/{name}-$$\nexit 0\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    for name in HOOKS:
        script(root / ".git" / "hooks", name)
        script(tmp_path / "other-hooks", name)
    fsmonitor = script(tmp_path / "tools", "fsmonitor")
    with repo.config_writer() as cw:
        cw.set_value("core", "fsmonitor", str(fsmonitor))
        cw.set_value("core", "hooksPath", str(tmp_path / "other-hooks"))
    # the hooks do fire for a plain git command: the test can fail
    subprocess.run(["git", "update-ref", "refs/heads/probe", "HEAD"], cwd=root, check=True, capture_output=True)
    assert list(fired.iterdir()), "the planted hooks do not run even for plain git here"
    for marker in fired.iterdir():
        marker.unlink()
    subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "update-ref", "-d",
                    "refs/heads/probe"], cwd=root, check=True, capture_output=True)
    return root, repo, fired


def test_review_submit_runs_no_planted_hook(planted, rubric, record_property):
    record_property("protection", "git:planted-hooks")
    root, repo, fired = planted
    result = submit_review(root, filled_draft(rubric), auditor="alice")
    assert repo.head.commit.hexsha == result.commit
    assert sorted(p.name for p in fired.iterdir()) == [], "a planted hook or fsmonitor ran"


def test_the_cli_and_every_git_reader_run_no_planted_hook(planted, rubric, tmp_path):
    root, repo, fired = planted
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    draft = tmp_path / "draft.toml"
    draft.write_text(filled_draft(rubric).to_toml())
    for args in (["review", "submit", str(root), "--from", str(draft), "--auditor", "bob"], ["history", str(root)],
                 ["check", str(root), "--no-static", "--no-trials", "--no-precision", "--no-store", "--seeds", "1"]):
        proc = subprocess.run([sys.executable, "-m", "nkitui", *args], capture_output=True, text=True, env=env,
                              timeout=300)
        assert proc.returncode in (0, 1), (args, proc.stdout[-1500:], proc.stderr[-1500:])
    from nkitui.app.gitview import diff_revisions, list_revisions  # the workstation's diff pane

    revisions = list_revisions(root)
    diff_revisions(root, revisions[-1].sha, "WORKTREE")
    assert sorted(p.name for p in fired.iterdir()) == [], "a planted hook or fsmonitor ran"


def test_the_hook_settings_outrank_the_repositorys_and_keep_the_users(monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "From Env")
    env = gitsafe.config_env()
    assert env["GIT_CONFIG_COUNT"] == "6" and env["GIT_CONFIG_KEY_1"] == "core.hooksPath"
    assert env["GIT_CONFIG_VALUE_1"] == "/dev/null" and env["GIT_CONFIG_KEY_2"] == "core.fsmonitor"
    assert [env[f"GIT_CONFIG_KEY_{i}"] for i in (3, 4, 5)] == ["commit.gpgSign", "tag.gpgSign", "log.showSignature"]
    assert gitsafe.command_args() == ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                                      "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false",
                                      "-c", "log.showSignature=false"]


@pytest.mark.parametrize("linked", ["reviews", "reviews/alice", "reviews/runs"])
def test_a_reviews_path_that_is_a_link_is_refused(planted, rubric, tmp_path, linked):
    root, repo, fired = planted
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link = root / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    draft = filled_draft(rubric)
    if linked == "reviews/runs":
        run = tmp_path / "run.json"
        from tests.review.conftest import write_run

        write_run(run, "20261130T120000Z-abc123")
        draft.runs = ["20261130T120000Z-abc123"]
        kwargs = {"run_files": [run]}
    else:
        kwargs = {}
    head = repo.head.commit.hexsha
    with pytest.raises(SubmitRefused) as err:
        submit_review(root, draft, auditor="alice", **kwargs)
    assert err.value.kind == "reviews_link"
    assert "is a link" in err.value.problems[0].message and "mkdir" in err.value.problems[0].fix
    assert list(outside.iterdir()) == [] and repo.head.commit.hexsha == head


def test_history_never_reads_through_a_linked_review_file(planted, rubric, tmp_path):
    root, repo, fired = planted
    submit_review(root, filled_draft(rubric), auditor="alice")
    (root / "reviews" / "alice" / "zzz-evil.toml").symlink_to("/dev/zero")
    from nkitui.review.scan import scan_task

    result = scan_task(root)
    assert len(result.reviews) == 1


def test_demo_repositories_are_made_without_hooks(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / ".gitconfig"))
    template = tmp_path / "template"
    (template / "hooks").mkdir(parents=True)
    marker = tmp_path / "fired"
    hook = template / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (tmp_path / ".gitconfig").write_text(f"[init]\n\ttemplateDir = {template}\n[user]\n\tname = T\n\temail = t@x.org\n")
    from nkitui.task.samples import install_samples

    installed = install_samples(tmp_path / "demo")
    assert installed and git.Repo(installed[0].path).head.is_valid()
    assert not marker.exists()


def test_filter_and_diff_drivers_of_the_repository_never_run(planted, rubric, tmp_path):
    # a committed .gitattributes names drivers; the repository's config defines them as programs: git
    # runs clean on status/diff/add of changed files, smudge on checkout, textconv and command on diff
    root, repo, fired = planted
    (root / ".gitattributes").write_text("* filter=evil diff=evil\n")
    with repo.config_writer() as cw:
        for section, var in (('filter "evil"', "clean"), ('filter "evil"', "smudge"), ('filter "evil"', "process"),
                             ('diff "evil"', "textconv"), ('diff "evil"', "command")):
            cw.set_value(section, var, f"sh -c 'touch {fired}/{var}-$$; cat'")
    repo.git.add("--", ".gitattributes")  # plain GitPython: the filters do run here (the test can fail)
    repo.index.commit("attributes", skip_hooks=True)
    for marker in fired.iterdir():
        marker.unlink()
    kernel = next(p for p in root.rglob("*.py") if "reviews" not in p.parts)
    kernel.write_text(kernel.read_text() + "\n# changed\n")  # a changed file: status and diff must read it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    draft = tmp_path / "draft.toml"
    draft.write_text(filled_draft(rubric).to_toml())
    for args in (["review", "submit", str(root), "--from", str(draft), "--auditor", "bob"], ["history", str(root)],
                 ["check", str(root), "--no-static", "--no-trials", "--no-precision", "--no-store", "--seeds", "1"]):
        proc = subprocess.run([sys.executable, "-m", "nkitui", *args], capture_output=True, text=True, env=env,
                              timeout=300)
        assert proc.returncode in (0, 1), (args, proc.stdout[-1500:], proc.stderr[-1500:])
    from nkitui.app.gitview import diff_revisions, list_revisions
    from nkitui.batch.gitstate import read_git_state

    revisions = list_revisions(root)
    diff_revisions(root, revisions[-1].sha, "WORKTREE")
    assert read_git_state(root).dirty is True
    assert sorted(p.name for p in fired.iterdir()) == [], "a filter or diff driver of the repository ran"
    subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True)  # plain git: it does run
    assert list(fired.iterdir()), "the filter driver does not run here at all (the test could not fail)"

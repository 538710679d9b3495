"""Red team: programs a task repository's own configuration names, beyond hooks, fsmonitor and
filter/diff drivers, never run when nkitui commits a review: a signing program
(`commit.gpgSign` + `gpg.program`, `gpg.ssh.program`, `gpg.ssh.defaultKeyCommand`) runs on every
`git commit` and `git commit-tree` of a repository that asks for signed commits."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import REPO
from .test_git_hooks import planted, rubric  # noqa: F401 - fixtures
from tests.review.conftest import filled_draft


def test_a_signing_program_of_the_repository_never_runs_on_review_submit(planted, rubric, tmp_path):  # noqa: F811
    root, repo, fired = planted
    program = tmp_path / "tools" / "sign"
    program.write_text(f"#!/bin/sh\ntouch {fired}/sign-$$\nexit 1\n")
    program.chmod(0o755)
    with repo.config_writer() as cw:
        cw.set_value("commit", "gpgSign", "true")
        cw.set_value("tag", "gpgSign", "true")
        cw.set_value("gpg", "program", str(program))
        cw.set_value('gpg "ssh"', "program", str(program))
        cw.set_value('gpg "ssh"', "defaultKeyCommand", str(program))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    draft = tmp_path / "draft.toml"
    draft.write_text(filled_draft(rubric).to_toml())
    proc = subprocess.run([sys.executable, "-m", "nkitui", "review", "submit", str(root), "--from", str(draft),
                           "--auditor", "bob"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-1500:])
    assert sorted(p.name for p in fired.iterdir()) == [], "the repository's signing program ran"
    # plain git does run it (the test can fail)
    subprocess.run(["git", "commit", "--allow-empty", "-m", "probe"], cwd=root, capture_output=True)
    assert list(fired.iterdir()), "the signing program does not run here at all (the test could not fail)"


def test_a_signing_program_never_runs_on_the_first_commit_nkitui_makes(rubric, tmp_path, monkeypatch):  # noqa: F811
    # `review submit --initial-commit` on a repository without commits runs `git commit` (porcelain),
    # which honours commit.gpgSign where commit-tree does not
    from tests.review.conftest import init_repo, write_task

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = write_task(tmp_path / "task")
    repo = init_repo(root, commit=False)
    fired = tmp_path / "fired"
    fired.mkdir()
    program = tmp_path / "sign"
    program.write_text(f"#!/bin/sh\ntouch {fired}/sign-$$\nexit 1\n")
    program.chmod(0o755)
    with repo.config_writer() as cw:
        cw.set_value("commit", "gpgSign", "true")
        cw.set_value("gpg", "program", str(program))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    draft = tmp_path / "draft.toml"
    draft.write_text(filled_draft(rubric).to_toml())
    proc = subprocess.run([sys.executable, "-m", "nkitui", "review", "submit", str(root), "--from", str(draft),
                           "--auditor", "bob", "--initial-commit"], capture_output=True, text=True, env=env, timeout=300)
    assert sorted(p.name for p in fired.iterdir()) == [], "the repository's signing program ran"
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-1500:])
    subprocess.run(["git", "commit", "--allow-empty", "-m", "probe"], cwd=root, capture_output=True)
    assert list(fired.iterdir()), "the signing program does not run here at all (the test could not fail)"

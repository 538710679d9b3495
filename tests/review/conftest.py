"""Fixtures for the review layer: real task folders in real git repositories, isolated from the
user's git config and XDG state."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from tests.helpers.add_task import ADD_KERNEL, ADD_REFERENCE, add_manifest, write_files

CUDA = "__global__ void add(const float* a, const float* b, float* c, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n"


def write_task(root: Path, rubric: str | None = None) -> Path:
    manifest = add_manifest(header=f'rubric = "{rubric}"' if rubric else "")
    return write_files(root, {"add_nki.py": ADD_KERNEL, "reference.py": ADD_REFERENCE, "add.cu": CUDA,
                              "task.toml": manifest})


def init_repo(root: Path, name: str = "Alice Auditor", email: str = "alice@example.com", commit: bool = True) -> git.Repo:
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", name)
        cw.set_value("user", "email", email)
    if commit:
        repo.git.add("-A")
        repo.git.commit("-m", "task")
    return repo


def set_identity(repo: git.Repo, name: str, email: str) -> None:
    with repo.config_writer() as cw:
        cw.set_value("user", "name", name)
        cw.set_value("user", "email", email)


def run_result(run_id: str, task_id: str = "add", **extra) -> dict:
    return {"schema": 1, "run_id": run_id, "task_id": task_id, "backend": "emulator", "target": "trn2",
            "checks": {"out": "pass"}, "metrics": {"out": {"max_abs": 0.0}}, **extra}


def write_run(path: Path, run_id: str, **extra) -> Path:
    path.write_text(json.dumps(run_result(run_id, **extra)))
    return path


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """No user git config, no user XDG state: every test sees only what it sets up."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".data"))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_DIR",
                "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(Path(tmp_path_factory.getbasetemp()).parent))
    return home


@pytest.fixture
def task_repo(tmp_path) -> tuple[Path, git.Repo]:
    root = write_task(tmp_path / "add")
    return root, init_repo(root)


@pytest.fixture
def rubric():
    from nkitui.review import load_builtin_rubric

    return load_builtin_rubric("nki-port-audit")


def filled_draft(rubric, task_id: str = "add", score=4, verdict: str = "accept"):
    from nkitui.review import Draft

    draft = Draft.new(task_id, rubric)
    for c in rubric.criteria:
        draft.set_score(c.id, score, f"{c.title}: justified")
    draft.verdict = verdict
    draft.summary = "Port is faithful; see comments."
    return draft

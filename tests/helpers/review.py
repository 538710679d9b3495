"""Tasks, repositories, stored runs and drafts for the review tests (and the app and security tests
that review): the add task with its CUDA source, a real git repository with an identity, a stored run
result, a filled draft of a rubric. Plain functions: import them (tests/review/conftest.py re-exports
them for the tests that import them from there)."""

from __future__ import annotations

import json
from pathlib import Path

import git

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


def filled_draft(rubric, task_id: str = "add", score=4, verdict: str = "accept"):
    from nkitui.review import Draft

    draft = Draft.new(task_id, rubric)
    for c in rubric.criteria:
        draft.set_score(c.id, score, f"{c.title}: justified")
    draft.verdict = verdict
    draft.summary = "Port is faithful; see comments."
    return draft

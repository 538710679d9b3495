"""Fixtures for the review layer: real task folders in real git repositories, isolated from the
user's git config and XDG state."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import git
import pytest

KERNEL = textwrap.dedent(
    """\
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out
    """
)
REFERENCE = "def add(a, b):\n    return a + b\n"
CUDA = "__global__ void add(const float* a, const float* b, float* c, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n"
MANIFEST = textwrap.dedent(
    """\
    id = "add"
    title = "vector add"
    target = "trn2"
    {rubric_line}

    [sources]
    nki = "add_nki.py"
    cuda = "add.cu"
    reference = "reference.py::add"

    [kernel]
    entry = "add_nki.py::add_kernel"

    [[inputs]]
    name = "a"
    shape = [128, 64]
    dtype = "float32"

    [[inputs]]
    name = "b"
    shape = [128, 64]
    dtype = "float32"

    [[outputs]]
    name = "out"
    shape = [128, 64]
    dtype = "float32"
    tolerance = {{ kind = "allclose", atol = 1e-5, rtol = 1e-5 }}
    """
)


def write_task(root: Path, rubric: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "add_nki.py").write_text(KERNEL)
    (root / "reference.py").write_text(REFERENCE)
    (root / "add.cu").write_text(CUDA)
    (root / "task.toml").write_text(MANIFEST.format(rubric_line=f'rubric = "{rubric}"' if rubric else ""))
    return root


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

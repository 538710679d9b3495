"""Fixtures for the batch tests: folders of small real tasks (the vector-add task and its broken
variants) in real git repositories, isolated XDG folders, and quick evaluation options."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from nkitui.batch import BatchOptions
from tests.helpers.add_task import ADD_REFERENCE, add_manifest, write_files

KERNEL = """\
import os
import time

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
{prelude}
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.{op}(nl.load(a), nl.load(b)))
    return out
"""

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}


def quick_options(**overrides) -> BatchOptions:
    """Only the phases that decide these tasks' verdicts, one seed, short limits."""
    values = dict(seeds=1, static=False, trials=False, precision=False, memory_mb=2048, timeout_s=60.0)
    values.update(overrides)
    return BatchOptions(**values)


def add_task(root: Path, *, task_id: str | None = None, op: str = "add", prelude: str = "", manifest: str | None = None) -> Path:
    """The vector-add task in `root`: `op` "multiply" makes it wrong, `prelude` runs first in the kernel."""
    body = textwrap.indent(textwrap.dedent(prelude).strip("\n"), "    ") if prelude.strip() else "    pass"
    text = manifest if manifest is not None else add_manifest(task_id=task_id or root.name, cuda=False, tolerance="1e-6")
    return write_files(root, {"add_nki.py": KERNEL.format(prelude=body, op=op), "reference.py": ADD_REFERENCE,
                              "task.toml": text})


def git_commit_all(root: Path, message: str = "task") -> str:
    env = {**os.environ, **GIT_ENV}
    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True, env=env)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=root, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run store, ledger and caches out of the user's folders; no user git config."""
    base = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(var, str(base / var.lower()))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(base / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("NKITUI_FAKE_NEURON_DEVICE", raising=False)
    return base


@pytest.fixture
def mixed_tasks(tmp_path: Path) -> Path:
    """A folder of five tasks, each its own git repository: one passes, one computes the wrong thing,
    one has a broken manifest, one is a port without task.toml (discovered, cannot run), and one sits
    outside git (plain folder) and passes."""
    root = tmp_path / "queue"
    git_commit_all(add_task(root / "good"))
    git_commit_all(add_task(root / "group" / "wrong", op="multiply"))
    bad = add_task(root / "broken")
    (bad / "task.toml").write_text((bad / "task.toml").read_text().replace("shape = [128, 64]", "shape = [128, -64]", 1))
    git_commit_all(bad)
    port = add_task(root / "discovered")
    (port / "task.toml").unlink()
    git_commit_all(port)
    add_task(root / "loose")
    hidden = add_task(root / ".hidden" / "skipped")
    assert hidden.is_dir()
    return root


@pytest.fixture(scope="module")
def ray_runtime():
    """One real local Ray runtime for the Ray tests (Ray is in the `test` extra; they share one xdist
    worker); the executors find it running and leave it so. It stops when their module ends: Ray's
    daemons (GCS, raylet, monitors, idle workers) would otherwise take CPU from every later test."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=256 << 20,
             logging_level="error", _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc; empty when it is gone)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""

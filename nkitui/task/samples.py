"""The bundled sample tasks, copied out as git repositories for `nkitui demo`."""

from __future__ import annotations

import getpass
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nkitui.common import gitsafe
from nkitui.common.resources import bundled_dir
from nkitui.task.manifest import MANIFEST_NAME

if TYPE_CHECKING:
    import git

_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


@dataclass(frozen=True)
class InstalledTask:
    name: str
    path: Path
    created: bool  # False when the folder already existed and was left as it was


def sample_task_names() -> list[str]:
    """Names of the bundled tasks: good ones first (alphabetically), then the deliberately flawed ones."""
    root = bundled_dir("sample_tasks")
    names = sorted(p.name for p in root.iterdir() if (p / MANIFEST_NAME).is_file())
    return [n for n in names if not n.startswith("flawed")] + [n for n in names if n.startswith("flawed")]


def default_demo_dir(base: Path | None = None) -> Path:
    """A new folder in the current directory: ./nkitui-demo, or ./nkitui-demo-2, -3, ..."""
    base = (base or Path.cwd()).resolve()
    candidate = base / "nkitui-demo"
    n = 2
    while candidate.exists():
        candidate = base / f"nkitui-demo-{n}"
        n += 1
    return candidate


def install_samples(dest: Path) -> list[InstalledTask]:
    """Copy every bundled task into dest/<name>, each its own git repository with one commit.

    Existing task folders are never overwritten: an auditor's reviews in them are kept.
    """
    source_root = bundled_dir("sample_tasks")
    dest.mkdir(parents=True, exist_ok=True)
    installed: list[InstalledTask] = []
    for name in sample_task_names():
        target = dest / name
        if target.exists():
            installed.append(InstalledTask(name, target, created=False))
            continue
        shutil.copytree(source_root / name, target, ignore=_IGNORE)
        repo = gitsafe.init_repo(target, initial_branch="main")
        repo.git.add(A=True)
        author = _author(repo)
        repo.index.commit(f"Import sample task {name}", author=author, committer=author, skip_hooks=True)
        installed.append(InstalledTask(name, target, created=True))
    return installed


def _author(repo: "git.Repo") -> "git.Actor":
    import git

    reader = repo.config_reader()
    name = reader.get_value("user", "name", default="") or getpass.getuser() or "nkitui"
    email = reader.get_value("user", "email", default="") or f"{name}@nkitui.invalid"
    return git.Actor(str(name), str(email))

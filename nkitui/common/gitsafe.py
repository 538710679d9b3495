"""Every git command nkitui runs, run without the repository's hooks.

A task repository is not trusted: a kernel that escaped once, or whoever handed over the folder,
may have planted `.git/hooks/pre-commit`, `post-commit` or `reference-transaction` (which git runs
for every ref update, `update-ref` plumbing included), or set `core.fsmonitor` to a command that
`git status` runs. nkitui opens every repository through `open_repo`/`init_repo`: the Repo's git
commands (GitPython's persistent cat-file processes included) carry configuration in the
environment (GIT_CONFIG_COUNT, git 2.31+, appended after any the user set) that points
`core.hooksPath` at /dev/null (no hook can exist there) and turns `core.fsmonitor` off. Environment
configuration outranks every config file, so the repository cannot turn hooks back on.

GitPython's own commit (`repo.index.commit`) runs hooks itself from .git/hooks: call it with
`skip_hooks=True` (nkitui commits with plumbing instead).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import git

NO_HOOKS = "/dev/null"  # a hooks "folder" in which no hook can ever exist
SAFE_CONFIG: tuple[tuple[str, str], ...] = (("core.hooksPath", NO_HOOKS), ("core.fsmonitor", "false"))


def config_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment additions that apply SAFE_CONFIG to a git command, after the GIT_CONFIG_COUNT
    entries already in `base` (default: os.environ), which are kept."""
    src = os.environ if base is None else base
    try:
        start = max(0, int(src.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        start = 0
    env: dict[str, str] = {}
    for i, (key, value) in enumerate(SAFE_CONFIG, start):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(start + len(SAFE_CONFIG))
    return env


def command_args() -> list[str]:
    """The same settings as `git -c` arguments, for a git started without GitPython."""
    return [arg for key, value in SAFE_CONFIG for arg in ("-c", f"{key}={value}")]


def harden(repo: Any) -> Any:
    """Make every later git command of this GitPython Repo run without hooks or fsmonitor."""
    repo.git.update_environment(**config_env())
    return repo


def open_repo(path: str | Path, **kwargs: Any) -> git.Repo:
    """git.Repo(path, **kwargs), hardened. Raises what git.Repo raises."""
    import git

    repo: git.Repo = harden(git.Repo(path, **kwargs))
    return repo


def init_repo(path: str | Path, **kwargs: Any) -> Any:
    """git.Repo.init(path, **kwargs), hardened."""
    import git

    return harden(git.Repo.init(path, **kwargs))

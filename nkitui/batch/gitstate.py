"""The git state of a task folder, read with the git command line.

Task repositories are untrusted input: their own configuration could name programs for git to run
(core.fsmonitor, hooks). Every command here switches those off and reads only; nothing is written.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nkitui.common.gitsafe import command_args, driver_overrides

# No hooks and no fsmonitor (nkitui.common.gitsafe: the settings every git command of nkitui runs with).
SAFE_GIT = ["git", *command_args(), "-c", "core.untrackedCache=false"]
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS")


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    return env


def git(args: list[str], cwd: Path, *, timeout: float = 60.0, binary: bool = False,
        extra: tuple[tuple[str, str], ...] = ()) -> subprocess.CompletedProcess[Any]:
    """`extra`: more settings (gitsafe.driver_overrides for a command that reads the work tree)."""
    return subprocess.run([*SAFE_GIT, *command_args(extra)[len(command_args()):], *args], cwd=cwd, env=git_env(),
                          capture_output=True, timeout=timeout, text=not binary, stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class GitState:
    commit: str | None = None  # HEAD of the repository holding the task
    dirty: bool | None = None  # uncommitted (or untracked) changes inside the task folder
    repo_root: Path | None = None
    rel_path: str = "."  # the task folder inside the repository
    note: str = ""  # why the commit is unknown, in words

    @property
    def known(self) -> bool:
        return self.commit is not None


def read_git_state(task_root: Path) -> GitState:
    root = Path(task_root).resolve()
    try:
        top = git(["rev-parse", "--show-toplevel"], root, timeout=20)
    except FileNotFoundError:
        return GitState(note="git is not installed: the commit is unknown")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GitState(note=f"git could not be run ({exc}): the commit is unknown")
    if top.returncode != 0:
        return GitState(note="not in a git repository: the commit is unknown")
    repo_root = Path(top.stdout.strip()).resolve()
    rel = os.path.relpath(root, repo_root)
    head = git(["rev-parse", "--verify", "-q", "HEAD^{commit}"], root, timeout=20)
    if head.returncode != 0:
        return GitState(repo_root=repo_root, rel_path=rel, note="the git repository has no commit yet: the commit is unknown")
    # status runs the clean filter on changed files: the repository's filter drivers are switched off
    status = git(["status", "--porcelain", "--untracked-files=normal", "--", "."], root, timeout=60,
                 extra=driver_overrides(root))
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return GitState(commit=head.stdout.strip(), dirty=dirty, repo_root=repo_root, rel_path=rel)


def same_task_content(state: GitState, other_commit: str | None) -> bool:
    """True when the task folder is the same at `other_commit` as at the current commit, apart from
    its reviews/ (submitting a review commits into the task repository: that must not make every
    earlier verdict stale). Also true for the same commit."""
    if state.commit is None or other_commit is None:
        return False
    if other_commit == state.commit:
        return True
    if state.repo_root is None:
        return False
    rel = "." if state.rel_path in ("", ".") else state.rel_path
    reviews = "reviews" if rel == "." else f"{rel}/reviews"
    try:
        done = git(["diff", "--quiet", "--no-ext-diff", "--no-textconv", other_commit, state.commit, "--", rel,
                    f":(exclude){reviews}"], state.repo_root, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0

"""Whether the task can hold reviews: a folder in a git repository with at least one commit.

Reviews are committed to the task's repository, so a folder outside git (or a repository without a
commit) is said on opening, with the offer to make it ready, rather than when the final submit fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nkitui.session.imports import WORKER_IMPORTS

RepositoryKind = Literal["ready", "not_a_repo", "no_commits", "bare"]


@dataclass(frozen=True)
class RepositoryState:
    kind: RepositoryKind
    root: Path  # the task folder
    message: str = ""  # what is wrong, in words ("" when ready)

    @property
    def ready(self) -> bool:
        return self.kind == "ready"

    @property
    def can_prepare(self) -> bool:
        """nkitui can make it ready: `git init` (when needed) and a first commit of the task's files."""
        return self.kind in ("not_a_repo", "no_commits")

    @property
    def offer(self) -> str:
        """What preparing does, in words."""
        if self.kind == "not_a_repo":
            return (f"make {self.root} a git repository (git init) and commit the task's files, so reviews can be "
                    "committed there")
        if self.kind == "no_commits":
            return "commit the task's files (the repository's first commit), so reviews can point at a version"
        return ""


def repository_state(task_root: Path) -> RepositoryState:
    with WORKER_IMPORTS:
        import git

        from nkitui.common import gitsafe
    root = Path(task_root).resolve()
    try:
        repo = gitsafe.open_repo(root, search_parent_directories=True)  # no hooks, no fsmonitor
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return RepositoryState("not_a_repo", root, f"{root} is not in a git repository: reviews are committed to "
                                                   "the task's repository, so none can be submitted from here")
    try:
        if repo.bare or repo.working_tree_dir is None:
            return RepositoryState("bare", root, "the task is in a bare repository: clone it and review the clone")
        if not repo.head.is_valid():
            return RepositoryState("no_commits", root, "the task's git repository has no commit yet: a review needs "
                                                       "a version of the task to point at")
    finally:
        repo.close()
    return RepositoryState("ready", root)


def prepare_repository(task_root: Path, auditor: str | None = None) -> RepositoryState:
    """`git init` the task folder when it is in no repository, then commit the task's files as the first
    commit (only the task folder; ignore rules apply). Raises nkitui.review.ReviewError with the way out."""
    with WORKER_IMPORTS:
        from nkitui.common import gitsafe
        from nkitui.review.gitstore import make_initial_commit
    state = repository_state(task_root)
    if state.kind == "not_a_repo":
        gitsafe.init_repo(state.root).close()
    if state.kind in ("not_a_repo", "no_commits"):
        make_initial_commit(state.root, auditor)
    return repository_state(task_root)

"""The scratch folder of one run, made and removed by the parent.

    <scratch>/            tempfile.mkdtemp(prefix="nkitui-run-")
      job.json            what the worker should do (never the task repository's path)
      work/               a copy of the task's files: the kernel's working directory
      home/               HOME for the worker (so ~/.aws, ~/.ssh are not the user's)
      tmp/                TMPDIR for the worker

The parent removes the whole folder after the worker has exited, whatever happened to it, so a
killed worker leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Never copied: version control, review records, caches, virtual environments.
IGNORED_NAMES = (".git", ".hg", ".svn", "reviews", "__pycache__", ".pytest_cache", ".mypy_cache",
                 ".venv", "venv", "node_modules", ".nkitui", ".DS_Store")
IGNORED_SUFFIXES = (".pyc", ".pyo")
DEFAULT_MAX_COPY_MB = 2048


class WorkspaceError(Exception):
    """The task folder cannot be copied into a scratch folder (too big, unreadable)."""


@dataclass(frozen=True)
class Scratch:
    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def job_path(self) -> Path:
        return self.root / "job.json"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in IGNORED_NAMES or n.endswith(IGNORED_SUFFIXES)}


def _tree_size(src: Path, limit: int) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_NAMES]
        for name in filenames:
            if name.endswith(IGNORED_SUFFIXES):
                continue
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            if total > limit:
                return total
    return total


def make_scratch(source: Path | None, *, max_copy_mb: int = DEFAULT_MAX_COPY_MB, prefix: str = "nkitui-run-") -> Scratch:
    """Create a scratch folder and copy `source` (a task folder) into its work/ subfolder."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    scratch = Scratch(root)
    try:
        for sub in (scratch.home, scratch.tmp):
            sub.mkdir()
        if source is None:
            scratch.work.mkdir()
            return scratch
        source = source.resolve()
        if not source.is_dir():
            raise WorkspaceError(f"{source} is not a folder")
        limit = max_copy_mb * 1024 * 1024
        size = _tree_size(source, limit)
        if size > limit:
            raise WorkspaceError(
                f"the task folder {source} holds more than {max_copy_mb} MB of files; move large data "
                "(checkpoints, profiles) out of it or list only what the task needs"
            )
        try:
            # Symlinks are copied as the files they point to: the copy must not lead back into
            # the repository. Dangling links are skipped.
            shutil.copytree(source, scratch.work, symlinks=False, ignore=_ignore, ignore_dangling_symlinks=True)
        except shutil.Error as exc:
            first = exc.args[0][0] if exc.args and exc.args[0] else exc
            raise WorkspaceError(f"could not copy the task folder {source}: {first}") from exc
        except OSError as exc:
            raise WorkspaceError(f"could not copy the task folder {source}: {exc}") from exc
        return scratch
    except BaseException:
        scratch.remove()
        raise

"""The task's own git history and diffs, for the Source area (no Textual here).

The task folder may be a repository or a folder inside one; revisions and diffs are limited to the
task folder and paths are shown relative to it. "Working tree" is a pseudo-revision for uncommitted
changes. Diffs come from `git diff` itself (its algorithm, rename detection) and are parsed into rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nkitui.common import gitsafe

WORKTREE = "WORKTREE"

RowKind = Literal["file", "hunk", "context", "add", "delete", "note", "change"]


@dataclass(frozen=True)
class Revision:
    sha: str  # full sha, or WORKTREE
    summary: str
    author: str = ""
    when: str = ""  # ISO date of the commit

    @property
    def short(self) -> str:
        return "working tree" if self.sha == WORKTREE else self.sha[:8]

    @property
    def ref(self) -> str:
        """How evidence links name this revision (no spaces)."""
        return "worktree" if self.sha == WORKTREE else self.sha[:12]

    @property
    def label(self) -> str:
        return self.short if self.sha == WORKTREE else f"{self.short} {self.summary}"


@dataclass(frozen=True, slots=True)
class DiffLine:
    kind: RowKind
    text: str = ""
    old: int | None = None  # 1-based line in the old file
    new: int | None = None  # 1-based line in the new file
    path: str = ""  # task-relative path of the file the line belongs to


@dataclass
class FileDiff:
    path: str  # new path (task-relative)
    old_path: str
    status: str  # "modified" | "added" | "deleted" | "renamed" | "binary"
    lines: list[DiffLine] = field(default_factory=list)
    old_text: str = ""
    new_text: str = ""

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.kind == "add")

    @property
    def deleted(self) -> int:
        return sum(1 for line in self.lines if line.kind == "delete")


@dataclass(frozen=True, slots=True)
class SplitRow:
    """One row of the split diff: old line on the left, new line on the right (either may be None)."""

    kind: RowKind  # "file" / "hunk" / "note" rows span both sides; "context" or "change" rows show code
    left: DiffLine | None
    right: DiffLine | None
    path: str = ""


class GitViewError(RuntimeError):
    pass


def _open_repo(task_root: Path):
    import git

    try:
        repo = gitsafe.open_repo(task_root, search_parent_directories=True)  # no hooks, no fsmonitor
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitViewError(f"{task_root} is not inside a git repository; the diff needs the task's history") from None
    return repo


def _pathspec(repo, task_root: Path) -> str:
    top = Path(repo.working_tree_dir).resolve()
    rel = task_root.resolve().relative_to(top).as_posix()
    return "." if rel in ("", ".") else rel


def list_revisions(task_root: Path, limit: int = 200) -> list[Revision]:
    """The working tree (when it differs from HEAD) then commits touching the task, newest first."""
    repo = _open_repo(task_root)
    spec = _pathspec(repo, task_root)
    revisions: list[Revision] = []
    if repo.is_dirty(path=spec):
        revisions.append(Revision(WORKTREE, "uncommitted changes"))
    if repo.head.is_valid():
        for commit in repo.iter_commits(paths=spec, max_count=limit):
            revisions.append(Revision(
                commit.hexsha, commit.summary if isinstance(commit.summary, str) else commit.summary.decode(),
                author=str(commit.author.name or ""), when=commit.committed_datetime.date().isoformat(),
            ))
    return revisions


def default_revisions(revisions: list[Revision]) -> tuple[Revision, Revision] | None:
    """What to compare when the auditor has not chosen: the latest change to the task."""
    commits = [r for r in revisions if r.sha != WORKTREE]
    if revisions and revisions[0].sha == WORKTREE and commits:
        return commits[0], revisions[0]  # HEAD -> uncommitted changes
    if len(commits) >= 2:
        return commits[1], commits[0]  # previous commit -> HEAD
    if commits:
        return commits[0], commits[0]
    return None


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def parse_unified_diff(text: str, strip_prefix: str = "") -> list[FileDiff]:
    """Parse `git diff` output (with a/ b/ prefixes) into files and lines."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    old_no = new_no = 0

    def rel(path: str) -> str:
        if strip_prefix and path.startswith(strip_prefix + "/"):
            return path[len(strip_prefix) + 1:]
        return path

    for raw in text.splitlines():
        if raw.startswith("diff --git "):
            m = re.match(r"^diff --git a/(.*) b/(.*)$", raw)
            old, new = (m.group(1), m.group(2)) if m else ("?", "?")
            current = FileDiff(path=rel(new), old_path=rel(old), status="modified")
            files.append(current)
            continue
        if current is None:
            continue
        if raw.startswith("new file mode"):
            current.status = "added"
        elif raw.startswith("deleted file mode"):
            current.status = "deleted"
        elif raw.startswith("rename from "):
            current.status = "renamed"
        elif raw.startswith("Binary files "):
            current.status = "binary"
            current.lines.append(DiffLine("note", "binary file differs", path=current.path))
        elif raw.startswith(("--- ", "+++ ", "index ", "similarity index", "rename to ", "old mode", "new mode")):
            continue
        elif m := _HUNK.match(raw):
            old_no, new_no = int(m.group(1)), int(m.group(3))
            current.lines.append(DiffLine("hunk", raw, path=current.path))
        elif raw.startswith("+"):
            current.lines.append(DiffLine("add", raw[1:], None, new_no, current.path))
            new_no += 1
        elif raw.startswith("-"):
            current.lines.append(DiffLine("delete", raw[1:], old_no, None, current.path))
            old_no += 1
        elif raw.startswith(" ") or raw == "":
            current.lines.append(DiffLine("context", raw[1:], old_no, new_no, current.path))
            old_no += 1
            new_no += 1
        elif raw.startswith("\\"):
            continue  # "\ No newline at end of file"
    return files


def _show(repo, sha: str, path: str) -> str:
    if sha == WORKTREE:
        p = Path(repo.working_tree_dir) / path
        try:
            return p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
    try:
        return repo.git.show(f"{sha}:{path}")
    except Exception:  # the file does not exist in that revision
        return ""


def diff_revisions(task_root: Path, old: str, new: str) -> list[FileDiff]:
    """Files changed in the task folder between revisions old and new (either may be WORKTREE)."""
    repo = _open_repo(task_root)
    spec = _pathspec(repo, task_root)
    if old == new:
        return []
    args = ["--no-color", "--no-ext-diff", "--no-textconv", "-U3", "--find-renames"]  # no programs of the repository
    if old == WORKTREE:
        text = repo.git.diff(new, "-R", *args, "--", spec)
    elif new == WORKTREE:
        text = repo.git.diff(old, *args, "--", spec)
    else:
        text = repo.git.diff(old, new, *args, "--", spec)
    prefix = "" if spec == "." else spec
    files = parse_unified_diff(text, prefix)
    for f in files:
        if f.status == "binary":
            continue
        full_old = f"{prefix}/{f.old_path}" if prefix else f.old_path
        full_new = f"{prefix}/{f.path}" if prefix else f.path
        f.old_text = "" if f.status == "added" else _show(repo, old, full_old)
        f.new_text = "" if f.status == "deleted" else _show(repo, new, full_new)
    return files


def unified_rows(files: list[FileDiff]) -> list[DiffLine]:
    rows: list[DiffLine] = []
    for f in files:
        rows.append(DiffLine("file", file_title(f), path=f.path))
        rows.extend(f.lines)
    return rows


def split_rows(files: list[FileDiff]) -> list[SplitRow]:
    """Pair each run of deletions with the additions that follow it, side by side."""
    rows: list[SplitRow] = []
    for f in files:
        rows.append(SplitRow("file", None, None, f.path))
        dels: list[DiffLine] = []
        adds: list[DiffLine] = []

        def flush(dels: list[DiffLine] = dels, adds: list[DiffLine] = adds, path: str = f.path) -> None:
            for left, right in pair_changes(dels, adds):
                rows.append(SplitRow("change", left, right, path))
            dels.clear()
            adds.clear()

        for line in f.lines:
            if line.kind == "delete":
                if adds:
                    flush()
                dels.append(line)
            elif line.kind == "add":
                adds.append(line)
            else:
                flush()
                rows.append(SplitRow(line.kind, line, line, f.path))
        flush()
    return rows


_PAIR_LIMIT = 400  # del x add lines above which pairing falls back to position order
_SIMILAR = 0.4


def pair_changes(dels: list[DiffLine], adds: list[DiffLine]) -> list[tuple[DiffLine | None, DiffLine | None]]:
    """Rows of a split diff for one block of deletions followed by additions.

    A deleted line sits beside the added line that most resembles it (in order), so an inserted line
    does not shift every pairing below it; unmatched lines get a row of their own.
    """
    if not dels or not adds or len(dels) * len(adds) > _PAIR_LIMIT:
        n = max(len(dels), len(adds))
        return [(dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None) for i in range(n)]
    from difflib import SequenceMatcher

    def similarity(a: DiffLine, b: DiffLine) -> float:
        return SequenceMatcher(None, a.text.strip(), b.text.strip(), autojunk=False).ratio()

    n, m = len(dels), len(adds)
    sim = [[similarity(dels[i], adds[j]) for j in range(m)] for i in range(n)]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            take = best[i + 1][j + 1] + sim[i][j] if sim[i][j] >= _SIMILAR else -1.0
            best[i][j] = max(best[i + 1][j], best[i][j + 1], take)
    out: list[tuple[DiffLine | None, DiffLine | None]] = []
    i = j = 0
    while i < n and j < m:
        if sim[i][j] >= _SIMILAR and best[i][j] == best[i + 1][j + 1] + sim[i][j]:
            out.append((dels[i], adds[j]))
            i += 1
            j += 1
        elif best[i][j] == best[i + 1][j]:
            out.append((dels[i], None))
            i += 1
        else:
            out.append((None, adds[j]))
            j += 1
    out += [(dels[k], None) for k in range(i, n)]
    out += [(None, adds[k]) for k in range(j, m)]
    return out


def file_title(f: FileDiff) -> str:
    if f.status == "renamed":
        return f"{f.old_path} → {f.path} (renamed, +{f.added} -{f.deleted})"
    return f"{f.path} ({f.status}, +{f.added} -{f.deleted})"

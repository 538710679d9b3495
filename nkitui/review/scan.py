"""Find and read review records on disk. Corrupt files are reported and skipped, never raised."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nkitui.review.errors import RecordError
from nkitui.common.fields import display_path
from nkitui.review.record import ReviewRecord, load_record
from nkitui.task.problems import Problem

REVIEWS_DIR = "reviews"
RUNS_DIR = "runs"  # reviews/runs/<run_id>.json: run results cited by reviews, not auditors
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".hypothesis", ".pytest_cache"}


@dataclass(frozen=True)
class LoadedReview:
    path: Path  # the record file
    task_root: Path  # the folder holding reviews/
    record: ReviewRecord

    @property
    def relpath(self) -> str:
        return display_path(self.path, self.task_root)


@dataclass
class ScanResult:
    reviews: list[LoadedReview] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # one per corrupt file (its errors joined)

    def extend(self, other: "ScanResult") -> None:
        self.reviews.extend(other.reviews)
        self.problems.extend(other.problems)


def record_files(reviews_dir: Path) -> Iterator[Path]:
    """reviews/<auditor>/*.toml, in a stable order (reviews/runs/ holds run results, not records)."""
    if reviews_dir.is_symlink():  # a link may lead anywhere (a device, a huge file): never read through one
        return
    try:
        auditors = sorted(p for p in reviews_dir.iterdir()
                          if p.is_dir() and not p.is_symlink() and p.name != RUNS_DIR and not p.name.startswith("."))
    except OSError:
        return
    for folder in auditors:
        try:
            files = sorted(p for p in folder.iterdir() if p.suffix == ".toml" and not p.name.startswith(".")
                           and p.is_file() and not p.is_symlink())
        except OSError:
            continue
        yield from files


def scan_task(task_root: Path, display_base: Path | None = None) -> ScanResult:
    """Every record under `task_root`/reviews/."""
    task_root = Path(task_root)
    base = display_base or task_root
    result = ScanResult()
    for path in record_files(task_root / REVIEWS_DIR):
        shown = display_path(path, base)
        try:
            record = load_record(path, display=shown)
        except RecordError as exc:
            errors = [p for p in exc.problems if p.severity == "error"] or exc.problems
            first = errors[0]
            detail = "; ".join(f"[{p.field}] {p.message}" if p.field else p.message for p in errors[:3])
            more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
            result.problems.append(Problem(shown, first.field, f"skipped a corrupt review file: {detail}{more}",
                                           first.fix, "warning", first.line))
            continue
        except Exception as exc:  # a bug in the parser must not take history or export down with it
            result.problems.append(Problem(shown, "", f"skipped an unreadable review file ({type(exc).__name__}: {exc})",
                                           "restore the file from git (git log -- <file>)", "warning"))
            continue
        result.reviews.append(LoadedReview(path=path, task_root=task_root, record=record))
    return result


def scan_tree(root: Path) -> ScanResult:
    """Every record in every reviews/ folder under `root` (root may itself be a task or a reviews/ folder)."""
    root = Path(root)
    result = ScanResult()
    if root.name == REVIEWS_DIR and root.is_dir():
        result.extend(scan_task(root.parent, display_base=root.parent))
        return result
    for dirpath, dirnames, _files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        if REVIEWS_DIR in dirnames:
            result.extend(scan_task(Path(dirpath), display_base=root))
            dirnames.remove(REVIEWS_DIR)
    return result

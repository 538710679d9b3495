"""`nkitui export`: every review under a folder as JSON lines or CSV, one record per review.

Corrupt review files are reported (ExportResult.problems) and skipped; they never stop an export.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from nkitui.common.fields import display_path
from nkitui.review.history import file_changes
from nkitui.review.rubric_cache import RubricCache
from nkitui.review.scan import LoadedReview, scan_tree
from nkitui.task.problems import Problem

FORMATS = ("jsonl", "csv")
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
CSV_FIXED = ["id", "path", "auditor", "submitted_at", "task_id", "task_path", "task_commit", "rubric_id",
             "rubric_version", "verdict", "weighted_score", "outdated", "changed_files", "runs", "line_comments",
             "evidence", "tool_version", "summary"]


@dataclass
class ExportResult:
    rows: list[dict[str, Any]] = field(default_factory=list)  # one JSON-ready dict per review
    problems: list[Problem] = field(default_factory=list)


def review_row(lr: LoadedReview, root: Path, rubrics: RubricCache, hash_cache: dict[Path, dict[str, str | None]]) -> dict[str, Any]:
    record = lr.record
    cache = hash_cache.setdefault(Path(lr.task_root).resolve(), {})
    changes = file_changes(record, lr.task_root, None, cache)
    rubric = rubrics.get(lr.task_root, record.rubric_id)
    row = record.to_dict()
    row["path"] = display_path(lr.path, root)
    row["weighted_score"] = rubric.weighted_score(record.score_values) if rubric else None
    row["outdated"] = bool(changes)
    row["changed_files"] = [{"file": c.file, "change": c.change} for c in changes]
    return row


def collect(root: Path) -> ExportResult:
    """Rows for every review under `root`, oldest first (stable for diffs of exports)."""
    root = Path(root)
    scan = scan_tree(root)
    rubrics = RubricCache()
    hash_cache: dict[Path, dict[str, str | None]] = {}
    reviews = sorted(scan.reviews, key=lambda lr: (lr.record.submitted_at, lr.record.id))
    return ExportResult(rows=[review_row(lr, root, rubrics, hash_cache) for lr in reviews], problems=scan.problems)


def write_jsonl(rows: Iterable[dict[str, Any]], out: TextIO) -> int:
    n = 0
    for row in rows:
        line = json.dumps(row, ensure_ascii=False)
        # Characters some readers treat as line breaks stay escaped, so one review is one line everywhere.
        out.write(line.translate(_LINE_BREAKS) + "\n")
        n += 1
    return n


def criterion_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Criterion ids in first-seen order across the rows."""
    seen: dict[str, None] = {}
    for row in rows:
        for cid in row["scores"]:
            seen.setdefault(cid, None)
    return list(seen)


def write_csv(rows: list[dict[str, Any]], out: TextIO) -> int:
    criteria = criterion_columns(rows)
    header = CSV_FIXED + [f"{c}.score" for c in criteria] + [f"{c}.comment" for c in criteria]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        flat = {
            "id": row["id"], "path": row["path"], "auditor": row["auditor"], "submitted_at": row["submitted_at"],
            "task_id": row["task"]["id"], "task_path": row["task"]["path"], "task_commit": row["task"]["commit"],
            "rubric_id": row["rubric"]["id"], "rubric_version": row["rubric"]["version"], "verdict": row["verdict"],
            "weighted_score": "" if row["weighted_score"] is None else f"{row['weighted_score']:.4f}",
            "outdated": "true" if row["outdated"] else "false",
            "changed_files": ";".join(c["file"] for c in row["changed_files"]),
            "runs": ";".join(row["runs"]), "line_comments": len(row["comments"]), "evidence": len(row["evidence"]),
            "tool_version": row["tool_version"], "summary": row["summary"],
        }
        cells = [flat[k] for k in CSV_FIXED]
        for c in criteria:
            s = row["scores"].get(c)
            cells.append("" if s is None or s["score"] is None else s["score"])
        for c in criteria:
            s = row["scores"].get(c)
            cells.append("" if s is None else s["comment"])
        writer.writerow(cells)
    return len(rows)


def export(root: Path, out: TextIO, fmt: str = "jsonl") -> ExportResult:
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    result = collect(root)
    (write_jsonl if fmt == "jsonl" else write_csv)(result.rows, out)
    return result

"""The lab's table: one row per task, joining its latest verdict for its current commit (from the run
store, whether `nkitui check`, the app or a batch made it), its findings by severity, its latency
(estimated on the emulator, measured on hardware) and the submitted review scores per criterion.

    table = aggregate(Path("tasks"))      # AggregateTable: rows (JSON-ready dicts), criteria, problems
    write_csv(table, out)                 # flat, one column per criterion, ready for a spreadsheet
    write_jsonl(table, out)               # the same rows, nested

Review scores count only current reviews (those whose judged files have not changed since):
per criterion the mean of the numeric scores, or for labels ("pass"/"fail", ...) the most
recent one; `reviews_outdated` says how many reviews no longer apply.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from nkitui.batch.gitstate import GitState, read_git_state, same_task_content
from nkitui.batch.record import finding_counts
from nkitui.batch.tasks import BatchTask, find_tasks

MAX_RUNS_SCANNED = 200  # per task, newest first: an old run of the current commit is still found
CSV_FIXED = [
    "key", "task_id", "title", "op", "namespace", "target", "commit", "dirty", "status", "run_id", "run_at",
    "backend", "checks_passed", "checks_total", "failed_checks", "findings_high", "findings_medium", "findings_low",
    "findings_info", "latency_us", "latency_kind", "reviews_current", "reviews_outdated", "auditors",
    "review_verdicts", "weighted_score_mean", "note", "path",
]


@dataclass
class AggregateTable:
    rows: list[dict[str, Any]] = field(default_factory=list)
    criteria: list[str] = field(default_factory=list)  # criterion ids in first-seen order
    problems: list[str] = field(default_factory=list)  # corrupt review files, unreadable runs (skipped)


def latest_run_for(task: BatchTask, state: GitState, store_root: Path | None = None, *,
                   skip: tuple[str, ...] = ()) -> Any:
    """The newest stored RunResult of this task for its current commit (or a commit whose task
    folder is the same but for reviews/; for a task outside git: for its current judged files),
    or None. What the queue's "last run verdict for the task's current commit" shows; it passes
    skip=("cancelled",), as a cancelled run judged nothing."""
    from nkitui.evaluate.run.store import RunStore, load_result

    store = RunStore(store_root)
    try:
        hashes = task.task.file_hashes() if task.task else {}
    except OSError:
        hashes = {}
    root = str(task.root)
    for run_id in store.ids(task.task_id)[:MAX_RUNS_SCANNED]:
        try:
            result = load_result(store.path_for(task.task_id, run_id))
        except Exception:  # noqa: BLE001 - an unreadable run is skipped here (`nkitui runs` reports it)
            continue
        if result.status in skip:
            continue
        same_task = result.task_path == root or (hashes and result.file_hashes == hashes)
        if not same_task:
            continue
        if state.commit is not None and result.task_commit is not None and same_task_content(state, result.task_commit):
            return result
        if state.commit is None and result.task_commit is None and hashes and result.file_hashes == hashes:
            return result
    return None


def _review_columns(task: BatchTask) -> tuple[dict[str, Any], list[str]]:
    from nkitui.review.history import task_history

    history = task_history(task.root, task=task.task)
    problems = [str(p) for p in history.problems if p.severity == "warning" and "corrupt" in p.message]
    current = [e for e in history.entries if not e.outdated]  # newest first
    scores: dict[str, dict[str, Any]] = {}
    for entry in current:
        for cid, score in entry.record.scores.items():
            if score.value is None:
                continue
            slot = scores.setdefault(cid, {"values": [], "latest": score.value})
            slot["values"].append(score.value)
    for slot in scores.values():
        numbers = [v for v in slot["values"] if isinstance(v, (int, float)) and not isinstance(v, bool)]
        slot["n"] = len(slot["values"])
        slot["mean"] = round(sum(numbers) / len(numbers), 4) if numbers and len(numbers) == len(slot["values"]) else None
        slot["value"] = slot["mean"] if slot["mean"] is not None else slot["latest"]
    weighted = [e.weighted_score for e in current if e.weighted_score is not None]
    verdicts = Counter(e.record.verdict for e in current)
    return {
        "reviews_current": len(current),
        "reviews_outdated": len(history.entries) - len(current),
        "auditors": sorted({e.record.auditor for e in current}),
        "review_verdicts": dict(sorted(verdicts.items())),
        "weighted_score_mean": round(sum(weighted) / len(weighted), 4) if weighted else None,
        "scores": {cid: {"value": s["value"], "n": s["n"], "values": s["values"]} for cid, s in scores.items()},
    }, problems


def task_row(task: BatchTask, store_root: Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """One task's row (JSON-ready) and the problems met while reading it."""
    state = read_git_state(task.root)
    row: dict[str, Any] = {"key": task.key, **task.describe(), "path": str(task.root), "commit": state.commit,
                           "dirty": state.dirty}
    notes = [] if state.known else [state.note]
    result = latest_run_for(task, state, store_root) if task.task is not None else None
    if task.problems:
        row.update(status="invalid", note="; ".join([task.problems[0], *notes]))
    if result is None:
        row.setdefault("status", "not run")
        row.update(run_id=None, run_at=None, backend=None, checks_passed=None, checks_total=None, failed_checks=[],
                   findings=dict.fromkeys(("high", "medium", "low", "info"), None), latency_us=None, latency_kind=None)
        if not task.problems:
            notes.append("no run for the current commit" if state.known else "no run for the current files")
    else:
        timing = result.timing
        median = timing.median_us if timing is not None else None
        row.update(status=result.status, run_id=result.run_id, run_at=result.created_at, backend=result.backend,
                   checks_passed=sum(1 for c in result.checks if c.passed),
                   checks_total=sum(1 for c in result.checks if c.passed is not None),
                   failed_checks=[c.id for c in result.failed_checks()], findings=finding_counts(result.findings),
                   latency_us=round(float(median), 3) if isinstance(median, (int, float)) else None,
                   latency_kind=timing.kind if timing is not None and isinstance(median, (int, float)) else None)
        if result.task_dirty:
            notes.append("the run saw uncommitted changes")
    problems: list[str] = []
    if task.root.is_dir():
        reviews, problems = _review_columns(task)
        row.update(reviews)
    row.setdefault("note", "; ".join(n for n in notes if n))
    return row, problems


def aggregate(root: Path, *, tasks: list[BatchTask] | None = None, store_root: Path | None = None) -> AggregateTable:
    """The table for every task under `root` (or the given tasks), in task order."""
    from concurrent.futures import ThreadPoolExecutor

    tasks = find_tasks(root) if tasks is None else tasks
    table = AggregateTable()
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="nkitui-aggregate") as pool:
        rows = list(pool.map(lambda t: task_row(t, store_root), tasks))
    seen: dict[str, None] = {}
    for row, problems in rows:
        table.rows.append(row)
        table.problems.extend(problems)
        for cid in row.get("scores", {}):
            seen.setdefault(cid, None)
    table.criteria = list(seen)
    return table


def write_jsonl(table: AggregateTable, out: TextIO) -> int:
    for row in table.rows:
        out.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    return len(table.rows)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return ";".join(f"{k}:{v}" for k, v in value.items())
    return value


def write_csv(table: AggregateTable, out: TextIO) -> int:
    """Flat: the fixed columns, then `<criterion>` (mean or latest score) and `<criterion>.n` (reviews)."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIXED + [c for cid in table.criteria for c in (cid, f"{cid}.n")])
    for row in table.rows:
        flat = dict(row)
        for sev, n in (row.get("findings") or {}).items():
            flat[f"findings_{sev}"] = n
        cells = [_cell(flat.get(k)) for k in CSV_FIXED]
        scores = row.get("scores") or {}
        for cid in table.criteria:
            s = scores.get(cid)
            cells += ["", 0] if s is None else [_cell(s["value"]), s["n"]]
        writer.writerow([_spreadsheet_safe(c) for c in cells])
    return len(table.rows)


def _spreadsheet_safe(cell: Any) -> Any:
    """Text that a spreadsheet would run as a formula (=, +, -, @ first) is quoted with an apostrophe:
    task titles and notes come from task authors."""
    if isinstance(cell, str) and cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + cell
    return cell

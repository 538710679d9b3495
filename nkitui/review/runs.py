"""Run results cited by reviews, committed beside them as reviews/runs/<run_id>.json.

The files are content-addressed by run id and written in one canonical JSON form (sorted keys,
2-space indent), so two auditors citing the same run in two clones write byte-identical files and
their commits still merge cleanly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nkitui.common.redact import redact_obj
from nkitui.review.errors import SubmitRefused
from nkitui.review.record import RUN_ID_RE
from nkitui.task.problems import Problem

RUNS_RELDIR = "reviews/runs"
RunLookup = Callable[[str], "dict[str, Any] | None"]


@dataclass(frozen=True)
class RunResult:
    run_id: str
    data: dict[str, Any]
    source: str  # where it was found, for messages

    def canonical_text(self) -> str:
        # redacted again: a result stored by an older nkitui, or a file passed with --run, may hold a secret
        return json.dumps(redact_obj(self.data), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def run_relpath(run_id: str) -> str:
    return f"{RUNS_RELDIR}/{run_id}.json"


def _from_data(data: Any, source: str) -> RunResult:
    if not isinstance(data, dict):
        raise SubmitRefused("run_invalid", [Problem(source, "", "a run result must be a JSON object",
                                                    "pass the result file written by `nkitui check --json` or the executor")])
    run_id = data.get("run_id")
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise SubmitRefused("run_invalid", [Problem(source, "run_id", f"missing or malformed run_id ({run_id!r:.40})",
                                                    "pass a run result as written by the executor (it has a run_id)")])
    return RunResult(run_id=run_id, data=data, source=source)


def read_run_file(path: Path) -> RunResult:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SubmitRefused("run_invalid", [Problem(str(path), "", f"cannot read the run result: {exc}",
                                                    "pass a JSON run result file (nkitui check --json writes one)")]) from None
    return _from_data(data, str(path))


def executor_store_lookup(task_id: str | None = None, root: Path | None = None) -> RunLookup | None:
    """Look runs up in the executor's run store (nkitui.evaluate.run.store), this task's runs first."""
    try:
        from nkitui.evaluate.run.result import ResultVersionError
        from nkitui.evaluate.run.store import RunNotFound, RunStore
    except ImportError:
        return None
    store = RunStore(root)

    def lookup(run_id: str) -> dict[str, Any] | None:
        for scope in ([task_id, None] if task_id else [None]):
            try:
                return store.load(run_id, task_id=scope).to_dict()
            except RunNotFound:
                continue
            except ResultVersionError:
                return None
        return None

    return lookup


def resolve_runs(task_root: Path, task_id: str, cited: Iterable[str], files: Iterable[Path] = (),
                 lookup: RunLookup | None = None) -> list[RunResult]:
    """The run results a review cites, from (in order) the given files, reviews/runs/ in the task,
    and the executor's store. Refuses a run that cannot be found, one recorded for another task,
    and one whose id is already committed with different content."""
    by_id: dict[str, RunResult] = {}
    for path in files:
        read = read_run_file(Path(path))
        by_id.setdefault(read.run_id, read)
    wanted = list(dict.fromkeys([*cited, *by_id]))
    problems: list[Problem] = []
    out: list[RunResult] = []
    for run_id in wanted:
        existing_path = Path(task_root) / run_relpath(run_id)
        existing: RunResult | None = None
        if existing_path.is_file():
            try:
                existing = read_run_file(existing_path)
            except SubmitRefused as exc:
                problems.extend(exc.problems)
                continue
        result: RunResult | None = by_id.get(run_id) or existing
        if result is None and lookup is not None:
            data = lookup(run_id)
            result = _from_data(data, f"run store ({run_id})") if data is not None else None
        if result is None:
            problems.append(Problem("runs", "runs", f"run {run_id!r} was not found",
                                    "pass its result file with --run FILE.json, or run the task again and cite the new run id"))
            continue
        if result.run_id != run_id:
            problems.append(Problem(result.source, "run_id", f"expected run {run_id!r}, found {result.run_id!r}",
                                    "pass the right result file"))
            continue
        other_task = result.data.get("task_id")
        if isinstance(other_task, str) and other_task and other_task != task_id:
            problems.append(Problem(result.source, "task_id", f"run {run_id} is a run of task {other_task!r}, not {task_id!r}",
                                    "cite runs of the task being reviewed"))
            continue
        if existing is not None and existing.data != result.data:
            problems.append(Problem(run_relpath(run_id), "", f"run {run_id} is already committed with different content",
                                    "run results are immutable: cite the committed result, or run the task again for a new run id"))
            continue
        out.append(result)
    if problems:
        kind = "run_missing" if all("was not found" in p.message for p in problems) else "run_conflict"
        raise SubmitRefused(kind, problems)
    return out

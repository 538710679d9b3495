"""Run results on disk: one JSON file per run under the XDG data folder, grouped by task.

    <data_dir>/runs/<task id>/<run id>.json

    store = RunStore()                      # or RunStore(root) in tests
    path = store.save(result)
    result = store.load(run_id)             # any task; or store.load(run_id, task_id=...)
    summaries = store.list(task_id)         # newest first; unreadable files are listed, not fatal
    diff = compare_runs(a, b)               # A/B: metrics, checks, timing, utilisation
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nkitui.common.atomic import atomic_write_text
from nkitui.evaluate.run.result import ResultVersionError, RunResult

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class RunNotFound(LookupError):
    """No stored run has the id (or the short id is ambiguous). `suggestions`: close matches."""

    def __init__(self, message: str, suggestions: list[str] | None = None) -> None:
        super().__init__(message)
        self.suggestions = list(suggestions or [])


def _safe_name(text: str) -> str:
    return _SAFE.sub("_", text).strip("._") or "task"


@dataclass
class RunSummary:
    """What a run list shows without reading every metric."""

    run_id: str
    task_id: str
    path: str
    status: str
    backend: str | None = None
    target: str = ""
    created_at: str = ""
    task_commit: str | None = None
    median_us: float | None = None
    timing_kind: str | None = None
    checks_passed: int = 0
    checks_total: int = 0
    error: str = ""  # set when the file could not be read

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunStore:
    def __init__(self, root: Path | None = None) -> None:
        if root is None:
            from nkitui.common.paths import data_dir

            root = data_dir() / "runs"
        self.root = Path(root)

    def path_for(self, task_id: str, run_id: str) -> Path:
        return self.root / _safe_name(task_id) / f"{_safe_name(run_id)}.json"

    def save(self, result: RunResult) -> Path:
        path = self.path_for(result.task_id or "unknown-task", result.run_id)
        atomic_write_text(path, result.to_json())
        return path

    def _find(self, run_id: str, task_id: str | None) -> Path:
        folder = _safe_name(task_id) if task_id is not None else "*"
        name = _safe_name(run_id)
        matches = sorted(self.root.glob(f"{folder}/{name}.json"))
        if not matches and "-" not in run_id:  # a short id (the random suffix)
            matches = sorted(self.root.glob(f"{folder}/*-{name}.json"))
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            ids = [p.stem for p in matches]
            raise RunNotFound(f"run id {run_id!r} is ambiguous: it matches {', '.join(ids[:5])}; give the full id", ids)
        where = f" for task {task_id!r}" if task_id else ""
        close = self.suggest(run_id, task_id)
        if close:
            hint = f"; close matches: {', '.join(close)}"
        elif self.ids(task_id):
            hint = "; `nkitui runs list TASK_DIR` lists the stored runs"
        else:
            hint = f"; no run{where} is stored yet (`nkitui check` stores one)"
        raise RunNotFound(f"no run {run_id!r}{where} in {self.root}{hint}", close)

    def ids(self, task_id: str | None = None) -> list[str]:
        """Every stored run id (of one task, or of all), newest first (ids sort by time)."""
        folder = _safe_name(task_id) if task_id is not None else "*"
        if not self.root.is_dir():
            return []
        return sorted({p.stem for p in self.root.glob(f"{folder}/*.json")}, reverse=True)

    def suggest(self, run_id: str, task_id: str | None = None, n: int = 5) -> list[str]:
        """Stored run ids close to `run_id`: those it is part of (a prefix of the time stamp, part of
        the short id), then similar spellings. Looks in the task's runs first, then in all."""
        import difflib

        text = run_id.strip()
        for scope in ([task_id, None] if task_id is not None else [None]):
            ids = self.ids(scope)
            if not ids or not text:
                continue
            found = [i for i in ids if text in i]
            shorts = {i.rsplit("-", 1)[-1]: i for i in ids}
            for close in difflib.get_close_matches(text, [*ids, *shorts], n=n, cutoff=0.6):
                full = shorts.get(close, close)
                if full not in found:
                    found.append(full)
            if found:
                return found[:n]
        return []

    def load(self, run_id: str, task_id: str | None = None) -> RunResult:
        """A stored run by id (full or the short suffix). RunNotFound or ResultVersionError."""
        return load_result(self._find(run_id, task_id))

    def task_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def list(self, task_id: str | None = None) -> list[RunSummary]:
        """Runs of one task (or of all tasks), newest first."""
        folders = [self.root / _safe_name(task_id)] if task_id else [self.root / t for t in self.task_ids()]
        out: list[RunSummary] = []
        for folder in folders:
            if not folder.is_dir():
                continue
            for path in folder.glob("*.json"):
                out.append(_summarise(path))
        out.sort(key=lambda s: (s.created_at, s.run_id), reverse=True)
        return out

    def latest(self, task_id: str) -> RunResult | None:
        for summary in self.list(task_id):
            if not summary.error:
                return load_result(Path(summary.path))
        return None


def load_result(path: Path) -> RunResult:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RunNotFound(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return RunResult.from_json(text)
    except ResultVersionError as exc:
        raise ResultVersionError(f"{path}: {exc}") from None


def _summarise(path: Path) -> RunSummary:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        result = RunResult.from_dict(d)
    except (OSError, ValueError) as exc:
        return RunSummary(run_id=path.stem, task_id=path.parent.name, path=str(path), status="unreadable", error=str(exc))
    timing = result.timing
    median = timing.median_us if timing is not None else None
    return RunSummary(
        run_id=result.run_id, task_id=result.task_id, path=str(path), status=result.status, backend=result.backend,
        target=result.target, created_at=result.created_at, task_commit=result.task_commit,
        median_us=median if median is not None and math.isfinite(median) else None,
        timing_kind=timing.kind if timing is not None else None,
        checks_passed=sum(1 for c in result.checks if c.passed),
        checks_total=sum(1 for c in result.checks if c.passed is not None),
    )


# -- A/B comparison -------------------------------------------------------------------------------

METRIC_KEYS = ("max_abs", "max_rel", "max_ulp", "rel_l2", "mismatches")


@dataclass
class MetricDelta:
    output: str
    metric: str
    a: float | None
    b: float | None

    @property
    def change(self) -> str:
        if self.a is None or self.b is None:
            return "n/a"
        if self.a == self.b:
            return "same"
        return "better" if self.b < self.a else "worse"


@dataclass
class RunComparison:
    a: str  # run ids
    b: str
    same_task: bool
    same_commit: bool
    notes: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)  # id, a, b
    metrics: list[MetricDelta] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)
    utilisation: list[dict[str, Any]] = field(default_factory=list)  # lane, a %, b %
    performance: dict[str, Any] | None = None  # nkitui.perf.compare on the two PerfRecords

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrics"] = [{**asdict(m), "change": m.change} for m in self.metrics]
        return d


def _engines(result: RunResult) -> dict[str, float]:
    util = result.utilisation
    if util is None:
        return {}
    return {lane: float(stats.active_time_percent) for lane, stats in util.engines.items()}


def compare_runs(a: RunResult, b: RunResult) -> RunComparison:
    """A/B comparison of two runs (b against a): checks, worst metrics per output over seeds,
    timing with a noise verdict, and per-engine utilisation."""
    cmp = RunComparison(a=a.run_id, b=b.run_id, same_task=a.task_id == b.task_id,
                        same_commit=bool(a.task_commit) and a.task_commit == b.task_commit)
    if not cmp.same_task:
        cmp.notes.append(f"different tasks: {a.task_id} vs {b.task_id}")
    if a.backend != b.backend or a.target != b.target:
        cmp.notes.append(f"different setups: {a.backend or 'no backend'}/{a.target} vs {b.backend or 'no backend'}/{b.target}")
    if a.seeds != b.seeds:
        cmp.notes.append(f"different seeds: {a.seeds} vs {b.seeds}")
    checks_a = {c.id: c.passed for c in a.checks}
    checks_b = {c.id: c.passed for c in b.checks}
    for cid in list(dict.fromkeys([*checks_a, *checks_b])):
        cmp.checks.append({"id": cid, "a": checks_a.get(cid), "b": checks_b.get(cid)})
    for name in dict.fromkeys([*a.output_names(), *b.output_names()]):
        for key in METRIC_KEYS:
            cmp.metrics.append(MetricDelta(name, key, a.worst(name, key), b.worst(name, key)))
    cmp.timing = compare_timing(a.timing.to_dict() if a.timing else None, b.timing.to_dict() if b.timing else None)
    ea, eb = _engines(a), _engines(b)
    for lane in dict.fromkeys([*ea, *eb]):
        cmp.utilisation.append({"lane": lane, "a": ea.get(lane), "b": eb.get(lane)})
    if a.utilisation and b.utilisation:
        from nkitui.perf import compare

        try:
            cmp.performance = compare(a.utilisation, b.utilisation).to_json()
        except (ValueError, KeyError, TypeError) as exc:
            cmp.notes.append(f"utilisation records could not be compared: {exc}")
    return cmp


def compare_timing(ta: dict[str, Any] | None, tb: dict[str, Any] | None) -> dict[str, Any]:
    """Speed-up of b over a, and whether it is outside the run-to-run noise (anchors §C.3: never
    call a speed-up real when it is inside the noise band)."""
    if not ta or not tb or not isinstance(ta.get("median_us"), (int, float)) or not isinstance(tb.get("median_us"), (int, float)):
        return {"verdict": "no timing to compare"}
    ma, mb = float(ta["median_us"]), float(tb["median_us"])
    out: dict[str, Any] = {"a_us": ma, "b_us": mb, "a_kind": ta.get("kind"), "b_kind": tb.get("kind")}
    if mb <= 0 or ma <= 0:
        out["verdict"] = "no timing to compare"
        return out
    out["speedup"] = ma / mb
    if ta.get("kind") != tb.get("kind"):
        out["verdict"] = f"not comparable: {ta.get('kind')} vs {tb.get('kind')} timing"
        return out
    if ta.get("kind") == "estimated":
        out["verdict"] = "same" if ma == mb else ("faster (estimate)" if mb < ma else "slower (estimate)")
        return out
    ci_a, ci_b = ta.get("ci95_us"), tb.get("ci95_us")
    if isinstance(ci_a, list) and isinstance(ci_b, list) and len(ci_a) == 2 and len(ci_b) == 2:
        if ci_b[1] < ci_a[0]:
            out["verdict"] = "faster (outside the noise)"
        elif ci_b[0] > ci_a[1]:
            out["verdict"] = "slower (outside the noise)"
        else:
            out["verdict"] = "within the noise"
    else:
        out["verdict"] = "faster" if mb < ma else "slower"
    return out

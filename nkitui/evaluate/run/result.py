"""The result of one run: versioned, self-contained JSON that can be reopened, compared (A/B) and
cited as evidence in a review (docs/executor.md has the field reference).

    result = RunResult.from_json(text)     # ResultVersionError for a schema it does not know
    text = result.to_json()

Statuses: passed (every check passed), failed (a check failed, including a kernel that raised),
invalid (the task, its reference or the request is unusable), and for runs that did not finish:
timeout, cancelled, crashed, memory-limit, cpu-limit, killed, internal-error.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1
SCHEMA_NAME = "nkitui.run-result"

FINISHED_STATUSES = ("passed", "failed", "invalid")
UNFINISHED_STATUSES = ("timeout", "cancelled", "crashed", "memory-limit", "cpu-limit", "killed", "internal-error")
STATUSES = FINISHED_STATUSES + UNFINISHED_STATUSES


def strict_json(value: Any) -> Any:
    """`value` with every non-finite float replaced by "nan"/"inf"/"-inf" and numpy scalars and
    arrays turned into Python numbers and lists, so json.dumps(allow_nan=False) accepts it."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if isinstance(value, float):  # numpy float64 included (a float subclass)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float(value)
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays, without importing numpy here
        return strict_json(value.tolist())
    return value


class ResultVersionError(ValueError):
    """A run-result JSON this nkitui cannot read (another schema, or a newer version)."""


@dataclass
class Check:
    id: str  # stable, e.g. "kernel-runs", "output:out", "timed-recheck", "trials"
    title: str
    passed: bool | None  # None: not run (e.g. the kernel never produced outputs)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Check":
        return cls(id=str(d["id"]), title=str(d.get("title", d["id"])), passed=d.get("passed"), detail=str(d.get("detail", "")))


@dataclass
class SeedResult:
    seed: int
    passed: bool | None
    outputs: list[dict[str, Any]] = field(default_factory=list)  # OutputMetrics.to_dict() per output
    error: dict[str, Any] | None = None  # the kernel's error on this seed
    kernel_s: float | None = None  # wall time of the launch (emulator/simulator: host CPU time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SeedResult":
        return cls(seed=int(d["seed"]), passed=d.get("passed"), outputs=list(d.get("outputs", [])),
                   error=d.get("error"), kernel_s=d.get("kernel_s"))

    def output(self, name: str) -> dict[str, Any] | None:
        for o in self.outputs:
            if o.get("name") == name:
                return o
        return None


@dataclass
class RunResult:
    run_id: str
    task_id: str
    status: str
    task_title: str = ""
    task_commit: str | None = None  # git HEAD of the task repository (read by the parent)
    task_dirty: bool | None = None  # uncommitted changes in the judged files at run time
    task_path: str | None = None  # where the task was on the machine that ran it (informational)
    file_hashes: dict[str, str] = field(default_factory=dict)  # sha256 of every judged file
    created_at: str = ""  # ISO 8601 UTC
    finished_at: str = ""
    duration_s: float | None = None
    backend: str | None = None  # emulator | simulator | neuron (None: never chosen)
    backend_requested: str = "auto"
    backend_reason: str = ""
    target: str = "trn2"
    versions: dict[str, Any] = field(default_factory=dict)  # nkitui, python, numpy, sdk, tools
    seeds: list[int] = field(default_factory=list)
    precise: bool = True
    tolerances: dict[str, dict[str, Any]] = field(default_factory=dict)  # output -> policy
    seed_results: list[SeedResult] = field(default_factory=list)
    numerics: dict[str, Any] | None = None  # nkitui.evaluate.numerics.NumericsAudit.to_dict(): first-seed
    # metrics, tolerance advice, trials, precision isolation, mutants, goldens, numerics findings
    checks: list[Check] = field(default_factory=list)
    timing: dict[str, Any] | None = None  # kind: measured | estimated (see docs/executor.md)
    utilisation: dict[str, Any] | None = None  # PerfRecord.to_json() (source: estimated | measured)
    findings: list[dict[str, Any]] = field(default_factory=list)  # Finding.to_dict()
    phases: list[dict[str, Any]] = field(default_factory=list)  # name, status, duration_s, detail
    error: dict[str, Any] | None = None  # kind, message, file, line, traceback
    limits: dict[str, Any] = field(default_factory=dict)
    sandbox: dict[str, Any] = field(default_factory=dict)  # refused writes/processes, credential lookups
    log_excerpt: list[str] = field(default_factory=list)  # last lines of the run's log
    notes: list[str] = field(default_factory=list)

    # -- status ----------------------------------------------------------------------------------
    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def exit_code(self) -> int:
        """The CONTRACT's exit code: 0 all checks pass, 1 a check failed, 2 task/command invalid."""
        if self.status == "passed":
            return 0
        if self.status == "invalid":
            return 2
        return 1

    @property
    def short_id(self) -> str:
        return self.run_id.rsplit("-", 1)[-1] if "-" in self.run_id else self.run_id

    @property
    def advice(self) -> list[dict[str, Any]]:
        """Tolerance advice per output (ToleranceAdvice dicts)."""
        return list((self.numerics or {}).get("advice") or [])

    def numerics_audit(self) -> Any:
        """The numerics results as nkitui.evaluate.numerics.NumericsAudit (None when none were made)."""
        if not self.numerics:
            return None
        from nkitui.evaluate.numerics.audit import NumericsAudit

        return NumericsAudit.from_dict(self.numerics)

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def output_names(self) -> list[str]:
        names: list[str] = list(self.tolerances)
        for s in self.seed_results:
            for o in s.outputs:
                if o.get("name") not in names:
                    names.append(o["name"])
        return names

    def worst(self, output: str, key: str) -> float | None:
        """The worst value of a metric (e.g. "max_abs") for `output` over all seeds."""
        values = []
        for s in self.seed_results:
            o = s.output(output)
            if o is not None and isinstance(o.get(key), (int, float)):
                values.append(float(o[key]))
            elif o is not None and o.get(key) in ("inf", "nan"):
                values.append(float(o[key]))
        return max(values) if values else None

    def summary_line(self) -> str:
        """One line to cite a run, e.g. in a review comment."""
        backend = f"{self.backend or 'no backend'}/{self.target}"
        passed = sum(1 for c in self.checks if c.passed)
        total = sum(1 for c in self.checks if c.passed is not None)
        time_part = ""
        if self.timing and isinstance(self.timing.get("median_us"), (int, float)):
            time_part = f", {self.timing['kind']} {self.timing['median_us']:.1f} µs"
        return f"run {self.run_id} ({backend}): {self.status}, {passed}/{total} checks{time_part}"

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON-ready: NaN and infinities anywhere (timing, utilisation, ...) become the
        strings "nan", "inf", "-inf", as in the numerics results."""
        d = strict_json(asdict(self))
        return {"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, **d}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunResult":
        if not isinstance(d, dict):
            raise ResultVersionError("a run result must be a JSON object")
        schema, version = d.get("schema"), d.get("schema_version")
        if schema != SCHEMA_NAME:
            raise ResultVersionError(f"not an nkitui run result (schema {schema!r}, expected {SCHEMA_NAME!r})")
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            hint = "upgrade nkitui to read it" if newer else "it was written by an incompatible nkitui"
            raise ResultVersionError(f"run result schema version {version!r} is not supported (this nkitui reads {SCHEMA_VERSION}); {hint}")
        for key in ("run_id", "task_id", "status"):
            if not isinstance(d.get(key), str):
                raise ResultVersionError(f"run result lacks the field {key!r}")
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in d.items() if k in known}
        values["seed_results"] = [SeedResult.from_dict(s) for s in d.get("seed_results", [])]
        values["checks"] = [Check.from_dict(c) for c in d.get("checks", [])]
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "RunResult":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ResultVersionError(f"run result is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

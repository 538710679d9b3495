"""The result of one run: versioned, self-contained JSON that can be reopened, compared (A/B) and
cited as evidence in a review (docs/executor.md has the field reference).

    result = RunResult.from_json(text)     # ResultVersionError for a schema or version it cannot read
    text = result.to_json()

Every part is a typed record (RunError, Check, PhaseRecord, SeedResult with OutputMetrics, Timing,
Sandbox, NumericsAudit, Finding, PerfRecord for utilisation) written and read by the one codec
(nkitui.common.codec). Version 2 holds typed records; a version-1 file (written before the trust
split) is upgraded on reading.

Statuses: passed (every check passed), failed (a check failed, including a kernel that raised),
invalid (the task, its reference or the request is unusable), and for runs that did not finish:
timeout, cancelled, crashed, memory-limit, cpu-limit, killed, internal-error.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from nkitui.common import units
from nkitui.common.codec import CodecError, Record, decode_versioned, encode_versioned, register_adapter
from nkitui.common.findings import Finding
from nkitui.common.redact import redact_obj
from nkitui.executor.limits import Limits
from nkitui.executor.timing import TimingPolicy

if TYPE_CHECKING:  # bound at run time by bind_types(): the evaluator imports this module before numpy
    from nkitui.evaluate.numerics.audit import NumericsAudit
    from nkitui.evaluate.numerics.metrics import OutputMetrics
    from nkitui.evaluate.numerics.tolerance import TolerancePolicy
    from nkitui.perf.summary import PerfRecord

SCHEMA_VERSION = 2
SCHEMA_NAME = "nkitui.run-result"

FINISHED_STATUSES = ("passed", "failed", "invalid")
UNFINISHED_STATUSES = ("timeout", "cancelled", "crashed", "memory-limit", "cpu-limit", "killed", "internal-error")
STATUSES = FINISHED_STATUSES + UNFINISHED_STATUSES

_bound = False


def bind_types() -> None:
    """Import the nested records' types (numerics, perf) on first encode or decode, so that importing
    this module stays cheap for the worker's first event. The parent calls it on a thread while the
    worker runs (nkitui.evaluate.run.start); a second caller meanwhile waits on the import locks and
    binds the same classes again, which is harmless."""
    global _bound
    if _bound:
        return
    from nkitui.evaluate.numerics.audit import NumericsAudit
    from nkitui.evaluate.numerics.metrics import OutputMetrics
    from nkitui.evaluate.numerics.tolerance import TolerancePolicy
    from nkitui.perf.summary import PerfRecord

    globals().update(NumericsAudit=NumericsAudit, OutputMetrics=OutputMetrics, TolerancePolicy=TolerancePolicy,
                     PerfRecord=PerfRecord)
    register_adapter(PerfRecord, PerfRecord.to_json, PerfRecord.from_json)
    _bound = True


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
    """A run-result JSON this nkitui cannot read (another schema, a newer version, or a field that
    does not fit; the message names it)."""


@dataclass(frozen=True)
class RunError(Record):
    kind: str
    message: str
    file: str | None = None  # task-relative
    line: int | None = None
    traceback: str = ""

    @property
    def location(self) -> str:
        if not self.file:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Check(Record):
    id: str  # stable, e.g. "kernel-runs", "output:out", "timed-recheck", "trials"
    title: str
    passed: bool | None  # None: not run (e.g. the kernel never produced outputs)
    detail: str = ""


@dataclass(frozen=True)
class PhaseRecord(Record):
    name: str
    status: str  # ok | failed | skipped
    duration_s: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class SeedResult(Record):
    seed: int
    passed: bool | None
    outputs: tuple[OutputMetrics, ...] = ()  # per output, in manifest order
    error: RunError | None = None  # the kernel's error on this seed
    kernel_s: float | None = None  # wall time of the launch (emulator/simulator: host CPU time)

    def output(self, name: str) -> OutputMetrics | None:
        return next((o for o in self.outputs if o.name == name), None)


@dataclass(frozen=True)
class DeviceLatency(Record):
    """nki.benchmark's device latency (legacy namespace, on hardware)."""

    method: str = ""
    warmup: int = 0
    iters: int = 0
    percentiles_us: dict[str, float] = field(default_factory=dict)
    median_us: float | None = None


@dataclass(frozen=True)
class Timing(Record):
    """`estimated` (the cost model) or `measured` (timed launches on hardware)."""

    kind: Literal["estimated", "measured"]
    median_us: float | None = None
    unit: str = "us"
    source: str = ""  # estimated: what estimated it
    note: str = ""
    method: str = ""  # measured: what was timed
    iqr_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    std_us: float | None = None
    ci95_us: tuple[float, float] | None = None
    samples: int = 0
    warmup: int = 0
    stopped: str = ""
    rechecked: int = 0
    recheck_failures: tuple[str, ...] = ()
    recheck_failure_count: int = 0
    device: DeviceLatency | None = None
    profile_total_time_us: float | None = None
    policy: TimingPolicy | None = None


@dataclass(frozen=True)
class Violation(Record):
    """Something the task's code tried and a guard refused (or a credential it looked up)."""

    action: str  # write | process | credential | introspection
    target: str = ""
    detail: str = ""
    file: str | None = None
    line: int | None = None
    process: str = "kernel"  # kernel | reference


@dataclass(frozen=True)
class Confinement(Record):
    """What one untrusted process reported as active (nkitui.executor.confine's ConfinementReport,
    plus the introspection guard) before it imported task code."""

    active: tuple[str, ...] = ()
    degraded: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    enter_ms: float | None = None


@dataclass(frozen=True)
class Observed(Record):
    """What the evaluator saw in /proc/<child>/status once the child said it was confined."""

    seccomp: int | None = None  # 2: a filter is installed
    no_new_privs: bool | None = None
    own_session: bool | None = None


@dataclass(frozen=True)
class Refusal(Record):
    """A guard refusal the child sent the moment it happened (the child cannot take it back)."""

    message: str
    file: str | None = None
    line: int | None = None
    process: str = "kernel"


@dataclass(frozen=True)
class Sandbox(Record):
    violations: tuple[Violation, ...] = ()
    confinement: dict[str, Confinement] = field(default_factory=dict)  # by process: "kernel", "reference"
    observed: dict[str, Observed] = field(default_factory=dict)  # by process
    refusals_received: tuple[Refusal, ...] = ()
    summary: str = ""  # "sandbox: seccomp, landlock, ...; degraded: ..." (the kernel process's, checked against /proc)


@dataclass
class RunResult(Record):
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
    tolerances: dict[str, TolerancePolicy] = field(default_factory=dict)  # output -> policy
    seed_results: list[SeedResult] = field(default_factory=list)
    numerics: NumericsAudit | None = None  # first-seed metrics, advice, trials, precision, mutants, goldens
    checks: list[Check] = field(default_factory=list)
    timing: Timing | None = None
    utilisation: PerfRecord | None = None  # estimated (cost model) or measured (profiler)
    findings: list[Finding] = field(default_factory=list)
    phases: list[PhaseRecord] = field(default_factory=list)
    error: RunError | None = None
    limits: Limits | None = None
    sandbox: Sandbox = field(default_factory=Sandbox)
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
    def advice(self) -> list[Any]:
        """Tolerance advice per output (ToleranceAdvice records)."""
        return list(self.numerics.advice) if self.numerics else []

    def numerics_audit(self) -> NumericsAudit | None:
        """The numerics results (kept for callers of the former dict form)."""
        return self.numerics

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def check(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def output_names(self) -> list[str]:
        names: list[str] = list(self.tolerances)
        for s in self.seed_results:
            for o in s.outputs:
                if o.name not in names:
                    names.append(o.name)
        return names

    def worst(self, output: str, key: str) -> float | None:
        """The worst value of a metric (e.g. "max_abs") for `output` over all seeds."""
        values = []
        for s in self.seed_results:
            o = s.output(output)
            value = getattr(o, key, None) if o is not None else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.append(float(value))
        return max(values) if values else None

    def summary_line(self) -> str:
        """One line to cite a run, e.g. in a review comment."""
        backend = f"{self.backend or 'no backend'}/{self.target}"
        passed = sum(1 for c in self.checks if c.passed)
        total = sum(1 for c in self.checks if c.passed is not None)
        time_part = ""
        if self.timing is not None and self.timing.median_us is not None and math.isfinite(self.timing.median_us):
            time_part = f", {self.timing.kind} {units.time_us(self.timing.median_us)}"
        return f"run {self.run_id} ({backend}): {self.status}, {passed}/{total} checks{time_part}"

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Strict JSON: NaN and infinities anywhere become "nan", "inf", "-inf"."""
        bind_types()
        # no credential shape (an AWS key a kernel printed, say) is ever stored or committed
        encoded: dict[str, Any] = redact_obj(strict_json(encode_versioned(self, SCHEMA_NAME, SCHEMA_VERSION)))
        return encoded

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: Any, where: str = "") -> "RunResult":
        bind_types()
        try:
            decoded: RunResult = decode_versioned(cls, d, SCHEMA_NAME, SCHEMA_VERSION, migrations={1: upgrade_v1},
                                                  what="run result")
            return decoded
        except CodecError as exc:
            raise ResultVersionError(str(exc)) from None

    @classmethod
    def from_json(cls, text: str) -> "RunResult":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ResultVersionError(f"run result is not valid JSON: {exc}") from exc
        return cls.from_dict(data)


def upgrade_v1(d: dict[str, Any]) -> dict[str, Any]:
    """A version-1 result (dicts where version 2 has records) in version 2's form.

    Version 1 wrote the same keys; what changes is what is allowed to be missing or loose: an error
    without its optional keys, a timing or utilisation that is not a record, violations without the
    process that made them."""
    out = dict(d)
    for key in ("run_id", "task_id", "status"):
        if not isinstance(out.get(key), str):
            raise CodecError(f"{key}: required field is missing")
    if isinstance(out.get("error"), dict):
        out["error"] = {"kind": "error", "message": "", **out["error"]}
    for sr in out.get("seed_results") or []:
        if isinstance(sr, dict) and isinstance(sr.get("error"), dict):
            sr["error"] = {"kind": "error", "message": "", **sr["error"]}
    timing = out.get("timing")
    if isinstance(timing, dict):
        if timing.get("kind") not in ("estimated", "measured"):
            out["timing"] = None
        elif isinstance(timing.get("device"), dict) is False:
            timing.pop("device", None)
    sandbox = out.get("sandbox")
    if isinstance(sandbox, dict):  # version 1: one worker ran the kernel (and the reference)
        upgraded: dict[str, Any] = {
            "violations": [dict(v, target=v.get("target") or "", detail=v.get("detail") or "")
                           for v in sandbox.get("violations", []) if isinstance(v, dict) and v.get("action")],
            "refusals_received": [r for r in sandbox.get("refusals_received", []) if isinstance(r, dict) and r.get("message")],
            "summary": sandbox.get("summary") if isinstance(sandbox.get("summary"), str) else "",
        }
        if isinstance(sandbox.get("confinement"), dict):
            upgraded["confinement"] = {"kernel": {k: v for k, v in sandbox["confinement"].items() if k != "summary"}}
        if isinstance(sandbox.get("observed"), dict):
            upgraded["observed"] = {"kernel": sandbox["observed"]}
        out["sandbox"] = upgraded
    else:
        out["sandbox"] = {}
    if not out.get("limits"):
        out["limits"] = None
    utilisation = out.get("utilisation")
    if utilisation is not None and not (isinstance(utilisation, dict) and utilisation.get("version") == 1):
        out["utilisation"] = None
    return out

"""Rubrics: versioned TOML templates of the criteria an auditor scores.

A rubric has an id and a version (both go into every review record), criteria with guidance, a
scale, a weight and a required flag, the verdicts an auditor may give, and verdict rules: what the
scores must be for a verdict (`accept` needs numerical correctness of at least 4), checked when a
draft is validated; a rule blocks submitting unless the draft overrides it with a reason. nkitui ships built-in
rubrics (nkitui/review/rubrics/<id>.toml); a task may ship its own and name it in task.toml
(`rubric = "review/rubric.toml"`). See docs/review-format.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Union

from nkitui.review.errors import RubricError
from nkitui.common.fields import FieldReader, Table
from nkitui.task.problems import Problem

ScaleKind = Literal["range", "pass_fail", "labels"]
SCALE_KINDS: tuple[str, ...] = ("range", "pass_fail", "labels")
ScoreValue = Union[int, float, str]  # a number on a range scale, "pass"/"fail", or a label
DEFAULT_VERDICTS: tuple[str, ...] = ("accept", "revise", "reject")
RUBRIC_DOCS = "docs/review-format.md#rubric-files"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_CRITERION_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_RANGE_STEPS = 100
RuleSeverity = Literal["blocker", "warning"]
RULE_SUBJECTS: tuple[str, ...] = ("all", "any")  # besides criterion ids
RULE_OPERATORS: tuple[str, ...] = ("<=", ">=", "==", "!=", "<", ">")
_REQUIREMENT_RE = re.compile(r"^\s*(?P<subject>[A-Za-z0-9_-]+)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>\S.*?)\s*$")
MIN_OVERRIDE_REASON = 10  # characters: an override needs a reason, not a shrug


@dataclass(frozen=True)
class Scale:
    """How a criterion is scored: a numeric range, pass/fail, or ordered labels (worst first)."""

    kind: ScaleKind
    min: float = 1
    max: float = 5
    step: float = 1
    labels: tuple[str, ...] = ()

    @property
    def integral(self) -> bool:
        return all(float(x).is_integer() for x in (self.min, self.max, self.step))

    def values(self) -> list[ScoreValue]:
        """Every allowed value, worst first."""
        if self.kind == "pass_fail":
            return ["fail", "pass"]
        if self.kind == "labels":
            return list(self.labels)
        count = int(round((self.max - self.min) / self.step))
        if self.integral:
            return [int(self.min) + i * int(self.step) for i in range(count + 1)]
        return [round(self.min + i * self.step, 10) for i in range(count + 1)]

    def check(self, value: Any) -> str | None:
        """None when `value` is allowed on this scale, else what is wrong (a sentence)."""
        if self.kind == "range":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"expected a number from {self.describe()}, got {value!r}"
            if value < self.min or value > self.max:
                return f"{_fmt(value)} is outside {self.describe()}"
            steps = (value - self.min) / self.step
            if abs(steps - round(steps)) > 1e-9:
                return f"{_fmt(value)} is not on the scale's steps of {_fmt(self.step)} ({self.describe()})"
            return None
        allowed = self.values()
        if not isinstance(value, str) or value not in allowed:
            return f"expected one of {', '.join(map(str, allowed))}, got {value!r}"
        return None

    def normalize(self, value: ScoreValue) -> ScoreValue:
        """The canonical form of an allowed value (4.0 -> 4 on an integral range)."""
        if self.kind == "range" and self.integral and isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    def ordinal(self, value: ScoreValue) -> float:
        """A number that orders the values (the value itself on a range, the position otherwise)."""
        if self.kind == "range":
            return float(value)
        return float(self.values().index(value))

    def fraction(self, value: ScoreValue) -> float:
        """The value as a fraction of the way from the worst (0.0) to the best (1.0)."""
        if self.kind == "range":
            return (float(value) - self.min) / (self.max - self.min)
        allowed = self.values()
        return allowed.index(value) / (len(allowed) - 1)

    @property
    def measurement(self) -> Literal["ordinal", "nominal"]:
        """Level of measurement for agreement statistics: pass/fail is nominal, the rest ordered."""
        return "nominal" if self.kind == "pass_fail" else "ordinal"

    def describe(self) -> str:
        if self.kind == "range":
            step = "" if self.step == 1 else f" in steps of {_fmt(self.step)}"
            return f"{_fmt(self.min)}..{_fmt(self.max)}{step}"
        if self.kind == "pass_fail":
            return "pass | fail"
        return " < ".join(self.labels)

    def parse_text(self, text: str) -> ScoreValue:
        """Turn what an auditor typed into a value on this scale; raises ValueError saying what is allowed."""
        raw = text.strip()
        value: Any = raw
        if self.kind == "range":
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    raise ValueError(f"expected a number from {self.describe()}, got {raw!r}") from None
        elif self.kind == "pass_fail":
            value = {"p": "pass", "f": "fail", "y": "pass", "n": "fail"}.get(raw.lower(), raw.lower())
        problem = self.check(value)
        if problem:
            raise ValueError(problem)
        return self.normalize(value)

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "range":
            d: dict[str, Any] = {"kind": "range", "min": self.normalize(self.min), "max": self.normalize(self.max)}
            if self.step != 1:
                d["step"] = self.step
            return d
        if self.kind == "labels":
            return {"kind": "labels", "labels": list(self.labels)}
        return {"kind": "pass_fail"}


@dataclass(frozen=True)
class Criterion:
    id: str
    title: str
    guidance: str  # what to look at and how to judge it, as an expert would explain it
    scale: Scale
    weight: float = 1.0
    required: bool = True
    levels: dict[str, str] = field(default_factory=dict)  # str(value) -> what that value means

    def level_text(self, value: ScoreValue | None) -> str:
        if value is None:
            return ""
        return self.levels.get(_fmt(value), "")


_COMPARE = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class Requirement:
    """One condition of a verdict rule: `numerical_correctness >= 4`, `all >= 3` (every scored
    criterion whose scale has that value), `any <= 2` (at least one of them)."""

    subject: str  # a criterion id, "all" or "any"
    op: str  # one of RULE_OPERATORS
    value: str  # as written; parsed on each criterion's scale
    text: str  # the requirement as written in the rubric

    def holds_for(self, crit: Criterion, score: ScoreValue) -> bool | None:
        """Whether `score` of `crit` meets the requirement (None: the value is not on this scale)."""
        try:
            wanted = crit.scale.parse_text(self.value)
        except ValueError:
            return None
        return bool(_COMPARE[self.op](crit.scale.ordinal(score), crit.scale.ordinal(wanted)))


@dataclass(frozen=True)
class VerdictRule:
    """What the scores must be for a verdict. A blocker stops submitting unless the draft overrides it
    with a reason (or, with override = false, always); a warning is shown and does not block."""

    id: str
    verdicts: tuple[str, ...]
    requires: tuple[Requirement, ...]
    message: str
    severity: RuleSeverity = "blocker"
    overridable: bool = True


@dataclass(frozen=True)
class RuleViolation:
    rule: VerdictRule
    failures: tuple[str, ...]  # what is wrong, one sentence each: "Numerical correctness is 1 (needs >= 4)"

    def describe(self) -> str:
        return f"{self.rule.message} ({'; '.join(self.failures)})"


@dataclass(frozen=True)
class Rubric:
    id: str
    version: str
    title: str
    criteria: tuple[Criterion, ...]
    description: str = ""
    verdicts: tuple[str, ...] = DEFAULT_VERDICTS
    verdict_guidance: dict[str, str] = field(default_factory=dict)
    source: str = ""  # "builtin" or the path the rubric was read from
    verdict_rules: tuple[VerdictRule, ...] = ()

    def rule(self, rule_id: str) -> VerdictRule | None:
        return next((r for r in self.verdict_rules if r.id == rule_id), None)

    def check_verdict(self, verdict: str | None, scores: Mapping[str, ScoreValue | None]) -> list[RuleViolation]:
        """The verdict rules `verdict` breaks with these scores. Unscored criteria are not judged here
        (a required one is an error of its own); scores off their scale are left out."""
        if not verdict:
            return []
        broken: list[RuleViolation] = []
        for rule in self.verdict_rules:
            if verdict not in rule.verdicts:
                continue
            failures: list[str] = []
            for req in rule.requires:
                failures += self._failures(req)(scores)
            if failures:
                broken.append(RuleViolation(rule, tuple(failures)))
        return broken

    def _failures(self, req: Requirement) -> Callable[[Mapping[str, ScoreValue | None]], list[str]]:
        def scored(scores: Mapping[str, ScoreValue | None]) -> list[tuple[Criterion, ScoreValue]]:
            out = []
            for c in self.criteria:
                value = scores.get(c.id)
                if value is not None and c.scale.check(value) is None:
                    out.append((c, value))
            return out

        def check(scores: Mapping[str, ScoreValue | None]) -> list[str]:
            pairs = scored(scores)
            if req.subject not in RULE_SUBJECTS:
                pairs = [(c, v) for c, v in pairs if c.id == req.subject]
            judged = [(c, v, ok) for c, v in pairs if (ok := req.holds_for(c, v)) is not None]
            if not judged:
                return []
            if req.subject == "any":
                if any(ok for _, _, ok in judged):
                    return []
                return [f"no criterion is {req.op} {req.value} (" + ", ".join(f"{c.title} {_fmt(v)}" for c, v, _ in judged) + ")"]
            return [f"{c.title} is {_fmt(v)} (needs {req.op} {req.value})" for c, v, ok in judged if not ok]

        return check

    def criterion(self, criterion_id: str) -> Criterion | None:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        return None

    @property
    def criterion_ids(self) -> list[str]:
        return [c.id for c in self.criteria]

    def weighted_score(self, scores: Mapping[str, ScoreValue | None]) -> float | None:
        """Weighted mean of the scored criteria as a fraction 0..1 (None when nothing is scored).

        Unscored and unknown criteria are left out rather than counted as zero, so a partial draft
        shows the score it is heading for.
        """
        total = weight = 0.0
        for c in self.criteria:
            value = scores.get(c.id)
            if value is None or c.scale.check(value) is not None or c.weight <= 0:
                continue
            total += c.weight * c.scale.fraction(value)
            weight += c.weight
        return total / weight if weight > 0 else None


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- loading ---------------------------------------------------------------------------------------

def builtin_rubric_ids() -> list[str]:
    folder = resources.files("nkitui.review") / "rubrics"
    return sorted(entry.name[: -len(".toml")] for entry in folder.iterdir() if entry.name.endswith(".toml"))


def load_builtin_rubric(rubric_id: str) -> Rubric:
    folder = resources.files("nkitui.review") / "rubrics"
    entry = folder / f"{rubric_id}.toml"
    if not _ID_RE.match(rubric_id) or not entry.is_file():
        known = ", ".join(builtin_rubric_ids())
        raise RubricError([Problem("task.toml", "rubric", f"no built-in rubric {rubric_id!r}",
                                   f"use one of {known}, or a path to a rubric .toml inside the task")])
    return parse_rubric(entry.read_text(encoding="utf-8"), f"builtin:{rubric_id}", source="builtin")


def load_rubric_file(path: Path, display: str | None = None) -> Rubric:
    shown = display or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RubricError([Problem(shown, "", f"cannot read the rubric: {exc.strerror or exc}",
                                   "check the path in task.toml's `rubric` field")]) from None
    reader = FieldReader(shown, RUBRIC_DOCS)
    doc = reader.parse_bytes(raw)
    if doc is None:
        raise RubricError(reader.problems)
    return _read_rubric(doc, reader, source=str(path))


def load_rubric(ref: str, task_root: Path | None = None) -> Rubric:
    """A rubric by reference: a built-in id (e.g. "nki-port-audit") or a .toml path inside the task."""
    if ref.endswith(".toml") or "/" in ref or "\\" in ref:
        base = (task_root or Path.cwd()).resolve()
        path = (base / ref).resolve()
        try:
            path.relative_to(base)
        except ValueError:
            raise RubricError([Problem("task.toml", "rubric", f"rubric path {ref!r} points outside the task folder",
                                       "keep the rubric file inside the task folder")]) from None
        return load_rubric_file(path, display=ref)
    return load_builtin_rubric(ref)


def rubric_for_task(task: Any) -> Rubric:
    """The rubric a task asks for (task.toml's `rubric`, default nki-port-audit)."""
    return load_rubric(task.rubric, task.root)


def parse_rubric(text: str, display: str, source: str = "") -> Rubric:
    reader = FieldReader(display, RUBRIC_DOCS)
    doc = reader.parse_text(text)
    if doc is None:
        raise RubricError(reader.problems)
    return _read_rubric(doc, reader, source=source or display)


def _read_rubric(doc: Table, r: FieldReader, source: str) -> Rubric:
    r.unknown_keys(doc, {"schema", "id", "version", "title", "description", "verdicts", "verdict_guidance", "criteria",
                         "verdict_rules"}, "")
    schema = r.int_(doc, "schema", "schema", minimum=1)
    if schema is not None and schema > 1:
        r.error("schema", f"rubric schema {schema} is newer than this nkitui understands (1)", "upgrade nkitui or write schema = 1")
    rubric_id = r.str_(doc, "id", "id", required=True, example='"my-rubric"')
    if rubric_id is not None and not _ID_RE.match(rubric_id):
        r.error("id", f"rubric id {rubric_id!r} has characters other than letters, digits, '_', '.', '-'", 'write e.g. id = "my-rubric"')
    version = r.str_(doc, "version", "version", required=True, example='"1.0"')
    title = r.str_(doc, "title", "title", example='"Kernel port audit"') or rubric_id or ""
    description = r.str_(doc, "description", "description", allow_empty=True) or ""

    verdicts = tuple(r.str_list(doc, "verdicts", "verdicts", example='["accept", "revise", "reject"]')) or DEFAULT_VERDICTS
    if len(set(verdicts)) != len(verdicts):
        r.error("verdicts", "a verdict is listed twice", "list each verdict once")
    guidance_table = r.table(doc, "verdict_guidance", "verdict_guidance") or {}
    verdict_guidance: dict[str, str] = {}
    for key in guidance_table:
        text = r.str_(guidance_table, key, f"verdict_guidance.{key}")
        if key not in verdicts:
            r.error(f"verdict_guidance.{key}", f"{key!r} is not one of the verdicts", f"use one of {', '.join(verdicts)}")
        elif text:
            verdict_guidance[key] = text.strip()

    criteria: list[Criterion] = []
    seen: set[str] = set()
    for i, table in enumerate(r.table_list(doc, "criteria", "criteria", required=True)):
        crit = _read_criterion(table, f"criteria[{i}]", r)
        if crit is None:
            continue
        if crit.id in seen:
            r.error(f"criteria[{i}].id", f"criterion id {crit.id!r} is used twice", "give every criterion its own id")
            continue
        seen.add(crit.id)
        criteria.append(crit)
    if criteria and sum(c.weight for c in criteria) <= 0:
        r.error("criteria", "every criterion has weight 0", "give at least one criterion a positive weight")
    rules = _read_verdict_rules(doc, r, verdicts, criteria)

    if r.errors or rubric_id is None or version is None:
        raise RubricError(r.problems)
    return Rubric(id=rubric_id, version=version, title=title, criteria=tuple(criteria), description=description.strip(),
                  verdicts=verdicts, verdict_guidance=verdict_guidance, source=source, verdict_rules=rules)


def _read_verdict_rules(doc: Table, r: FieldReader, verdicts: tuple[str, ...],
                        criteria: list[Criterion]) -> tuple[VerdictRule, ...]:
    rules: list[VerdictRule] = []
    seen: set[str] = set()
    for i, table in enumerate(r.table_list(doc, "verdict_rules", "verdict_rules")):
        where = f"verdict_rules[{i}]"
        r.unknown_keys(table, {"id", "verdicts", "require", "message", "severity", "override"}, f"{where}.")
        rule_id = r.str_(table, "id", f"{where}.id", required=True, example='"accept-needs-correct-numbers"')
        if rule_id is not None and not _CRITERION_RE.match(rule_id):
            r.error(f"{where}.id", f"rule id {rule_id!r} may only hold letters, digits, '_' and '-'",
                    'write e.g. id = "accept-needs-correct-numbers"')
            rule_id = None
        if rule_id is not None and rule_id in seen:
            r.error(f"{where}.id", f"rule id {rule_id!r} is used twice", "give every rule its own id")
            rule_id = None
        applies = tuple(r.str_list(table, "verdicts", f"{where}.verdicts", example='["accept"]'))
        if not applies:
            r.error(f"{where}.verdicts", "a rule names the verdicts it applies to",
                    f"write e.g. verdicts = [\"{verdicts[0]}\"]")
        for v in applies:
            if v not in verdicts:
                r.error(f"{where}.verdicts", f"{v!r} is not one of the verdicts", f"use one of {', '.join(verdicts)}")
        raw = table.get("require")
        texts = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else None
        requires: list[Requirement] = []
        if not texts or not all(isinstance(t, str) for t in texts):
            r.error(f"{where}.require", "expected a requirement or a list of them",
                    'write e.g. require = "numerical_correctness >= 4" or require = ["all >= 3", "any >= 4"]')
        else:
            for text in texts:
                req = _read_requirement(text, f"{where}.require", r, criteria)
                if req is not None:
                    requires.append(req)
        message = r.str_(table, "message", f"{where}.message", required=True,
                         example='"An accepted port has numerical correctness of at least 4"')
        severity = r.str_(table, "severity", f"{where}.severity", example='"blocker"') or "blocker"
        if severity not in ("blocker", "warning"):
            r.error(f"{where}.severity", f"unknown severity {severity!r}", 'use "blocker" (the default) or "warning"')
        overridable = r.bool_(table, "override", f"{where}.override", default=True)
        if rule_id is None or not applies or not requires or message is None:
            continue
        seen.add(rule_id)
        rules.append(VerdictRule(id=rule_id, verdicts=applies, requires=tuple(requires), message=message.strip(),
                                 severity="warning" if severity == "warning" else "blocker", overridable=overridable))
    return tuple(rules)


def _read_requirement(text: str, where: str, r: FieldReader, criteria: list[Criterion]) -> Requirement | None:
    m = _REQUIREMENT_RE.match(text)
    if m is None:
        r.error(where, f"{text!r} is not a requirement",
                "write <criterion id, all or any> <op> <value>, op one of < <= > >= == !=, "
                'e.g. "numerical_correctness >= 4"')
        return None
    subject, op, value = m["subject"], m["op"], m["value"].strip().strip('"').strip("'")
    req = Requirement(subject=subject, op=op, value=value, text=text.strip())
    if subject in RULE_SUBJECTS:
        targets = criteria
    else:
        targets = [c for c in criteria if c.id == subject]
        if not targets:
            known = ", ".join([c.id for c in criteria] + list(RULE_SUBJECTS))
            r.error(where, f"{subject!r} in {text!r} is not a criterion of the rubric", f"use one of: {known}")
            return None
    valid = [c for c in targets if _parses(c, value)]
    if not valid:
        scales = "; ".join(f"{c.id}: {c.scale.describe()}" for c in targets[:4])
        r.error(where, f"{value!r} in {text!r} is not a value of the scale ({scales})",
                "compare with a value the criterion can be scored")
        return None
    return req


def _parses(crit: Criterion, value: str) -> bool:
    try:
        crit.scale.parse_text(value)
    except ValueError:
        return False
    return True


def _read_criterion(table: Table, where: str, r: FieldReader) -> Criterion | None:
    r.unknown_keys(table, {"id", "title", "guidance", "scale", "weight", "required", "levels"}, f"{where}.")
    crit_id = r.str_(table, "id", f"{where}.id", required=True, example='"numerical_correctness"')
    if crit_id is not None and not _CRITERION_RE.match(crit_id):
        r.error(f"{where}.id", f"criterion id {crit_id!r} may only hold letters, digits, '_' and '-'",
                'write e.g. id = "numerical_correctness"')
        crit_id = None
    title = r.str_(table, "title", f"{where}.title", required=True, example='"Numerical correctness"')
    guidance = r.str_(table, "guidance", f"{where}.guidance", required=True, example='"""What to check..."""')
    weight = r.number(table, "weight", f"{where}.weight", minimum=0.0, example="0.25")
    required = r.bool_(table, "required", f"{where}.required", default=True)
    scale = _read_scale(table, f"{where}.scale", r)
    levels: dict[str, str] = {}
    levels_table = r.table(table, "levels", f"{where}.levels") or {}
    if scale is not None:
        allowed = [_fmt(v) for v in scale.values()]
        for key in levels_table:
            text = r.str_(levels_table, key, f"{where}.levels.{key}")
            if key not in allowed:
                r.error(f"{where}.levels.{key}", f"{key!r} is not a value of the scale ({scale.describe()})",
                        f"key the levels by the scale's values: {', '.join(allowed)}")
            elif text:
                levels[key] = text.strip()
    if crit_id is None or title is None or guidance is None or scale is None:
        return None
    return Criterion(id=crit_id, title=title, guidance=guidance.strip(), scale=scale,
                     weight=1.0 if weight is None else float(weight), required=required, levels=levels)


def _read_scale(table: Table, where: str, r: FieldReader) -> Scale | None:
    s = r.table(table, "scale", where, required=True)
    if s is None:
        return None
    r.unknown_keys(s, {"kind", "min", "max", "step", "labels"}, f"{where}.")
    kind = r.str_(s, "kind", f"{where}.kind", required=True, example='"range"')
    if kind is None:
        return None
    if kind not in SCALE_KINDS:
        r.error(f"{where}.kind", f"unknown scale kind {kind!r}", f"use one of {', '.join(SCALE_KINDS)}")
        return None
    if kind == "pass_fail":
        return Scale("pass_fail")
    if kind == "labels":
        labels = r.str_list(s, "labels", f"{where}.labels", example='["poor", "fair", "good"]')
        if len(labels) < 2 or len(set(labels)) != len(labels):
            r.error(f"{where}.labels", "a labels scale needs at least two distinct labels, worst first",
                    'write e.g. labels = ["poor", "fair", "good"]')
            return None
        return Scale("labels", labels=tuple(labels))
    lo = r.number(s, "min", f"{where}.min", required=True, example="1")
    hi = r.number(s, "max", f"{where}.max", required=True, example="5")
    step = r.number(s, "step", f"{where}.step", example="1")
    step = 1 if step is None else step
    if lo is None or hi is None:
        return None
    if hi <= lo:
        r.error(f"{where}.max", f"max ({_fmt(hi)}) must be greater than min ({_fmt(lo)})", "e.g. min = 1, max = 5")
        return None
    if step <= 0:
        r.error(f"{where}.step", f"step must be positive, got {_fmt(step)}", "e.g. step = 1")
        return None
    steps = (hi - lo) / step
    if abs(steps - round(steps)) > 1e-9 or round(steps) > _MAX_RANGE_STEPS:
        r.error(f"{where}.step", f"(max - min) / step must be a whole number of at most {_MAX_RANGE_STEPS} steps",
                "e.g. min = 0, max = 10, step = 1")
        return None
    return Scale("range", min=lo, max=hi, step=step)

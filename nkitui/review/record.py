"""Review records: what one submitted review says, and its TOML form.

A record lives at `reviews/<auditor>/<id>.toml` in the task folder, where id is
`<UTC timestamp>-<short random hex>` (e.g. 20261130T141502Z-3fa9c2d1). Files are never edited after
the commit that adds them. The parser is strict: a corrupt or hand-mangled file raises RecordError
naming the file and field, never anything else, so history and export can report it and move on.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nkitui.review import tomlout
from nkitui.review.errors import RecordError
from nkitui.common.fields import FieldReader, Table
from nkitui.review.rubric import ScoreValue
from nkitui.task.problems import Problem

RECORD_KIND = "nkitui-review"
RECORD_SCHEMA = 1
RECORD_DOCS = "docs/review-format.md#review-records"
EvidenceKind = Literal["finding", "source", "diff", "log", "metric", "run"]
EVIDENCE_KINDS: tuple[str, ...] = ("finding", "source", "diff", "log", "metric", "run")

RECORD_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{4,32}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
AUDITOR_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_HEX_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # sha1 or sha256 object names
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CRITERION_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class Score:
    """One criterion's score (None while unscored) and the auditor's justification."""

    value: ScoreValue | None = None
    comment: str = ""


@dataclass
class LineComment:
    """A comment anchored to lines start..end (1-based, inclusive) of a task file."""

    file: str  # task-relative, forward slashes
    start: int
    end: int
    text: str
    criterion: str | None = None

    @property
    def location(self) -> str:
        return f"{self.file}:{self.start}" if self.start == self.end else f"{self.file}:{self.start}-{self.end}"


@dataclass
class Evidence:
    """A link from a score to what justifies it, with a short excerpt a reader can see without the tool.

    ref by kind — finding: "RULE-ID@file:line"; source: "file:12-18" (lines of a task file);
    diff: "file:12-18" or "<old>..<new>:file:12-18"; log: "<run id>#L120-140"; metric: "name=value [unit]"
    or "<run id>:name=value"; run: a run id (also listed in the record's runs).
    """

    kind: EvidenceKind
    ref: str
    excerpt: str = ""
    criterion: str | None = None

    @classmethod
    def build(cls, kind: EvidenceKind, *, file: str | None = None, line: int | None = None, end_line: int | None = None,
              run_id: str | None = None, rule: str | None = None, metric: str | None = None, value: str | None = None,
              unit: str = "", revision: str | None = None, excerpt: str = "", criterion: str | None = None) -> "Evidence":
        """Evidence with its ref written in the documented form for its kind (what the UI should use)."""
        span = ""
        if line is not None:
            span = f":{line}" if end_line is None or end_line == line else f":{line}-{end_line}"
        if kind == "finding":
            ref = f"{rule or 'finding'}@{file}{span}" if file else (rule or "finding")
        elif kind == "source":
            ref = f"{file}{span}"
        elif kind == "diff":
            ref = f"{revision}:{file}{span}" if revision else f"{file}{span}"
        elif kind == "log":
            lines = f"#L{line}" + (f"-{end_line}" if end_line not in (None, line) else "") if line is not None else ""
            ref = f"{run_id or file or 'log'}{lines}"
        elif kind == "metric":
            body = f"{metric}={value}" + (f" {unit}" if unit else "")
            ref = f"{run_id}:{body}" if run_id else body
        elif kind == "run":
            if not run_id:
                raise ValueError("run evidence needs run_id")
            ref = run_id
        else:
            raise ValueError(f"unknown evidence kind {kind!r}; use one of {', '.join(EVIDENCE_KINDS)}")
        return cls(kind=kind, ref=ref, excerpt=excerpt, criterion=criterion)


@dataclass
class RuleOverride:
    """The auditor gives a verdict a rubric rule forbids (docs/review-format.md#verdict-rules), and why."""

    rule: str  # the rule's id in the rubric
    reason: str


@dataclass
class TaskPin:
    """Which version of the task a review judged."""

    id: str
    commit: str  # HEAD of the task repository when the review was written
    path: str = "."  # task folder relative to the repository root
    files: dict[str, str] = field(default_factory=dict)  # task-relative path -> sha256 of the judged file
    dirty: list[str] = field(default_factory=list)  # judged files that differed from `commit` when judged


@dataclass
class ReviewRecord:
    id: str
    auditor: str
    submitted_at: dt.datetime  # UTC, to the microsecond (orders reviews made within one second)
    tool_version: str
    task: TaskPin
    rubric_id: str
    rubric_version: str
    verdict: str
    summary: str = ""
    scores: dict[str, Score] = field(default_factory=dict)
    comments: list[LineComment] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    schema: int = RECORD_SCHEMA
    overrides: list[RuleOverride] = field(default_factory=list)  # verdict rules overridden, with reasons

    @property
    def score_values(self) -> dict[str, ScoreValue | None]:
        return {cid: s.value for cid, s in self.scores.items()}

    @property
    def relpath(self) -> str:
        """Where the record lives, relative to the task folder."""
        return f"reviews/{self.auditor}/{self.id}.toml"

    def to_toml(self) -> str:
        doc: dict[str, Any] = {
            "schema": self.schema,
            "kind": RECORD_KIND,
            "id": self.id,
            "auditor": self.auditor,
            "submitted_at": self.submitted_at.astimezone(dt.timezone.utc),
            "tool_version": self.tool_version,
            "verdict": self.verdict,
            "summary": self.summary,
            "runs": list(self.runs),
            "rubric": {"id": self.rubric_id, "version": self.rubric_version},
            "task": {"id": self.task.id, "commit": self.task.commit, "path": self.task.path,
                     "dirty": list(self.task.dirty), "files": dict(sorted(self.task.files.items()))},
        }
        doc.update(body_tables(self.scores, self.comments, self.evidence, self.overrides))
        return tomlout.dumps(doc)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (export, `history --json`)."""
        return {
            "schema": self.schema,
            "id": self.id,
            "auditor": self.auditor,
            "submitted_at": self.submitted_at.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z"),
            "tool_version": self.tool_version,
            "task": {"id": self.task.id, "commit": self.task.commit, "path": self.task.path,
                     "files": dict(sorted(self.task.files.items())), "dirty": list(self.task.dirty)},
            "rubric": {"id": self.rubric_id, "version": self.rubric_version},
            "verdict": self.verdict,
            "summary": self.summary,
            "scores": {cid: {"score": s.value, "comment": s.comment} for cid, s in self.scores.items()},
            "comments": [{"file": c.file, "lines": [c.start, c.end], "text": c.text, "criterion": c.criterion}
                         for c in self.comments],
            "evidence": [{"kind": e.kind, "ref": e.ref, "excerpt": e.excerpt, "criterion": e.criterion}
                         for e in self.evidence],
            "runs": list(self.runs),
            "overrides": [{"rule": o.rule, "reason": o.reason} for o in self.overrides],
        }


# -- ids and names ---------------------------------------------------------------------------------

def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def format_timestamp(when: dt.datetime) -> str:
    """Sortable UTC timestamp used in record ids: 20261130T141502Z."""
    return when.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_record_id(when: dt.datetime) -> str:
    return f"{format_timestamp(when)}-{secrets.token_hex(4)}"


def auditor_slug(name: str) -> str:
    """A path-safe auditor name: lower case, letters/digits/'.'/'_'/'-', at most 64 characters."""
    # Accented letters keep their base letter (Zoë -> zoe) instead of splitting the name.
    text = unicodedata.normalize("NFKD", name.strip()).encode("ascii", "ignore").decode("ascii").lower()
    if "@" in text and " " not in text:  # an e-mail address: keep the local part
        text = text.split("@", 1)[0]
    text = re.sub(r"[^a-z0-9._-]+", "-", text)
    text = re.sub(r"-{2,}", "-", text).strip("-._")
    return text[:64].rstrip("-._")


# -- serialisation shared with drafts ------------------------------------------------------------

def body_tables(scores: dict[str, Score], comments: list[LineComment], evidence: list[Evidence],
                overrides: list[RuleOverride] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    score_tables: dict[str, Any] = {}
    for cid, s in scores.items():
        t: dict[str, Any] = {}
        if s.value is not None:
            t["score"] = s.value
        t["comment"] = s.comment
        score_tables[cid] = t
    out["scores"] = score_tables
    if comments:
        out["comments"] = [_drop_none({"file": c.file, "lines": [c.start, c.end], "criterion": c.criterion, "text": c.text})
                           for c in comments]
    if evidence:
        out["evidence"] = [_drop_none({"kind": e.kind, "ref": e.ref, "criterion": e.criterion, "excerpt": e.excerpt})
                           for e in evidence]
    if overrides:
        out["overrides"] = [{"rule": o.rule, "reason": o.reason} for o in overrides]
    return out


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def read_scores(doc: Table, r: FieldReader, *, allow_empty_string: bool) -> dict[str, Score]:
    """[scores.<criterion>] tables. In drafts, score = "" means not scored yet."""
    table = r.table(doc, "scores", "scores") or {}
    out: dict[str, Score] = {}
    for cid, entry in table.items():
        where = f"scores.{cid}"
        if not _CRITERION_RE.match(cid):
            r.error(where, f"criterion id {cid!r} may only hold letters, digits, '_' and '-'", "use the rubric's criterion ids")
            continue
        if not isinstance(entry, dict):
            r.error(where, f"expected a table with score and comment, got {type(entry).__name__}",
                    f'write [scores.{cid}] then score = 4 and comment = "..." on their own lines')
            continue
        r.unknown_keys(entry, {"score", "comment"}, f"{where}.")
        value: Any = entry.get("score")
        if value is not None:
            if allow_empty_string and isinstance(value, str) and not value.strip():
                value = None
            elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
                r.error(f"{where}.score", f"expected a number or a label, got {type(value).__name__}",
                        "write e.g. score = 4, score = \"pass\" or a label of the rubric's scale")
                value = None
            elif isinstance(value, float) and value != value:
                r.error(f"{where}.score", "score is NaN", "write a number from the criterion's scale")
                value = None
            elif isinstance(value, str) and not value.strip():
                r.error(f"{where}.score", "score is an empty string", "write a value from the criterion's scale")
                value = None
        comment = r.str_(entry, "comment", f"{where}.comment", allow_empty=True) or ""
        out[cid] = Score(value=value, comment=comment)
    return out


def read_comments(doc: Table, r: FieldReader) -> list[LineComment]:
    out: list[LineComment] = []
    for i, t in enumerate(r.table_list(doc, "comments", "comments")):
        where = f"comments[{i}]"
        r.unknown_keys(t, {"file", "lines", "text", "criterion"}, f"{where}.")
        path = r.str_(t, "file", f"{where}.file", required=True, example='"kernel_nki.py"')
        if path is not None and not is_task_relative(path):
            r.error(f"{where}.file", f"{path!r} is not a path inside the task folder", 'write it relative to the task folder, e.g. "kernel_nki.py"')
            path = None
        lines = t.get("lines")
        start = end = None
        if isinstance(lines, int) and not isinstance(lines, bool):
            start = end = lines
        elif (isinstance(lines, list) and len(lines) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in lines)):
            start, end = lines
        else:
            r.error(f"{where}.lines", f"expected [first, last] line numbers, got {lines!r:.40}", "write e.g. lines = [12, 18]")
        if start is not None and end is not None and not (1 <= start <= end):
            r.error(f"{where}.lines", f"lines [{start}, {end}] are not 1 <= first <= last", "write e.g. lines = [12, 18]")
            start = None
        text = r.str_(t, "text", f"{where}.text", required=True, example='"why this line matters"')
        criterion = r.str_(t, "criterion", f"{where}.criterion", example='"numerical_correctness"')
        if path is not None and start is not None and end is not None and text is not None:
            out.append(LineComment(file=path, start=start, end=end, text=text, criterion=criterion))
    return out


def read_evidence(doc: Table, r: FieldReader) -> list[Evidence]:
    out: list[Evidence] = []
    for i, t in enumerate(r.table_list(doc, "evidence", "evidence")):
        where = f"evidence[{i}]"
        r.unknown_keys(t, {"kind", "ref", "excerpt", "criterion"}, f"{where}.")
        kind = r.str_(t, "kind", f"{where}.kind", required=True, example='"finding"')
        if kind is not None and kind not in EVIDENCE_KINDS:
            r.error(f"{where}.kind", f"unknown evidence kind {kind!r}", f"use one of {', '.join(EVIDENCE_KINDS)}")
            kind = None
        ref = r.str_(t, "ref", f"{where}.ref", required=True, example='"NKI-PART-001@kernel_nki.py:31"')
        if kind == "run" and ref is not None and not RUN_ID_RE.match(ref):
            r.error(f"{where}.ref", f"{ref!r} is not a run id", "write the run id of a run result")
            ref = None
        excerpt = r.str_(t, "excerpt", f"{where}.excerpt", allow_empty=True) or ""
        criterion = r.str_(t, "criterion", f"{where}.criterion", example='"performance_quality"')
        if kind is not None and ref is not None:
            out.append(Evidence(kind=kind, ref=ref, excerpt=excerpt, criterion=criterion))  # type: ignore[arg-type]  # kind is one of EVIDENCE_KINDS (checked above)
    return out


def read_overrides(doc: Table, r: FieldReader) -> list[RuleOverride]:
    out: list[RuleOverride] = []
    for i, t in enumerate(r.table_list(doc, "overrides", "overrides")):
        where = f"overrides[{i}]"
        r.unknown_keys(t, {"rule", "reason"}, f"{where}.")
        rule = r.str_(t, "rule", f"{where}.rule", required=True, example='"accept-needs-sound-numerics"')
        reason = r.str_(t, "reason", f"{where}.reason", required=True, allow_empty=True,
                        example='"why this verdict despite the rule"')
        if rule is not None and reason is not None:
            out.append(RuleOverride(rule=rule, reason=reason))
    return out


def read_runs(doc: Table, r: FieldReader) -> list[str]:
    runs = r.str_list(doc, "runs", "runs", example='["20261130-141502-ab12"]')
    for run_id in runs:
        if not RUN_ID_RE.match(run_id):
            r.error("runs", f"{run_id!r} is not a run id (letters, digits, '_', '.', ':', '-')", "list run ids as the executor prints them")
            return []
    if len(set(runs)) != len(runs):
        r.warn("runs", "a run id is listed twice", "list each run once")
        runs = list(dict.fromkeys(runs))
    return runs


def read_rubric_ref(doc: Table, r: FieldReader) -> tuple[str | None, str | None]:
    table = r.table(doc, "rubric", "rubric", required=True)
    if table is None:
        return None, None
    r.unknown_keys(table, {"id", "version"}, "rubric.")
    return (r.str_(table, "id", "rubric.id", required=True, example='"nki-port-audit"'),
            r.str_(table, "version", "rubric.version", required=True, example='"1.0"'))


def is_task_relative(path: str) -> bool:
    if not path or path.startswith(("/", "\\")) or "\\" in path or re.match(r"^[A-Za-z]:", path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


# -- records -------------------------------------------------------------------------------------

def parse_record(text: str, display: str) -> ReviewRecord:
    """Parse a record's TOML text; raises RecordError (file + field + fix) for anything malformed."""
    r = FieldReader(display, RECORD_DOCS)
    doc = r.parse_text(text)
    if doc is None:
        raise RecordError(r.problems)
    return _read_record(doc, r)


def load_record(path: Path, display: str | None = None) -> ReviewRecord:
    shown = display or str(path)
    r = FieldReader(shown, RECORD_DOCS)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        r.error("", f"cannot read the review file: {exc.strerror or exc}", "check the file's permissions")
        raise RecordError(r.problems) from None
    doc = r.parse_bytes(raw)
    if doc is None:
        raise RecordError(r.problems)
    record = _read_record(doc, r)
    # The path is part of the contract (reviews/<auditor>/<id>.toml): a renamed or moved file is
    # refused rather than guessed at, because history and merges key on it.
    expected = f"{record.id}.toml"
    if path.name != expected:
        raise RecordError([Problem(shown, "id", f"the file name does not match the record id {record.id!r}",
                                   f"rename the file to {expected}, or restore it from git")])
    if path.parent.name != record.auditor:
        raise RecordError([Problem(shown, "auditor",
                                   f"the record's auditor {record.auditor!r} does not match its folder {path.parent.name!r}",
                                   f"move the file to reviews/{record.auditor}/, or restore it from git")])
    return record


def _read_record(doc: Table, r: FieldReader) -> ReviewRecord:
    r.unknown_keys(doc, {"schema", "kind", "id", "auditor", "submitted_at", "tool_version", "verdict", "summary",
                         "runs", "rubric", "task", "scores", "comments", "evidence", "overrides"}, "")
    schema = r.int_(doc, "schema", "schema", required=True, minimum=1)
    if schema is not None and schema > RECORD_SCHEMA:
        r.error("schema", f"review schema {schema} is newer than this nkitui understands ({RECORD_SCHEMA})", "upgrade nkitui")
    kind = r.str_(doc, "kind", "kind", required=True, example=f'"{RECORD_KIND}"')
    if kind is not None and kind != RECORD_KIND:
        r.error("kind", f"expected kind = {RECORD_KIND!r}, got {kind!r}",
                "this is not a submitted review; drafts are submitted with `nkitui review submit`")
    record_id = r.str_(doc, "id", "id", required=True, example='"20261130T141502Z-3fa9c2d1"')
    if record_id is not None and not RECORD_ID_RE.match(record_id):
        r.error("id", f"{record_id!r} is not a review id (<YYYYMMDDTHHMMSSZ>-<hex>)", "review ids are written by nkitui; restore the file from git")
        record_id = None
    auditor = r.str_(doc, "auditor", "auditor", required=True, example='"alice"')
    if auditor is not None and not AUDITOR_RE.match(auditor):
        r.error("auditor", f"{auditor!r} is not an auditor name (lower-case letters, digits, '.', '_', '-')", "restore the file from git")
        auditor = None
    submitted_at = r.datetime_(doc, "submitted_at", "submitted_at", required=True)
    tool_version = r.str_(doc, "tool_version", "tool_version", required=True, example='"nkitui 0.1.0"')
    verdict = r.str_(doc, "verdict", "verdict", required=True, example='"accept"')
    summary = r.str_(doc, "summary", "summary", allow_empty=True) or ""
    runs = read_runs(doc, r)
    rubric_id, rubric_version = read_rubric_ref(doc, r)
    task = _read_task_pin(doc, r)
    scores = read_scores(doc, r, allow_empty_string=False)
    comments = read_comments(doc, r)
    evidence = read_evidence(doc, r)
    overrides = read_overrides(doc, r)
    if (r.errors or record_id is None or auditor is None or submitted_at is None or tool_version is None
            or verdict is None or rubric_id is None or rubric_version is None or task is None):
        raise RecordError(r.problems)
    return ReviewRecord(id=record_id, auditor=auditor, submitted_at=submitted_at, tool_version=tool_version,
                        task=task, rubric_id=rubric_id, rubric_version=rubric_version, verdict=verdict,
                        summary=summary, scores=scores, comments=comments, evidence=evidence, runs=runs,
                        schema=schema or RECORD_SCHEMA, overrides=overrides)


def _read_task_pin(doc: Table, r: FieldReader) -> TaskPin | None:
    t = r.table(doc, "task", "task", required=True)
    if t is None:
        return None
    r.unknown_keys(t, {"id", "commit", "path", "files", "dirty"}, "task.")
    task_id = r.str_(t, "id", "task.id", required=True, example='"rmsnorm"')
    commit = r.str_(t, "commit", "task.commit", required=True, example='"<40 hex digits>"')
    if commit is not None and not _HEX_RE.match(commit):
        r.error("task.commit", f"{commit!r:.50} is not a git commit id", "restore the file from git")
        commit = None
    path = r.str_(t, "path", "task.path", example='"."') or "."
    if path != "." and not is_task_relative(path):
        r.error("task.path", f"{path!r} is not a relative path", 'write "." or the task folder relative to the repository root')
    files_table = r.table(t, "files", "task.files", required=True) or {}
    files: dict[str, str] = {}
    for rel, digest in files_table.items():
        if not is_task_relative(rel):
            r.error(f"task.files.{rel}", f"{rel!r} is not a path inside the task folder", "restore the file from git")
        elif not isinstance(digest, str) or not _SHA256_RE.match(digest):
            r.error(f"task.files.{rel}", "expected a sha256 hex digest (64 lower-case hex digits)", "restore the file from git")
        else:
            files[rel] = digest
    dirty = r.str_list(t, "dirty", "task.dirty", example='["kernel_nki.py"]')
    if task_id is None or commit is None:
        return None
    return TaskPin(id=task_id, commit=commit, path=path, files=files, dirty=dirty)

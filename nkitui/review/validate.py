"""Check a draft against its rubric and the task before it may be submitted."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from nkitui.review.draft import Draft
from nkitui.review.record import EVIDENCE_KINDS, RUN_ID_RE, is_task_relative
from nkitui.review.rubric import MIN_OVERRIDE_REASON, Rubric
from nkitui.task.problems import Problem

Report = Callable[[str, str, str], None]  # (field, message, fix)


# `file:12` or `file:12-18`, after `RULE@` for findings; a diff across revisions (`a..b:file:..`) is not
# checked against the working tree.
_LOCATED_REF = re.compile(r"^(?:[^@\s]+@)?(?P<file>[^:@\s]+):(?P<start>\d+)(?:-(?P<end>\d+))?$")


def _line_count(path: Path, line_counts: dict[Path, int | None]) -> int | None:
    """Lines of `path` (None when unreadable), read once per validation through `line_counts`."""
    if path not in line_counts:
        try:
            line_counts[path] = len(path.read_bytes().splitlines())
        except OSError:
            line_counts[path] = None
    return line_counts[path]


def _located_ref_problem(ref: str, task_root: Path, line_counts: dict[Path, int | None]) -> tuple[str, str] | None:
    """(message, fix) when a source/finding/diff ref names a task file that is missing or lines past its end."""
    m = _LOCATED_REF.match(ref.strip())
    if m is None or ".." in ref.split(":", 1)[0] or not is_task_relative(m["file"]):
        return None
    target = Path(task_root) / m["file"]
    if not target.is_file():
        return f"{m['file']!r} is not a file of the task", "point the evidence at a file inside the task folder"
    start, end = int(m["start"]), int(m["end"] or m["start"])
    count = _line_count(target, line_counts)
    if count is not None and (start < 1 or end < start or end > max(count, 1)):
        span = f"line {start}" if start == end else f"lines {start}-{end}"
        return (f"{span} is not in {m['file']} ({count} lines)" if start == end else
                f"{span} are not lines of {m['file']} ({count} lines)",
                "point the evidence at lines that exist (file:first-last)")
    return None


def _check_verdict_rules(draft: Draft, rubric: Rubric, error: Report, warn: Report) -> None:
    """The rubric's verdict rules (docs/review-format.md#verdict-rules), and the draft's overrides."""
    broken = {v.rule.id: v for v in rubric.check_verdict(draft.verdict, draft.score_values)}
    for violation in broken.values():
        rule = violation.rule
        what = f"verdict {draft.verdict!r}: {violation.describe()} [rule {rule.id}]"
        if rule.severity == "warning":
            warn("verdict", what, "check the scores and the verdict agree; the rubric lets it through")
            continue
        override = draft.override_for(rule.id)
        if override is not None and rule.overridable and len(override.reason.strip()) >= MIN_OVERRIDE_REASON:
            warn("verdict", f"{what}, overridden: {override.reason.strip()}",
                 "the override and its reason go into the review record")
            continue
        if not rule.overridable:
            error("verdict", what, "change the scores or the verdict: this rule cannot be overridden")
        else:
            error("verdict", what,
                  f"change the scores or the verdict, or override the rule with a reason: [[overrides]] "
                  f'rule = "{rule.id}", reason = "why this verdict all the same"')
    for i, o in enumerate(draft.overrides):
        where = f"overrides[{i}]"
        named = rubric.rule(o.rule)
        if named is None:
            known = ", ".join(r.id for r in rubric.verdict_rules) or "none"
            error(f"{where}.rule", f"{o.rule!r} is not a verdict rule of rubric {rubric.id} v{rubric.version}",
                  f"use one of: {known}")
            continue
        if len(o.reason.strip()) < MIN_OVERRIDE_REASON:
            error(f"{where}.reason", f"the override of {o.rule!r} has no reason worth the name ({o.reason.strip()!r})",
                  f"say in at least {MIN_OVERRIDE_REASON} characters why this verdict stands despite the rule")
        elif not named.overridable:
            error(f"{where}.rule", f"rule {o.rule!r} cannot be overridden (override = false in the rubric)",
                  "change the scores or the verdict, and remove the override")
        elif o.rule not in broken:
            warn(f"{where}.rule", f"rule {o.rule!r} is not broken by verdict {draft.verdict!r} and these scores",
                 "remove the override: nothing needs overriding")


def validate_draft(draft: Draft, rubric: Rubric, task_root: Path | None = None, task_id: str | None = None,
                   display: str = "draft") -> list[Problem]:
    """Every problem that blocks submission (errors) or deserves a look (warnings). Empty = ready.

    The UI calls this live to mark unfinished criteria; `review submit` refuses on any error.
    """
    problems: list[Problem] = list(draft.parse_warnings)

    def error(fld: str, message: str, fix: str) -> None:
        problems.append(Problem(display, fld, message, fix))

    def warn(fld: str, message: str, fix: str) -> None:
        problems.append(Problem(display, fld, message, fix, "warning"))

    if task_id is not None and draft.task_id != task_id:
        error("task_id", f"the draft is for task {draft.task_id!r}, not {task_id!r}",
              f'write task_id = "{task_id}" if this review really is for that task')
    if draft.rubric_id != rubric.id:
        error("rubric.id", f"the draft uses rubric {draft.rubric_id!r} but the task's rubric is {rubric.id!r}",
              "start again from `nkitui review template TASK_DIR`")
        return problems
    if draft.rubric_version != rubric.version:
        warn("rubric.version", f"the draft was written against rubric version {draft.rubric_version}, the task now uses {rubric.version}",
             "check the scores against the current guidance; the record will carry the current version")

    known = ", ".join(rubric.criterion_ids)
    for cid, entry in draft.scores.items():
        crit = rubric.criterion(cid)
        if crit is None:
            error(f"scores.{cid}", f"{cid!r} is not a criterion of rubric {rubric.id} v{rubric.version}",
                  f"remove it or use one of: {known}")
            continue
        if entry.value is not None:
            bad = crit.scale.check(entry.value)
            if bad:
                error(f"scores.{cid}.score", f"{crit.title}: {bad}", f"score it on {crit.scale.describe()}")
    for crit in rubric.criteria:
        scored = draft.scores.get(crit.id)
        if crit.required and (scored is None or scored.value is None):
            error(f"scores.{crit.id}.score", f"required criterion {crit.title!r} has no score",
                  f"score it on {crit.scale.describe()} (see its guidance in the rubric)")

    if not draft.verdict:
        error("verdict", "no verdict", f"set verdict to one of: {', '.join(rubric.verdicts)}")
    elif draft.verdict not in rubric.verdicts:
        error("verdict", f"unknown verdict {draft.verdict!r}", f"use one of: {', '.join(rubric.verdicts)}")
    _check_verdict_rules(draft, rubric, error, warn)

    line_counts: dict[Path, int | None] = {}
    for i, c in enumerate(draft.comments):
        where = f"comments[{i}]"
        if not is_task_relative(c.file):
            error(f"{where}.file", f"{c.file!r} is not a path inside the task folder", 'write it relative to the task folder, e.g. "kernel_nki.py"')
            continue
        if not (1 <= c.start <= c.end):
            error(f"{where}.lines", f"lines {c.start}-{c.end} are not 1 <= first <= last", "anchor the comment to lines that exist")
            continue
        if not c.text.strip():
            error(f"{where}.text", "the comment is empty", "write the comment or remove it")
        if c.criterion is not None and rubric.criterion(c.criterion) is None:
            error(f"{where}.criterion", f"{c.criterion!r} is not a criterion of the rubric", f"use one of: {known}, or leave it out")
        if task_root is not None:
            target = Path(task_root) / c.file
            if not target.is_file():
                error(f"{where}.file", f"{c.file!r} is not a file of the task", "anchor the comment to a file inside the task folder")
                continue
            count = _line_count(target, line_counts)
            if count is None:
                continue
            if c.end > max(count, 1):
                error(f"{where}.lines", f"lines {c.start}-{c.end} go past the end of {c.file} ({count} lines)",
                      "anchor the comment to lines that exist")
    for i, e in enumerate(draft.evidence):
        if e.kind not in EVIDENCE_KINDS:
            error(f"evidence[{i}].kind", f"unknown evidence kind {e.kind!r}", f"use one of {', '.join(EVIDENCE_KINDS)}")
        if not e.ref.strip() or (e.kind == "run" and not RUN_ID_RE.match(e.ref)):
            error(f"evidence[{i}].ref", f"{e.ref!r} is not a valid reference for {e.kind} evidence",
                  "see docs/review-format.md (evidence kinds and their ref)")
        if task_root is not None and e.kind in ("source", "finding", "diff"):
            # A warning, not an error: the link is still readable through its excerpt.
            bad_ref = _located_ref_problem(e.ref, task_root, line_counts)
            if bad_ref is not None:
                warn(f"evidence[{i}].ref", f"{e.kind} evidence {e.ref!r}: {bad_ref[0]}", bad_ref[1])
        if e.criterion is not None and rubric.criterion(e.criterion) is None:
            error(f"evidence[{i}].criterion", f"{e.criterion!r} is not a criterion of the rubric", f"use one of: {known}, or leave it out")
    for run_id in draft.runs:
        if not RUN_ID_RE.match(run_id):
            error("runs", f"{run_id!r} is not a run id", "cite runs by the id the executor printed")
    return problems

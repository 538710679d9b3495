"""Render a review record as Markdown for humans (the .md written beside each record)."""

from __future__ import annotations

from nkitui.review.record import Evidence, LineComment, ReviewRecord
from nkitui.review.rubric import Rubric


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _quote(text: str) -> list[str]:
    return [f"> {line}" if line else ">" for line in text.strip().splitlines()]


def _evidence_line(e: Evidence) -> str:
    excerpt = f" — {_cell(e.excerpt)}" if e.excerpt.strip() else ""
    return f"- {e.kind} `{e.ref}`{excerpt}"


def _comment_lines(c: LineComment) -> list[str]:
    text = c.text.strip().splitlines() or [""]
    return [f"- `{c.location}`: {text[0]}", *[f"  {line}" for line in text[1:]]]


def render_markdown(record: ReviewRecord, rubric: Rubric | None = None) -> str:
    """Markdown for `record`. With the rubric (same id) criteria get titles, scales and level meanings."""
    if rubric is not None and rubric.id != record.rubric_id:
        rubric = None
    when = record.submitted_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    out = [f"# Review of `{record.task.id}` — {record.verdict}", ""]
    out += ["| Field | Value |", "|---|---|",
            f"| Auditor | {_cell(record.auditor)} |",
            f"| Submitted | {when} |",
            f"| Rubric | {_cell(record.rubric_id)} v{_cell(record.rubric_version)} |"]
    if rubric is not None:
        weighted = rubric.weighted_score(record.score_values)
        if weighted is not None:
            out.append(f"| Weighted score | {weighted * 100:.0f}% |")
    out += [f"| Verdict | **{_cell(record.verdict)}** |",
            f"| Task commit | `{record.task.commit[:12]}` ({_cell(record.task.path)}) |",
            f"| Tool | {_cell(record.tool_version)} |",
            f"| Review id | `{record.id}` |", ""]
    if record.task.dirty:
        out += [f"Judged with uncommitted changes in: {', '.join(f'`{p}`' for p in record.task.dirty)} "
                "(the sha256 values below are what was judged).", ""]
    if record.summary.strip():
        out += ["## Summary", "", record.summary.strip(), ""]
    if record.overrides:
        out += ["## Verdict rules overridden", ""]
        for o in record.overrides:
            rule = rubric.rule(o.rule) if rubric is not None else None
            what = f" ({_cell(rule.message)})" if rule is not None else ""
            out += [f"- `{_cell(o.rule)}`{what}: {_cell(o.reason)}"]
        out.append("")

    out += ["## Scores", "", "| Criterion | Score | Scale | Weight | Meaning |", "|---|---|---|---|---|"]
    order = list(rubric.criterion_ids) if rubric else []
    order += [cid for cid in record.scores if cid not in order]
    for cid in order:
        crit = rubric.criterion(cid) if rubric else None
        score = record.scores.get(cid)
        value = "—" if score is None or score.value is None else str(score.value)
        title = crit.title if crit else cid
        scale = crit.scale.describe() if crit else ""
        weight = f"{crit.weight:g}" if crit else ""
        meaning = crit.level_text(score.value) if crit and score else ""
        out.append(f"| {_cell(title)} | **{_cell(value)}** | {_cell(scale)} | {weight} | {_cell(meaning)} |")
    out.append("")

    for cid in order:
        crit = rubric.criterion(cid) if rubric else None
        score = record.scores.get(cid)
        linked_comments = [c for c in record.comments if c.criterion == cid]
        linked_evidence = [e for e in record.evidence if e.criterion == cid]
        if (score is None or not score.comment.strip()) and not linked_comments and not linked_evidence:
            continue
        value = "not scored" if score is None or score.value is None else str(score.value)
        out += [f"### {crit.title if crit else cid} — {value}", ""]
        if score is not None and score.comment.strip():
            out += [score.comment.strip(), ""]
        if linked_evidence:
            out += ["Evidence:", "", *[_evidence_line(e) for e in linked_evidence], ""]
        if linked_comments:
            out += ["Line comments:", ""]
            for c in linked_comments:
                out += _comment_lines(c)
            out.append("")

    loose_comments = [c for c in record.comments if c.criterion is None or c.criterion not in order]
    if loose_comments:
        out += ["## Line comments", ""]
        for c in loose_comments:
            out += _comment_lines(c)
        out.append("")
    loose_evidence = [e for e in record.evidence if e.criterion is None or e.criterion not in order]
    if loose_evidence:
        out += ["## Evidence", "", *[_evidence_line(e) for e in loose_evidence], ""]
    if record.runs:
        out += ["## Runs relied on", "", *[f"- `{r}` (reviews/runs/{r}.json)" for r in record.runs], ""]
    out += ["## Judged files", "", "| File | sha256 |", "|---|---|"]
    out += [f"| `{_cell(f)}` | `{h}` |" for f, h in sorted(record.task.files.items())]
    out += ["", "<!-- Written by nkitui; the .toml beside this file is the record. Do not edit either. -->", ""]
    return "\n".join(out)

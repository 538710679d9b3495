"""`nkitui review template`: a draft TOML with the rubric's guidance as comments, to fill in an editor."""

from __future__ import annotations

import textwrap

from nkitui.review import tomlout
from nkitui.review.draft import DRAFT_KIND, DRAFT_SCHEMA, Draft
from nkitui.review.record import EVIDENCE_KINDS
from nkitui.review.rubric import Rubric


toml_value = tomlout.value


def _comment_block(text: str, width: int = 98) -> list[str]:
    lines: list[str] = []
    for para in text.strip().split("\n\n"):
        flowed = " ".join(para.split())
        lines.extend(f"# {chunk}" if chunk else "#" for chunk in textwrap.wrap(flowed, width - 2) or [""])
        lines.append("#")
    return lines[:-1]


def _verdict_lines(rubric: Rubric) -> list[str]:
    lines: list[str] = []
    for v in rubric.verdicts:
        if v in rubric.verdict_guidance:
            wrapped = textwrap.wrap(" ".join(rubric.verdict_guidance[v].split()), 92 - len(v))
            lines.append(f"#   {v}: {wrapped[0]}")
            lines += [f"#   {' ' * len(v)}  {w}" for w in wrapped[1:]]
    return lines


def _rule_lines(rubric: Rubric) -> list[str]:
    """The verdict rules as comments, and how to override one."""
    if not rubric.verdict_rules:
        return []
    lines = ["# Verdict rules (docs/review-format.md#verdict-rules): a blocker stops submitting unless",
             "# overridden below with a reason; a warning does not block."]
    for rule in rubric.verdict_rules:
        kind = "warning" if rule.severity == "warning" else ("blocker" if rule.overridable else "blocker, no override")
        needs = " and ".join(r.text for r in rule.requires)
        lines.append(f"#   {rule.id} ({kind}): {' | '.join(rule.verdicts)} needs {needs}")
        lines += [f"#     {w}" for w in textwrap.wrap(rule.message, 90)]
    return lines


def _override_lines(draft: Draft) -> list[str]:
    lines = ["", "# To give a verdict a rule forbids, say why (it goes into the record):",
             "#   [[overrides]]", '#   rule = "accept-needs-sound-numerics"',
             '#   reason = "the 1e-3 error is the CUDA golden\'s own bf16 rounding; see the comment on line 40"']
    if draft.overrides:
        lines += ["", tomlout.dumps({"overrides": [{"rule": o.rule, "reason": o.reason}
                                                    for o in draft.overrides]}).rstrip("\n")]
    return lines


def render_template(rubric: Rubric, task_id: str, draft: Draft | None = None) -> str:
    """A fillable draft for `task_id`. With `draft`, its values are filled in (e.g. a saved draft)."""
    draft = draft or Draft.new(task_id, rubric)
    out: list[str] = [
        f"# nkitui review draft for task {task_id!r} — rubric {rubric.id} v{rubric.version}",
        "# Fill in every required score, then run:",
        "#   nkitui review submit TASK_DIR --from THIS_FILE.toml [--auditor NAME]",
        "# A score left as \"\" is not scored yet. Comments are free text; triple quotes allow several lines.",
        "",
        f"schema = {DRAFT_SCHEMA}",
        f"kind = {toml_value(DRAFT_KIND)}",
        f"task_id = {toml_value(task_id)}",
    ]
    if draft.auditor:
        out.append(f"auditor = {toml_value(draft.auditor)}")
    out += [
        "",
        "# Verdict: " + " | ".join(rubric.verdicts),
        *_verdict_lines(rubric),
        *_rule_lines(rubric),
        f"verdict = {toml_value(draft.verdict or '')}",
        f"summary = {toml_value(draft.summary)}",
        "",
        "# Run results this review relies on (ids printed by `nkitui check`); submit copies them under reviews/runs/.",
        f"runs = {toml_value(list(draft.runs))}",
        "",
        "[rubric]",
        f"id = {toml_value(rubric.id)}",
        f"version = {toml_value(rubric.version)}",
    ]
    for c in rubric.criteria:
        entry = draft.scores.get(c.id)
        value = entry.value if entry is not None and entry.value is not None else ""
        comment = entry.comment if entry is not None else ""
        out += ["", "# " + "-" * 96,
                f"# {c.title} — {'required' if c.required else 'optional'}, weight {c.weight:g}, scale {c.scale.describe()}",
                "#"]
        out += _comment_block(c.guidance)
        if c.levels:
            out.append("#")
            for key in [str(v) for v in c.scale.values()]:
                if key in c.levels:
                    wrapped = textwrap.wrap(" ".join(c.levels[key].split()), 92)
                    out.append(f"#   {key}: {wrapped[0]}")
                    out += [f"#      {w}" for w in wrapped[1:]]
        out += [f"[scores.{c.id}]", f"score = {toml_value(value)}", f"comment = {toml_value(comment)}"]
    extra = [cid for cid in draft.scores if rubric.criterion(cid) is None]
    for cid in extra:
        entry = draft.scores[cid]
        out += ["", f"# not in rubric {rubric.id} v{rubric.version}: remove it or fix the id",
                f"[scores.{cid}]", f"score = {toml_value(entry.value if entry.value is not None else '')}",
                f"comment = {toml_value(entry.comment)}"]
    out += ["", "# Line-anchored comments: one [[comments]] table each.",
            "#   [[comments]]", '#   file = "kernel_nki.py"', "#   lines = [12, 18]",
            '#   criterion = "numerical_correctness"   # optional', '#   text = "why these lines matter"']
    out += ["#", f"# Evidence links: kind = {' | '.join(EVIDENCE_KINDS)}, ref = what it points at, a short excerpt.",
            "#   ref forms: finding RULE-ID@file:line, source file:12-18, diff file:12-18, log <run id>#L120-140,",
            "#   metric name=value [unit], run <run id> (see `nkitui analyze --rules` for rule ids)",
            "#   [[evidence]]", '#   kind = "finding"', '#   ref = "NKI-PARTIAL-DROPPED@kernel_nki.py:31"',
            '#   criterion = "migration_fidelity"', '#   excerpt = "rows 256..299 are never processed"']
    rest = {k: v for k, v in draft.to_dict().items() if k in ("comments", "evidence")}
    if rest:
        out += ["", tomlout.dumps(rest).rstrip("\n")]
    if rubric.verdict_rules:
        out += _override_lines(draft)
    return "\n".join(out) + "\n"

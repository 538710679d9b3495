"""`nkitui review template`: a draft TOML with the rubric's guidance as comments, to fill in an editor.

Comments are wrapped to the width asked for (98 columns in a file; the terminal's when printed to one),
each continuation behind its own hanging indent; TOML lines are never broken.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from nkitui.review import tomlout
from nkitui.review.draft import DRAFT_KIND, DRAFT_SCHEMA, Draft
from nkitui.review.record import EVIDENCE_KINDS
from nkitui.review.rubric import Rubric


toml_value = tomlout.value


@dataclass(frozen=True)
class _Comment:
    """A comment paragraph: `# {indent}{text}`, continued as `# {hang}...` at the template's width."""

    text: str
    indent: str = ""
    hang: str | None = None

    def lines(self, width: int) -> list[str]:
        hang = self.indent if self.hang is None else self.hang
        flowed = " ".join(self.text.split())
        if not flowed:
            return ["#"]
        return [f"# {line}".rstrip() for line in textwrap.wrap(
            flowed, max(20, width - 2), initial_indent=self.indent, subsequent_indent=hang,
            break_long_words=False, break_on_hyphens=False)]


Line = str | _Comment


def _comment_block(text: str) -> list[Line]:
    lines: list[Line] = []
    for para in text.strip().split("\n\n"):
        lines += [_Comment(para), "#"]
    return lines[:-1]


def _labelled(label: str, text: str, indent: str = "  ") -> _Comment:
    """`label: text`, continued under the text."""
    head = f"{indent}{label}: "
    return _Comment(text, indent=head, hang=" " * len(head))


def _verdict_lines(rubric: Rubric) -> list[Line]:
    return [_labelled(v, rubric.verdict_guidance[v]) for v in rubric.verdicts if v in rubric.verdict_guidance]


def _rule_lines(rubric: Rubric) -> list[Line]:
    """The verdict rules as comments (docs/review-format.md#verdict-rules)."""
    if not rubric.verdict_rules:
        return []
    lines: list[Line] = [_Comment("Verdict rules (docs/review-format.md#verdict-rules): a blocker stops submitting "
                                  "unless overridden below with a reason; a warning does not block.")]
    for rule in rubric.verdict_rules:
        kind = "warning" if rule.severity == "warning" else ("blocker" if rule.overridable else "blocker, no override")
        # written without spaces, so a wrapped line never separates `>=` from its value
        needs = " and ".join(f"{r.subject}{r.op}{r.value}" for r in rule.requires)
        lines.append(_Comment(f"{rule.id} ({kind}): {' | '.join(rule.verdicts)} needs {needs}", indent="  ",
                              hang="    "))
        lines.append(_Comment(rule.message, indent="    "))
    return lines


def _override_lines(draft: Draft) -> list[Line]:
    lines: list[Line] = ["", _Comment("To give a verdict a rule forbids, say why (it goes into the record):"),
                         "#   [[overrides]]", '#   rule = "accept-needs-sound-numerics"',
                         '#   reason = "the mismatch is the CUDA golden\'s own bf16 rounding (see line 40)"']
    if draft.overrides:
        lines += ["", tomlout.dumps({"overrides": [{"rule": o.rule, "reason": o.reason}
                                                    for o in draft.overrides]}).rstrip("\n")]
    return lines


def render_template(rubric: Rubric, task_id: str, draft: Draft | None = None, width: int = 98) -> str:
    """A fillable draft for `task_id`. With `draft`, its values are filled in (e.g. a saved draft).
    Comments fit `width` columns."""
    draft = draft or Draft.new(task_id, rubric)
    out: list[Line] = [
        _Comment(f"nkitui review draft for task {task_id!r} — rubric {rubric.id} v{rubric.version}"),
        _Comment("Fill in every required score, then run:"),
        "#   nkitui review submit TASK_DIR --from THIS_FILE.toml [--auditor NAME]",
        _Comment("A score left as \"\" is not scored yet. Comments are free text; triple quotes allow several "
                 "lines."),
        "",
        f"schema = {DRAFT_SCHEMA}",
        f"kind = {toml_value(DRAFT_KIND)}",
        f"task_id = {toml_value(task_id)}",
    ]
    if draft.auditor:
        out.append(f"auditor = {toml_value(draft.auditor)}")
    out += [
        "",
        _Comment("Verdict: " + " | ".join(rubric.verdicts)),
        *_verdict_lines(rubric),
        *_rule_lines(rubric),
        f"verdict = {toml_value(draft.verdict or '')}",
        f"summary = {toml_value(draft.summary)}",
        "",
        _Comment("Run results this review relies on (ids printed by `nkitui check`); submit copies them under "
                 "reviews/runs/."),
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
        out += ["", "# " + "-" * (min(width, 98) - 2),
                _Comment(f"{c.title} — {'required' if c.required else 'optional'}, weight {c.weight:g}, "
                         f"scale {c.scale.describe()}"),
                "#"]
        out += _comment_block(c.guidance)
        if c.levels:
            out.append("#")
            for key in [str(v) for v in c.scale.values()]:
                if key in c.levels:
                    out.append(_labelled(key, c.levels[key]))
        out += [f"[scores.{c.id}]", f"score = {toml_value(value)}", f"comment = {toml_value(comment)}"]
    extra = [cid for cid in draft.scores if rubric.criterion(cid) is None]
    for cid in extra:
        entry = draft.scores[cid]
        out += ["", _Comment(f"not in rubric {rubric.id} v{rubric.version}: remove it or fix the id"),
                f"[scores.{cid}]", f"score = {toml_value(entry.value if entry.value is not None else '')}",
                f"comment = {toml_value(entry.comment)}"]
    out += ["", _Comment("Line-anchored comments: one [[comments]] table each."),
            "#   [[comments]]", '#   file = "kernel_nki.py"', "#   lines = [12, 18]",
            '#   criterion = "numerical_correctness"   # optional', '#   text = "why these lines matter"']
    out += ["#", _Comment(f"Evidence links: kind = {' | '.join(EVIDENCE_KINDS)}, ref = what it points at, a short "
                          "excerpt."),
            _Comment("ref forms: finding RULE-ID@file:line, source file:12-18, diff file:12-18, log <run "
                     "id>#L120-140, metric name=value [unit], run <run id> (see `nkitui analyze --rules` for rule "
                     "ids)", indent="  ", hang="  "),
            "#   [[evidence]]", '#   kind = "finding"', '#   ref = "NKI-PARTIAL-DROPPED@kernel_nki.py:31"',
            '#   criterion = "migration_fidelity"', '#   excerpt = "rows 256..299 are never processed"']
    rest = {k: v for k, v in draft.to_dict().items() if k in ("comments", "evidence")}
    if rest:
        out += ["", tomlout.dumps(rest).rstrip("\n")]
    if rubric.verdict_rules:
        out += _override_lines(draft)
    lines: list[str] = []
    for line in out:
        lines += line.lines(width) if isinstance(line, _Comment) else [line]
    return "\n".join(lines) + "\n"

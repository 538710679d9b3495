"""Verdict rules in a rubric: what the scores must be for a verdict. Parsed strictly (file, field, fix),
checked by validate_draft, `review validate` and `review submit`; an override needs a reason and goes
into the record."""

from __future__ import annotations

import re

import pytest

from nkitui.cli import main
from nkitui.review import Draft, RubricError, load_builtin_rubric, parse_rubric, validate_draft
from tests.review.test_rubric import CUSTOM

RULES = CUSTOM + '''
[[verdict_rules]]
id = "ship-runs"
verdicts = ["ship"]
require = ["compiles == pass", "style >= fair"]
message = "What ships compiles and reads at least fairly"
override = false

[[verdict_rules]]
id = "hold-has-a-reason"
verdicts = ["hold"]
require = "any <= fail"
message = "A hold usually fails something"
severity = "warning"
'''


def _draft(rubric, verdict, **scores) -> Draft:
    draft = Draft.new("add", rubric)
    for cid, value in scores.items():
        draft.set_score(cid, value)
    draft.verdict = verdict
    return draft


def test_the_builtin_rubric_refuses_accept_with_numerical_correctness_1():
    rubric = load_builtin_rubric("nki-port-audit")
    draft = _draft(rubric, "accept", migration_fidelity=4, performance_quality=4, numerical_correctness=1,
                   task_appropriateness=4)
    errors = [p for p in validate_draft(draft, rubric) if p.severity == "error"]
    assert {p.field for p in errors} == {"verdict"}
    text = " ".join(p.message for p in errors)
    assert "accept-needs-sound-numerics" in text and "Numerical correctness is 1 (needs >= 4)" in text
    assert "accept-no-criterion-below-3" in text  # 1 is also below 3
    assert all("[[overrides]]" in p.fix for p in errors)
    # the same scores under `revise` are fine; a clean accept too
    assert not [p for p in validate_draft(_draft(rubric, "revise", **draft.score_values), rubric)
                if p.severity == "error"]
    good = _draft(rubric, "accept", migration_fidelity=4, performance_quality=3, numerical_correctness=4,
                  task_appropriateness=5)
    assert validate_draft(good, rubric) == []


def test_a_reject_with_every_score_high_is_a_warning_not_a_blocker():
    rubric = load_builtin_rubric("nki-port-audit")
    draft = _draft(rubric, "reject", migration_fidelity=4, performance_quality=4, numerical_correctness=4,
                   task_appropriateness=4)
    problems = validate_draft(draft, rubric)
    assert [p.severity for p in problems] == ["warning"] and "reject-names-a-weak-criterion" in problems[0].message


def test_overrides_need_a_known_rule_and_a_reason():
    rubric = load_builtin_rubric("nki-port-audit")
    draft = _draft(rubric, "accept", migration_fidelity=4, performance_quality=4, numerical_correctness=3,
                   task_appropriateness=4)
    draft.set_override("accept-needs-sound-numerics", "short")
    problems = validate_draft(draft, rubric)
    assert any(p.field == "overrides[0].reason" and p.severity == "error" for p in problems)
    draft.set_override("accept-needs-sound-numerics", "the golden is itself bf16-rounded")
    problems = validate_draft(draft, rubric)
    assert not [p for p in problems if p.severity == "error"]
    assert any("overridden: the golden is itself bf16-rounded" in p.message for p in problems)
    draft.set_override("no-such-rule", "a reason long enough")
    assert any(p.field == "overrides[1].rule" and "not a verdict rule" in p.message for p in validate_draft(draft, rubric))


def test_custom_rules_on_labels_and_pass_fail_and_rules_that_cannot_be_overridden():
    rubric = parse_rubric(RULES, "rubric.toml")
    assert [r.id for r in rubric.verdict_rules] == ["ship-runs", "hold-has-a-reason"]
    broken = rubric.check_verdict("ship", {"compiles": "fail", "style": "poor"})
    assert [v.rule.id for v in broken] == ["ship-runs"]
    assert broken[0].failures == ("Compiles and runs is fail (needs == pass)", "Style is poor (needs >= fair)")
    assert rubric.check_verdict("ship", {"compiles": "pass", "style": "good"}) == []
    assert rubric.check_verdict("ship", {"compiles": "pass"}) == []  # an unscored optional criterion is not judged
    draft = _draft(rubric, "ship", compiles="fail", style="good")
    draft.set_override("ship-runs", "we ship it anyway, for reasons")
    fields = {(p.field, p.severity) for p in validate_draft(draft, rubric)}
    assert ("verdict", "error") in fields and ("overrides[0].rule", "error") in fields


@pytest.mark.parametrize(("rule", "field", "hint"), [
    ('verdicts = ["ship"]\nrequire = "speedy >= 3"\nmessage = "m"', "verdict_rules[0].require", "compiles"),
    ('verdicts = ["ship"]\nrequire = "style >= excellent"\nmessage = "m"', "verdict_rules[0].require", "poor"),
    ('verdicts = ["ship"]\nrequire = "style ~ good"\nmessage = "m"', "verdict_rules[0].require", "<="),
    ('verdicts = ["sail"]\nrequire = "style >= fair"\nmessage = "m"', "verdict_rules[0].verdicts", "ship, hold"),
    ('verdicts = ["ship"]\nrequire = "style >= fair"', "verdict_rules[0].message", "message"),
    ('verdicts = ["ship"]\nrequire = "style >= fair"\nmessage = "m"\nseverity = "fatal"',
     "verdict_rules[0].severity", "blocker"),
])
def test_bad_rules_name_the_field_and_the_fix(rule, field, hint):
    text = CUSTOM + f'\n[[verdict_rules]]\nid = "r"\n{rule}\n'
    with pytest.raises(RubricError) as info:
        parse_rubric(text, "rubric.toml")
    [problem] = [p for p in info.value.problems if p.field == field]
    assert hint in problem.message + problem.fix and problem.file == "rubric.toml"


def _fill(template: str, scores: dict[str, int], verdict: str) -> str:
    for cid, value in scores.items():
        template = re.sub(rf'(\[scores\.{cid}\]\nscore = )""', rf"\g<1>{value}", template)
    return template.replace('verdict = ""', f'verdict = "{verdict}"')


def test_validate_and_submit_refuse_a_broken_rule_and_record_an_override(task_repo, tmp_path, capsys):
    root, repo = task_repo
    assert main(["review", "template", str(root)]) == 0
    template = capsys.readouterr().out
    assert "accept-needs-sound-numerics (blocker): accept needs numerical_correctness>=4" in template
    scores = {"migration_fidelity": 4, "performance_quality": 4, "numerical_correctness": 1, "task_appropriateness": 4}
    draft = tmp_path / "draft.toml"
    draft.write_text(_fill(template, scores, "accept"))
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 2
    assert "[verdict]: error: verdict 'accept'" in capsys.readouterr().err
    assert main(["review", "submit", str(root), "--from", str(draft), "--auditor", "ada"]) == 2
    assert "accept-needs-sound-numerics" in capsys.readouterr().err
    reason = "numerics are scored on the emulator only; the hardware run is what counts here"
    draft.write_text(_fill(template, scores, "accept") + "\n".join([
        "", "[[overrides]]", 'rule = "accept-needs-sound-numerics"', f'reason = "{reason}"',
        "", "[[overrides]]", 'rule = "accept-no-criterion-below-3"', f'reason = "{reason}"', ""]))
    assert main(["review", "validate", str(root), "--from", str(draft)]) == 0
    assert main(["review", "submit", str(root), "--from", str(draft), "--auditor", "ada"]) == 0
    out = capsys.readouterr().out
    record = next((root / "reviews" / "ada").glob("*.toml")).read_text()
    assert 'rule = "accept-needs-sound-numerics"' in record and reason in record
    markdown = next((root / "reviews" / "ada").glob("*.md")).read_text()
    assert "## Verdict rules overridden" in markdown and reason in markdown
    assert "committed " in out
    assert main(["history", str(root), "--json"]) == 0
    assert reason in capsys.readouterr().out

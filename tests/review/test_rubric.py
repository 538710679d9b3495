import textwrap

import pytest

from nkitui.review import RubricError, Scale, builtin_rubric_ids, load_builtin_rubric, load_rubric, parse_rubric, rubric_for_task
from nkitui.task import load_task
from tests.helpers.review import write_task

CUSTOM = textwrap.dedent(
    """\
    schema = 1
    id = "team-quick"
    version = "2.1"
    title = "Quick check"
    verdicts = ["ship", "hold"]

    [verdict_guidance]
    ship = "good to go"

    [[criteria]]
    id = "compiles"
    title = "Compiles and runs"
    guidance = "Does it run on the emulator?"
    scale = { kind = "pass_fail" }
    weight = 2

    [[criteria]]
    id = "style"
    title = "Style"
    guidance = "Readable?"
    scale = { kind = "labels", labels = ["poor", "fair", "good"] }
    required = false

    [criteria.levels]
    poor = "hard to follow"
    good = "clear"

    [[criteria]]
    id = "speed"
    title = "Speed"
    guidance = "Fraction of roofline"
    scale = { kind = "range", min = 0, max = 1, step = 0.25 }
    weight = 0
    """
)


def test_builtin_rubric_has_the_four_expert_criteria():
    assert "nki-port-audit" in builtin_rubric_ids()
    r = load_builtin_rubric("nki-port-audit")
    assert r.id == "nki-port-audit" and r.version
    assert r.criterion_ids == ["migration_fidelity", "performance_quality", "numerical_correctness", "task_appropriateness"]
    assert r.verdicts == ("accept", "revise", "reject")
    assert set(r.verdict_guidance) == {"accept", "revise", "reject"}
    assert sum(c.weight for c in r.criteria) == pytest.approx(1.0)
    for c in r.criteria:
        assert c.required
        assert c.scale == Scale("range", min=1, max=5)
        assert set(c.levels) == {"1", "2", "3", "4", "5"}, c.id
        assert len(c.guidance) > 400, c.id  # real guidance, not a one-liner
    text = " ".join(c.guidance for c in r.criteria)
    for idea in ("partial tiles", "PSUM", "SBUF", "128 partitions", "DMA", "roofline", "fp32", "atol", "gam"):
        assert idea in text, idea


def test_custom_rubric_scales_levels_and_weights():
    r = parse_rubric(CUSTOM, "rubric.toml")
    compiles, style, speed = r.criteria
    assert compiles.scale.kind == "pass_fail" and compiles.weight == 2 and compiles.required
    assert style.scale.values() == ["poor", "fair", "good"] and not style.required
    assert style.level_text("poor") == "hard to follow" and style.level_text("fair") == ""
    assert speed.scale.values() == [0, 0.25, 0.5, 0.75, 1.0]
    assert r.verdicts == ("ship", "hold") and r.verdict_guidance == {"ship": "good to go"}
    # weight 0 criteria never move the weighted score
    assert r.weighted_score({"compiles": "pass", "style": "fair", "speed": 0}) == pytest.approx((2 * 1 + 1 * 0.5) / 3)
    assert r.weighted_score({}) is None
    assert r.weighted_score({"style": "bogus"}) is None


@pytest.mark.parametrize(
    "scale, value, ok",
    [
        (Scale("range", min=1, max=5), 3, True),
        (Scale("range", min=1, max=5), 3.0, True),
        (Scale("range", min=1, max=5), 3.5, False),
        (Scale("range", min=1, max=5), 6, False),
        (Scale("range", min=1, max=5), True, False),
        (Scale("range", min=1, max=5), "3", False),
        (Scale("range", min=0, max=1, step=0.25), 0.75, True),
        (Scale("range", min=0, max=1, step=0.25), 0.7, False),
        (Scale("pass_fail"), "pass", True),
        (Scale("pass_fail"), True, False),
        (Scale("labels", labels=("lo", "hi")), "hi", True),
        (Scale("labels", labels=("lo", "hi")), "mid", False),
    ],
)
def test_scale_check(scale, value, ok):
    assert (scale.check(value) is None) is ok


def test_scale_parse_text_from_the_editor():
    assert Scale("range", min=1, max=5).parse_text(" 4 ") == 4
    assert Scale("pass_fail").parse_text("P") == "pass"
    with pytest.raises(ValueError, match=r"1\.\.5"):
        Scale("range", min=1, max=5).parse_text("seven")
    with pytest.raises(ValueError, match="outside"):
        Scale("range", min=1, max=5).parse_text("9")


def _errors(text):
    with pytest.raises(RubricError) as info:
        parse_rubric(text, "rubric.toml")
    return info.value.problems


def test_bad_rubrics_name_the_field_and_the_fix():
    problems = _errors(CUSTOM.replace('kind = "pass_fail"', 'kind = "yesno"'))
    assert any(p.field == "criteria[0].scale.kind" and "pass_fail" in p.fix for p in problems)
    problems = _errors(CUSTOM.replace('id = "style"', 'id = "compiles"'))
    assert any(p.field == "criteria[1].id" and "twice" in p.message for p in problems)
    problems = _errors(CUSTOM.replace("min = 0, max = 1, step = 0.25", "min = 2, max = 1"))
    assert any(p.field == "criteria[2].scale.max" for p in problems)
    problems = _errors(CUSTOM.replace('poor = "hard to follow"', 'awful = "x"'))
    assert any(p.field == "criteria[1].levels.awful" and "poor, fair, good" in p.fix for p in problems)
    problems = _errors(CUSTOM.replace('version = "2.1"\n', ""))
    assert any(p.field == "version" and "add version" in p.fix for p in problems)
    problems = _errors("id = \"x\"\nversion = = 1\n")
    assert problems[0].line == 2 and "TOML syntax" in problems[0].message
    problems = _errors("id = [\n")
    assert problems[0].line is not None and "TOML syntax" in problems[0].message
    assert all(p.file == "rubric.toml" for p in problems)


def test_unknown_builtin_and_path_outside_task(tmp_path):
    with pytest.raises(RubricError, match="nki-port-audit"):
        load_rubric("no-such-rubric")
    with pytest.raises(RubricError, match="outside the task"):
        load_rubric("../elsewhere.toml", tmp_path)


def test_task_ships_its_own_rubric(tmp_path):
    root = write_task(tmp_path / "t", rubric="review/rubric.toml")
    (root / "review").mkdir()
    (root / "review" / "rubric.toml").write_text(CUSTOM)
    task = load_task(root)
    r = rubric_for_task(task)
    assert (r.id, r.version) == ("team-quick", "2.1")
    assert rubric_for_task(load_task(write_task(tmp_path / "u"))).id == "nki-port-audit"

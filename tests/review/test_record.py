import datetime as dt
import tomllib

import pytest

from nkitui.review import (
    Draft,
    Evidence,
    LineComment,
    RecordError,
    ReviewRecord,
    Score,
    TaskPin,
    auditor_slug,
    load_record,
    parse_record,
    render_markdown,
    render_template,
)
from nkitui.review.record import format_timestamp, new_record_id

SHA = "ab" * 32


def make_record(**over) -> ReviewRecord:
    fields = dict(
        id="20261130T141502Z-3fa9c2d1", auditor="alice", submitted_at=dt.datetime(2026, 11, 30, 14, 15, 2, tzinfo=dt.timezone.utc),
        tool_version="nkitui 0.1.0",
        task=TaskPin(id="add", commit="c" * 40, path="tasks/add", files={"add_nki.py": SHA, "sub dir/x.py": "cd" * 32}),
        rubric_id="nki-port-audit", rubric_version="1.0", verdict="revise", summary='Two issues.\n"Quoted" and \\ back',
        scores={"migration_fidelity": Score(4, "ok"), "performance_quality": Score(2, "tiles of 64 partitions\nsee L12"),
                "numerical_correctness": Score(None, "not scored: no run")},
        comments=[LineComment("add_nki.py", 12, 18, "uses 64 partitions", "performance_quality"),
                  LineComment("add.cu", 3, 3, "guard i < n")],
        evidence=[Evidence("finding", "NKI-PART-001@add_nki.py:12", "partition dim 64", "performance_quality"),
                  Evidence("run", "20261130T132500Z-3fa9c1")],
        runs=["20261130T132500Z-3fa9c1"],
    )
    fields.update(over)
    return ReviewRecord(**fields)


def test_record_round_trips_through_toml():
    record = make_record()
    text = record.to_toml()
    assert parse_record(text, "r.toml") == record
    doc = tomllib.loads(text)
    assert doc["kind"] == "nkitui-review" and doc["rubric"] == {"id": "nki-port-audit", "version": "1.0"}
    assert doc["task"]["files"]["add_nki.py"] == SHA
    # readable layout: UTC timestamp with Z, line ranges on one line
    assert "submitted_at = 2026-11-30T14:15:02Z" in text
    assert "lines = [12, 18]" in text


def test_record_to_dict_is_json_ready():
    import json

    d = make_record().to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["submitted_at"] == "2026-11-30T14:15:02Z"
    assert d["comments"][0] == {"file": "add_nki.py", "lines": [12, 18], "text": "uses 64 partitions", "criterion": "performance_quality"}


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda t: t.replace('verdict = "revise"\n', ""), "verdict"),
        (lambda t: t.replace("lines = [12, 18]", "lines = [18, 12]"), "comments[0].lines"),
        (lambda t: t.replace("lines = [12, 18]", 'lines = "12"'), "comments[0].lines"),
        (lambda t: t.replace('kind = "finding"', 'kind = "rumour"'), "evidence[0].kind"),
        (lambda t: t.replace(SHA, "xyz"), "task.files.add_nki.py"),
        (lambda t: t.replace('file = "add.cu"', 'file = "../etc/passwd"'), "comments[1].file"),
        (lambda t: t.replace("schema = 1", "schema = 7"), "schema"),
        (lambda t: t.replace("submitted_at = 2026-11-30T14:15:02Z", "submitted_at = 2026-11-30T14:15:02"), "submitted_at"),
        (lambda t: t.replace('kind = "nkitui-review"', 'kind = "nkitui-review-draft"'), "kind"),
        (lambda t: t.replace("score = 4", "score = true"), "scores.migration_fidelity.score"),
        (lambda t: t.replace('auditor = "alice"', 'auditor = "Alice Smith"'), "auditor"),
    ],
)
def test_corrupt_fields_are_named(mutate, field):
    text = mutate(make_record().to_toml())
    with pytest.raises(RecordError) as info:
        parse_record(text, "reviews/alice/x.toml")
    assert field in [p.field for p in info.value.problems], info.value.problems
    assert all(p.file == "reviews/alice/x.toml" and p.fix for p in info.value.problems)


def test_load_record_checks_the_contract_path(tmp_path):
    record = make_record()
    good = tmp_path / "reviews" / "alice" / f"{record.id}.toml"
    good.parent.mkdir(parents=True)
    good.write_text(record.to_toml())
    assert load_record(good) == record
    renamed = good.with_name("20261130T141502Z-00000000.toml")
    renamed.write_text(record.to_toml())
    with pytest.raises(RecordError, match="file name does not match"):
        load_record(renamed)
    moved = tmp_path / "reviews" / "bob" / f"{record.id}.toml"
    moved.parent.mkdir()
    moved.write_text(record.to_toml())
    with pytest.raises(RecordError, match="does not match its folder"):
        load_record(moved)
    binary = good.with_name("bin.toml")
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="UTF-8"):
        load_record(binary)


def test_ids_and_slugs():
    when = dt.datetime(2026, 11, 30, 14, 15, 2, 999, tzinfo=dt.timezone.utc)
    assert format_timestamp(when) == "20261130T141502Z"
    a, b = new_record_id(when), new_record_id(when)
    assert a != b and a.startswith("20261130T141502Z-")
    assert auditor_slug("Alice Smith") == "alice-smith"
    assert auditor_slug("bob@example.com") == "bob"
    assert auditor_slug("  ../../etc  ") == "etc"
    assert auditor_slug("Ünïcode Näme") == "unicode-name"
    assert auditor_slug("Zoë Q") == "zoe-q"
    assert auditor_slug("张伟") == ""  # nothing usable: submit asks for --auditor
    assert auditor_slug("!!!") == ""


def test_template_parses_as_an_empty_draft(rubric):
    text = render_template(rubric, "add")
    draft = Draft.from_toml(text, "draft.toml")
    assert draft == Draft.new("add", rubric)
    assert all(s.value is None for s in draft.scores.values())
    # guidance and level meanings are there for the editor user
    assert "128 partitions" in text and "#   5:" in text and "accept:" in text


def test_filled_template_keeps_everything(rubric):
    draft = Draft.new("add", rubric)
    draft.set_score("migration_fidelity", 3, 'multi\nline "comment"')
    draft.verdict = "revise"
    draft.add_line_comment("add_nki.py", 2, 4, "why", "migration_fidelity")
    draft.attach_evidence(Evidence("run", "20261130T132500Z-3fa9c1", "all checks pass"))
    text = render_template(rubric, "add", draft)
    again = Draft.from_toml(text, "d.toml")
    assert again == draft
    assert again.runs == ["20261130T132500Z-3fa9c1"]


def test_draft_from_toml_reports_a_submitted_record(rubric):
    with pytest.raises(RecordError) as info:
        Draft.from_toml(make_record().to_toml(), "r.toml")
    assert any(p.field == "kind" and "template" in p.fix for p in info.value.problems)


def test_markdown_shows_scores_comments_and_evidence(rubric):
    md = render_markdown(make_record(), rubric)
    assert md.startswith("# Review of `add` — revise")
    assert "| Field | Value |\n|---|---|\n| Auditor | alice |" in md  # a header row a Markdown viewer shows
    assert "| Migration fidelity | **4** | 1..5 | 0.3 |" in md
    assert "### Performance quality — 2" in md and "tiles of 64 partitions" in md
    assert "- `add_nki.py:12-18`: uses 64 partitions" in md
    assert "- finding `NKI-PART-001@add_nki.py:12` — partition dim 64" in md
    assert "- `add.cu:3`: guard i < n" in md  # a comment linked to no criterion
    assert "reviews/runs/20261130T132500Z-3fa9c1.json" in md
    assert f"`{SHA}`" in md
    # without the rubric it still renders, by criterion id
    assert "| migration_fidelity | **4** |" in render_markdown(make_record(), None)


def test_evidence_refs_follow_the_documented_forms():
    assert Evidence.build("finding", rule="NKI-PART-001", file="k.py", line=31).ref == "NKI-PART-001@k.py:31"
    assert Evidence.build("source", file="k.py", line=12, end_line=18).ref == "k.py:12-18"
    assert Evidence.build("diff", file="k.py", line=3, revision="a1..b2").ref == "a1..b2:k.py:3"
    assert Evidence.build("log", run_id="r1", line=120, end_line=140).ref == "r1#L120-140"
    assert Evidence.build("metric", metric="tensor_util", value="0.62", run_id="r1").ref == "r1:tensor_util=0.62"
    assert Evidence.build("metric", metric="latency", value="41.2", unit="us").ref == "latency=41.2 us"
    run = Evidence.build("run", run_id="20261130T132500Z-3fa9c1", excerpt="3/3 pass", criterion="numerical_correctness")
    assert (run.ref, run.excerpt, run.criterion) == ("20261130T132500Z-3fa9c1", "3/3 pass", "numerical_correctness")
    with pytest.raises(ValueError):
        Evidence.build("run")

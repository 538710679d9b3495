"""Property-based tests of the review record parser: valid records round-trip, corrupt files are
reported (RecordError naming the file) and never break history, agreement or export."""

from __future__ import annotations

import datetime as dt
import io
import tempfile
from pathlib import Path

import tomli_w
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nkitui.review import (
    Evidence,
    LineComment,
    RecordError,
    ReviewRecord,
    Score,
    TaskPin,
    compute_agreement,
    export,
    parse_record,
    scan_tree,
    task_history,
)
from nkitui.review.record import EVIDENCE_KINDS

text = st.text(max_size=40)
nonblank = st.text(min_size=1, max_size=30).map(lambda s: s if s.strip() else s + "x")
ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
relpath = st.lists(st.text(alphabet="abcXYZ019_. -", min_size=1, max_size=8).map(lambda p: "p" + p.strip(" ")),
                   min_size=1, max_size=3).map("/".join)
sha256 = st.binary(min_size=32, max_size=32).map(bytes.hex)
score_value = st.one_of(st.none(), st.integers(-1000, 1000), st.floats(allow_nan=False, allow_infinity=False), nonblank)
when = st.integers(946684800, 7258118400).map(lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc))
record_id = st.tuples(when, st.binary(min_size=4, max_size=4)).map(lambda t: t[0].strftime("%Y%m%dT%H%M%SZ-") + t[1].hex())
run_id = st.tuples(st.sampled_from("abcXYZ0189"), st.text(alphabet="abcXYZ0189_.:-", max_size=12)).map("".join)


@st.composite
def line_comments(draw):
    start = draw(st.integers(1, 10_000))
    return LineComment(file=draw(relpath), start=start, end=start + draw(st.integers(0, 50)),
                       text=draw(nonblank),
                       criterion=draw(st.one_of(st.none(), ident)))


@st.composite
def records(draw):
    run_ids = draw(st.lists(run_id, max_size=3, unique=True))
    evidence = draw(st.lists(st.builds(Evidence, kind=st.sampled_from([k for k in EVIDENCE_KINDS if k != "run"]),
                                       ref=nonblank, excerpt=text,
                                       criterion=st.one_of(st.none(), ident)), max_size=3))
    return ReviewRecord(
        id=draw(record_id),
        auditor=draw(st.tuples(st.sampled_from("abz09"), st.text(alphabet="abz09._-", max_size=10)).map("".join)),
        submitted_at=draw(when),
        tool_version=draw(nonblank),
        task=TaskPin(id=draw(ident), commit=draw(st.binary(min_size=20, max_size=20).map(bytes.hex)),
                     path=draw(st.one_of(st.just("."), relpath)),
                     files=draw(st.dictionaries(relpath, sha256, max_size=4)),
                     dirty=draw(st.lists(relpath, max_size=2))),
        rubric_id=draw(ident), rubric_version=draw(nonblank),
        verdict=draw(st.sampled_from(["accept", "revise", "reject"])), summary=draw(text),
        scores=draw(st.dictionaries(ident, st.builds(Score, value=score_value, comment=text), max_size=5)),
        comments=draw(st.lists(line_comments(), max_size=3)),
        evidence=evidence, runs=run_ids,
    )


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(records())
def test_valid_records_round_trip(record):
    assert parse_record(record.to_toml(), "r.toml") == record


def _base_records() -> list[str]:
    full = ReviewRecord(
        id="20261130T141502Z-3fa9c2d1", auditor="alice", submitted_at=dt.datetime(2026, 11, 30, 14, 15, 2, tzinfo=dt.timezone.utc),
        tool_version="nkitui 0.1.0", task=TaskPin(id="add", commit="c" * 40, path="t/add", files={"add_nki.py": "ab" * 32},
                                                  dirty=["add_nki.py"]),
        rubric_id="nki-port-audit", rubric_version="1.0", verdict="revise", summary='multi\nline "summary" \u2028 é',
        scores={"migration_fidelity": Score(4, "ok"), "style": Score("good", ""), "speed": Score(0.25, "x\ny"),
                "numerics": Score(None, "unscored")},
        comments=[LineComment("add_nki.py", 3, 9, "why", "style"), LineComment("a b/c.py", 1, 1, "z")],
        evidence=[Evidence("finding", "R@f:1", "ex", "style"), Evidence("run", "r1")], runs=["r1", "r2"])
    minimal = ReviewRecord(id="20000101T000000Z-00000000", auditor="0", submitted_at=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc),
                           tool_version="t", task=TaskPin(id="a", commit="0" * 40), rubric_id="r", rubric_version="1",
                           verdict="accept")
    return [full.to_toml(), minimal.to_toml()]


BASES = _base_records()


@st.composite
def corrupted(draw):
    """A valid record's text with one or more random edits."""
    s = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "replace_line", "truncate", "dup_line"]))
        i = draw(st.integers(0, len(s)))
        if op == "delete":
            s = s[:i] + s[i + draw(st.integers(1, 30)):]
        elif op == "insert":
            s = s[:i] + draw(st.sampled_from(['"', "[", "]", "=", "\n", "[[comments]]\n", "x = 1\n", "\x00",
                                               "score = []\n", "lines = [0, -1]\n", "[task]\n", "'''"])) + s[i:]
        elif op == "truncate":
            s = s[:i]
        else:
            lines = s.splitlines(keepends=True)
            if lines:
                j = draw(st.integers(0, len(lines) - 1))
                if op == "dup_line":
                    lines.insert(j, lines[j])
                else:
                    lines[j] = draw(st.sampled_from(["kind = 3\n", "scores = 5\n", "comments = [1]\n", "evidence = {}\n",
                                                     "[scores.x]\nscore = {a = 1}\n", "files = []\n", "runs = [\"../x\"]\n",
                                                     "submitted_at = \"yesterday\"\n", "lines = 2\n"]))
            s = "".join(lines)
    return s


def _parse_or_report(s: str):
    try:
        return parse_record(s, "reviews/a/x.toml")
    except RecordError as exc:
        assert exc.problems and all(p.file == "reviews/a/x.toml" for p in exc.problems)
        assert any(p.severity == "error" for p in exc.problems)
        return None


@pytest.mark.slow
@settings(max_examples=250, deadline=None)
@given(corrupted())
def test_corrupt_text_raises_only_record_error(s):
    _parse_or_report(s)


toml_scalars = st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=10),
                         st.datetimes(timezones=st.one_of(st.none(), st.just(dt.timezone.utc))))
toml_docs = st.recursive(st.dictionaries(st.text(max_size=8), toml_scalars, max_size=5),
                         lambda children: st.dictionaries(
                             st.sampled_from(["schema", "kind", "id", "auditor", "task", "scores", "comments", "evidence",
                                              "rubric", "files", "lines", "score", "runs", "verdict", "submitted_at"]),
                             st.one_of(toml_scalars, children, st.lists(children, max_size=2), st.lists(toml_scalars, max_size=3)),
                             max_size=8),
                         max_leaves=10)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(toml_docs)
def test_arbitrary_toml_documents_raise_only_record_error(doc):
    try:
        s = tomli_w.dumps(doc)
    except (TypeError, ValueError):
        return
    _parse_or_report(s)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_record_error(raw):
    _parse_or_report(raw.decode("utf-8", errors="replace"))


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(good=records(), bad=st.lists(st.one_of(corrupted(), st.binary(max_size=200)), min_size=1, max_size=4))
def test_corrupt_files_never_break_history_agreement_or_export(good, bad):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "task"
        folder = root / "reviews" / good.auditor
        folder.mkdir(parents=True)
        (folder / f"{good.id}.toml").write_text(good.to_toml(), encoding="utf-8")
        written = []
        for i, item in enumerate(bad):
            path = root / "reviews" / "mallory" / f"20260101T000000Z-{i:08x}.toml"
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(item, bytes):
                path.write_bytes(item)
            else:
                path.write_text(item, encoding="utf-8")
            written.append(path)

        history = task_history(root)  # no task.toml here: compared against the recorded files only
        ids = [e.record.id for e in history.entries]
        assert good.id in ids
        reported = {p.file for p in history.problems if "corrupt" in p.message or "unreadable" in p.message}
        # every bad file is either reported or (rarely) still a valid record of its own
        assert len(reported) + len(ids) - 1 == len(written)

        scan = scan_tree(Path(tmp))
        assert len(scan.reviews) == len(ids) and len(scan.problems) == len(reported)
        compute_agreement(scan.reviews)
        out = io.StringIO()
        result = export(Path(tmp), out, "csv")
        assert len(result.rows) == len(ids)
        out = io.StringIO()
        export(Path(tmp), out, "jsonl")
        assert len(out.getvalue().splitlines()) == len(ids)

"""The one settings reader: problems name the file, the field, the line where it can be told, and a fix."""
from __future__ import annotations

from nkitui.common.fields import FieldReader


def test_a_located_reader_gives_the_line_of_a_key_written_once() -> None:
    reader = FieldReader("c.toml", "docs", locate=True)
    data = reader.parse_text('theme = "dark"\n\n"app.run" = 5\n[variables]\nnk-x = 1\n')
    assert data is not None
    reader.str_(data, "app.run", "app.run")
    reader.str_(data["variables"], "nk-x", "variables.nk-x")
    assert [(p.field, p.line) for p in reader.problems] == [("app.run", 3), ("variables.nk-x", 5)]
    assert reader.messages()[0].startswith("c.toml:3 [app.run]: error: expected a non-empty string, got int 5")


def test_a_key_written_twice_gets_no_line_rather_than_a_wrong_one() -> None:
    reader = FieldReader("t.toml", "docs", locate=True)
    data = reader.parse_text('[[inputs]]\ndtype = 1\n[[inputs]]\ndtype = "float32"\n')
    assert data is not None
    reader.str_(data["inputs"][0], "dtype", "inputs[0].dtype")
    assert reader.problems[0].line is None


def test_choice_lists_the_vocabulary_in_its_fix() -> None:
    reader = FieldReader("c.toml", "docs")
    assert reader.choice({"backend": " gpu "}, "backend", "backend", ("auto", "emulator")) is None
    assert reader.choice({"backend": "emulator"}, "backend", "backend", ("auto", "emulator")) == "emulator"
    (problem,) = reader.problems
    assert problem.message == "unknown backend 'gpu'" and problem.fix == "use one of auto, emulator"
    assert problem.line is None  # not a located reader


def test_a_toml_syntax_error_names_its_line() -> None:
    reader = FieldReader("k.toml", "docs/keymap.md")
    assert reader.parse_text('a = 1\nb = = 2\n') is None
    assert reader.problems[0].line == 2 and "docs/keymap.md" in reader.problems[0].fix

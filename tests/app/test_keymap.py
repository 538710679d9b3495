from pathlib import Path

from nkitui.app import keymap
from nkitui.app.keymap import BY_ID, REGISTRY, key_problem, keymap_markdown, load_user_keymap, parse_keymap

DOCS = Path(__file__).resolve().parents[2] / "docs" / "keymap.md"


def test_binding_ids_are_unique_and_every_default_key_is_valid():
    assert len(BY_ID) == len(REGISTRY)
    for spec in REGISTRY:
        for key in spec.keys.split(","):
            assert key_problem(key) is None, (spec.id, key)


def test_every_chord_has_a_plain_fallback():
    # tmux and SSH swallow some chords: each binding needs one key without ctrl/alt/meta/super.
    for spec in REGISTRY:
        keys = spec.keys.split(",")
        plain = [k for k in keys if not any(k.startswith(m + "+") for m in ("ctrl", "alt", "meta", "super", "hyper"))]
        assert plain, f"{spec.id} ({spec.keys}) has no plain key"


def test_override_by_id_in_flat_and_table_forms():
    text = '"app.run" = "f9"\n[log]\nsearch = ["ctrl+f", "slash"]\n'
    overrides, problems = parse_keymap(text, "keymap.toml")
    assert problems == []
    assert overrides == {"app.run": "f9", "log.search": "ctrl+f,slash"}


def test_single_characters_are_normalised_to_textual_key_names():
    overrides, problems = parse_keymap('"app.keys" = "?"\n"app.help" = "h"\n', "k.toml")
    assert problems == []
    assert overrides == {"app.keys": "question_mark", "app.help": "h"}


def test_unknown_id_names_the_file_and_key_and_suggests_the_right_id():
    overrides, problems = parse_keymap('"app.rnu" = "f9"\n"app.help" = "f2"\n', "/cfg/keymap.toml")
    assert overrides == {"app.help": "f2"}  # the good line survives
    assert len(problems) == 1
    assert "/cfg/keymap.toml" in problems[0] and "'app.rnu'" in problems[0] and "'app.run'" in problems[0]


def test_bad_key_string_names_the_file_key_and_reason():
    overrides, problems = parse_keymap('"app.run" = "ctlr+r"\n"app.help" = "f99x"\n', "k.toml")
    assert overrides == {}
    assert "k.toml:1 [app.run]: error: 'ctlr+r' is not a key: unknown modifier 'ctlr'" in problems[0]
    assert "k.toml:2 [app.help]: error:" in problems[1] and "unknown key 'f99x'" in problems[1]


def test_wrong_value_type_and_broken_toml_are_reported(tmp_path):
    _, problems = parse_keymap('"app.run" = 5\n', "k.toml")
    assert "expected a string" in problems[0]
    broken = tmp_path / "keymap.toml"
    broken.write_text('"app.run = "f5"\n')
    overrides, problems = load_user_keymap(broken)
    assert overrides == {} and str(broken) in problems[0] and "TOML syntax error" in problems[0]


def test_missing_file_means_no_overrides(tmp_path):
    assert load_user_keymap(tmp_path / "none.toml") == ({}, [])


def test_bindings_for_a_scope_carry_their_ids():
    ids = {b.id for b in keymap.bindings("log")}
    assert {"log.search", "log.follow", "log.level"} <= ids


def test_docs_keymap_is_generated_from_the_registry():
    assert DOCS.read_text() == keymap_markdown(), "regenerate: python -m nkitui.app.keymap > docs/keymap.md"

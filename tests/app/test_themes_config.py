
import pytest

from nkitui.app.config import load_config, parse_config
from nkitui.app.themes import NKITUI_VARIABLES, fill_nkitui_variables, load_themes, parse_theme


def test_bundled_themes_dark_light_and_high_contrast_load_cleanly(tmp_path):
    loaded = load_themes(user=tmp_path / "none")
    assert list(loaded.themes)[:3] == ["dark", "light", "high-contrast"]
    assert loaded.problems == []
    assert loaded.themes["light"].dark is False
    for theme in loaded.themes.values():  # bundled themes set every nkitui colour explicitly
        assert set(NKITUI_VARIABLES) <= set(theme.variables), theme.name


def test_user_theme_is_added_and_may_replace_a_bundled_one(tmp_path):
    (tmp_path / "dusk.toml").write_text('name = "dusk"\nprimary = "#268bd2"\nbackground = "#002b36"\n')
    (tmp_path / "dark.toml").write_text('name = "dark"\nprimary = "#ff0000"\n')
    loaded = load_themes(user=tmp_path)
    assert "dusk" in loaded.themes and loaded.problems == []
    assert loaded.themes["dark"].primary == "#ff0000"
    assert loaded.origins["dusk"] == tmp_path / "dusk.toml"


def test_invalid_user_theme_names_file_and_field_and_others_still_load(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\nprimary = "blu"\ncolour = 3\n[variables]\nnk-sev-high = "nope"\n')
    (tmp_path / "good.toml").write_text('name = "good"\nprimary = "red"\n')
    loaded = load_themes(user=tmp_path)
    assert "good" in loaded.themes and "bad" not in loaded.themes
    text = "\n".join(loaded.problems)
    assert f"{tmp_path / 'bad.toml'}:2 [primary]: error: 'blu' is not a colour" in text
    assert "bad.toml:3 [colour]: error: unknown field 'colour'" in text
    assert "bad.toml:5 [variables.nk-sev-high]: error: 'nope' is not a colour — fix: use \"#RRGGBB\"" in text


def test_theme_without_name_or_primary_is_refused():
    with pytest.raises(ValueError) as err:
        parse_theme('dark = "yes"\n', "t.toml")
    message = str(err.value)
    assert "t.toml [name]: error: required field is missing — fix: add name = " in message
    assert "t.toml [primary]: error: required field is missing" in message
    assert "t.toml:1 [dark]: error: expected true or false" in message


def test_missing_nkitui_variables_are_derived_from_the_base_colours():
    filled = fill_nkitui_variables({"error": "#ff0000", "foreground": "#eeeeee", "success": "#00ff00"})
    assert filled["nk-sev-high"] == "#ff0000"
    assert filled["nk-diff-add"] == "#00ff00"
    assert set(NKITUI_VARIABLES) <= set(filled)


def test_config_is_validated_key_by_key(tmp_path):
    cfg = parse_config('theme = "light"\nlayout = "wide"\ncolour = 1\nbackend = "emulator"\n', "/c/config.toml")
    assert cfg.theme == "light" and cfg.backend == "emulator" and cfg.layout == "auto"
    assert "/c/config.toml:2 [layout]: error: unknown layout 'wide' — fix: use one of auto, tabs, split" in cfg.problems
    assert any(p.startswith("/c/config.toml:3 [colour]: warning: unknown key 'colour'") for p in cfg.problems)
    assert len(cfg.problems) == 2
    assert load_config(tmp_path / "missing.toml").problems == ()


def test_editor_command_prefers_config_then_visual_then_editor(monkeypatch):
    monkeypatch.setenv("VISUAL", "code --wait")
    monkeypatch.setenv("EDITOR", "nano")
    assert parse_config('editor = "nvim -u NONE"\n', "c").editor_command() == ["nvim", "-u", "NONE"]
    assert parse_config("", "c").editor_command() == ["code", "--wait"]
    monkeypatch.delenv("VISUAL")
    assert parse_config("", "c").editor_command() == ["nano"]

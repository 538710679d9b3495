"""Themes as data: the bundled `themes/*.toml` plus the user's `<XDG config>/nkitui/themes/*.toml`.

A theme file holds Textual's theme fields and, under [variables], nkitui's own colours (severity
marks, diff lines, engines, log levels). Any of those left out is derived from the base colours, so
a user theme needs no more than `name` and `primary`:

    name = "solarized-dusk"
    dark = true
    primary = "#268bd2"
    background = "#002b36"
    [variables]
    nk-sev-high = "#dc322f"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

from nkitui.common.paths import config_dir
from nkitui.common.resources import bundled_dir

DEFAULT_THEME = "dark"
BUNDLED_ORDER = ("dark", "light", "high-contrast")

_COLOR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
                 "surface", "panel", "boost")
_FLOAT_FIELDS = ("luminosity_spread", "text_alpha")
_KNOWN_FIELDS = frozenset({"name", "dark", "variables", *_COLOR_FIELDS, *_FLOAT_FIELDS})

# nkitui's own variables and the Textual variable each falls back to when a theme leaves it out.
NKITUI_VARIABLES: dict[str, str] = {
    "nk-sev-high": "error",
    "nk-sev-medium": "warning",
    "nk-sev-low": "primary",
    "nk-sev-info": "secondary",
    "nk-diff-add": "success",
    "nk-diff-del": "error",
    "nk-diff-add-bg": "success-muted",
    "nk-diff-del-bg": "error-muted",
    "nk-align": "primary-muted",
    "nk-cursor": "boost",
    "nk-match": "warning-muted",
    "nk-selection": "secondary-muted",  # lines selected for a range comment
    "nk-gutter": "foreground-muted",
    "nk-engine-tensor": "primary",
    "nk-engine-vector": "success",
    "nk-engine-scalar": "warning",
    "nk-engine-gpsimd": "accent",
    "nk-engine-dma": "secondary",
    "nk-engine-sync": "foreground-muted",
    "nk-log-debug": "foreground-muted",
    "nk-log-info": "foreground",
    "nk-log-warning": "warning",
    "nk-log-error": "error",
}


@dataclass
class ThemeLoad:
    themes: dict[str, Theme] = field(default_factory=dict)  # in menu order
    problems: list[str] = field(default_factory=list)  # every problem, each naming its file and field
    origins: dict[str, Path] = field(default_factory=dict)  # theme name -> the file it came from
    file_problems: dict[Path, list[str]] = field(default_factory=dict)  # the same problems, by file


def _check_color(value: object, where: str) -> str | None:
    if not isinstance(value, str):
        return f"{where}: expected a colour string like \"#1e90ff\""
    try:
        Color.parse(value)
    except ColorParseError:
        return f"{where}: {value!r} is not a colour (use \"#RRGGBB\" or a name such as \"dodgerblue\")"
    return None


def parse_theme(text: str, source: str) -> Theme:
    """Parse one theme file's text. Raises ValueError listing every problem, each naming file and field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source}: not valid TOML ({exc})") from None
    problems: list[str] = []
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{source}: field 'name': required, a non-empty string")
    if "primary" not in data:
        problems.append(f"{source}: field 'primary': required, a colour like \"#1e90ff\"")
    for key in data:
        if key not in _KNOWN_FIELDS:
            problems.append(f"{source}: field {key!r}: unknown (theme fields: {', '.join(sorted(_KNOWN_FIELDS))})")
    for key in _COLOR_FIELDS:
        if key in data and (why := _check_color(data[key], f"{source}: field {key!r}")):
            problems.append(why)
    for key in _FLOAT_FIELDS:
        if key in data and not isinstance(data[key], (int, float)):
            problems.append(f"{source}: field {key!r}: expected a number")
    if "dark" in data and not isinstance(data["dark"], bool):
        problems.append(f"{source}: field 'dark': expected true or false")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        problems.append(f"{source}: field 'variables': expected a table of colours")
        variables = {}
    for key, value in variables.items():
        if key in NKITUI_VARIABLES and (why := _check_color(value, f"{source}: field 'variables.{key}'")):
            problems.append(why)
        elif not isinstance(value, str):
            problems.append(f"{source}: field 'variables.{key}': expected a string")
    if problems:
        raise ValueError("\n".join(problems))
    return Theme(
        name=name.strip(),
        dark=data.get("dark", True),
        variables=dict(variables),
        **{k: data[k] for k in _COLOR_FIELDS if k in data},
        **{k: float(data[k]) for k in _FLOAT_FIELDS if k in data},
    )


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def _load_dir(folder: Path, into: ThemeLoad) -> None:
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.toml")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text: {exc.reason} at byte {exc.start}"
            lines = [f"{path}: cannot be read ({why}); save it as UTF-8 text or remove it"]
        else:
            try:
                theme = parse_theme(text, str(path))
            except ValueError as exc:
                lines = str(exc).splitlines()
            else:
                into.themes[theme.name] = theme
                into.origins[theme.name] = path
                continue
        into.problems.extend(lines)
        into.file_problems[path] = lines


def load_themes(bundled: Path | None = None, user: Path | None = None) -> ThemeLoad:
    """Bundled themes first (dark, light, high-contrast), then the user's; a user theme may replace one."""
    result = ThemeLoad()
    _load_dir(bundled or bundled_dir("themes"), result)
    ordered = {n: result.themes[n] for n in BUNDLED_ORDER if n in result.themes}
    ordered.update(result.themes)
    result.themes = ordered
    _load_dir(user or user_themes_dir(), result)
    return result


def problem_notice(path: Path, lines: list[str]) -> str:
    """One notification's text for a theme file that did not load: the file, then each field's problem."""
    prefix = f"{path}: "
    items = "\n".join(f"• {line.removeprefix(prefix)}" for line in lines)
    return f"{path}\n{items}\nThe theme is not loaded; fix the file, then press t or run Reload themes."


def fill_nkitui_variables(variables: dict[str, str]) -> dict[str, str]:
    """Add every nkitui variable the theme left out, derived from Textual's generated colours."""
    for name, fallback in NKITUI_VARIABLES.items():
        if name not in variables:
            variables[name] = variables.get(fallback, variables.get("foreground", "#808080"))
    return variables

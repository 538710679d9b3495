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

from dataclasses import dataclass, field
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

from nkitui.common.fields import FieldReader
from nkitui.common.paths import config_dir
from nkitui.common.problems import Problem
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
    file_problems: dict[Path, list[Problem]] = field(default_factory=dict)  # the same problems, by file


class ThemeError(ValueError):
    """A theme file that cannot be used; `problems` name the file, each field (and its line) and the fix."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


_COLOUR_FIX = 'use "#RRGGBB" or a name such as "dodgerblue"'


def _check_color(reader: FieldReader, value: object, field: str) -> None:
    if not isinstance(value, str):
        reader.error(field, f"expected a colour string, got {type(value).__name__}", f'write e.g. {field.rsplit(".")[-1]} = "#1e90ff"')
        return
    try:
        Color.parse(value)
    except ColorParseError:
        reader.error(field, f"{value!r} is not a colour", _COLOUR_FIX)


def parse_theme(text: str, source: str) -> Theme:
    """Parse one theme file's text. Raises ThemeError listing every problem, each naming file and field."""
    reader = FieldReader(source, "the theme format in themes/dark.toml", locate=True)
    data = reader.parse_text(text)
    if data is None:
        raise ThemeError(reader.problems)
    name = reader.str_(data, "name", "name", required=True, example='"solarized-dusk"', strip=True)
    if "primary" not in data:
        reader.error("primary", "required field is missing", 'add primary = "#1e90ff"')
    for key in data:
        if key not in _KNOWN_FIELDS:
            reader.error(key, f"unknown field {key!r}", f"theme fields: {', '.join(sorted(_KNOWN_FIELDS))}")
    for key in _COLOR_FIELDS:
        if key in data:
            _check_color(reader, data[key], key)
    for key in _FLOAT_FIELDS:
        reader.number(data, key, key, example="0.15")
    reader.bool_(data, "dark", "dark", default=True)
    variables = reader.table(data, "variables", "variables") or {}
    for key, value in variables.items():
        if key in NKITUI_VARIABLES:
            _check_color(reader, value, f"variables.{key}")
        elif not isinstance(value, str):
            reader.error(f"variables.{key}", f"expected a string, got {type(value).__name__}",
                         f'write e.g. "{key}" = "#1e90ff"')
    if reader.problems or name is None:
        raise ThemeError(reader.problems)
    return Theme(
        name=name,
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
            problems = [Problem(str(path), "", f"cannot be read ({why})", "save it as UTF-8 text or remove it")]
        else:
            try:
                theme = parse_theme(text, str(path))
            except ThemeError as exc:
                problems = exc.problems
            else:
                into.themes[theme.name] = theme
                into.origins[theme.name] = path
                continue
        into.problems.extend(str(p) for p in problems)
        into.file_problems[path] = problems


def load_themes(bundled: Path | None = None, user: Path | None = None) -> ThemeLoad:
    """Bundled themes first (dark, light, high-contrast), then the user's; a user theme may replace one."""
    result = ThemeLoad()
    _load_dir(bundled or bundled_dir("themes"), result)
    ordered = {n: result.themes[n] for n in BUNDLED_ORDER if n in result.themes}
    ordered.update(result.themes)
    result.themes = ordered
    _load_dir(user or user_themes_dir(), result)
    return result


def problem_notice(path: Path, problems: list[Problem]) -> str:
    """One notification's text for a theme file that did not load: the file, then each field's problem."""
    items = "\n".join(f"• {_where(p)}{p.message} — {p.fix}" for p in problems)
    return f"{path}\n{items}\nThe theme is not loaded; fix the file, then press t or run Reload themes."


def _where(problem: Problem) -> str:
    line = f" (line {problem.line})" if problem.line is not None else ""
    return f"field {problem.field!r}{line}: " if problem.field else (f"line {problem.line}: " if line else "")


def fill_nkitui_variables(variables: dict[str, str]) -> dict[str, str]:
    """Add every nkitui variable the theme left out, derived from Textual's generated colours."""
    for name, fallback in NKITUI_VARIABLES.items():
        if name not in variables:
            variables[name] = variables.get(fallback, variables.get("foreground", "#808080"))
    return variables

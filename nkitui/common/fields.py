"""The one validating reader of settings files: typed access to a parsed TOML document that collects
problems instead of raising.

Task manifests (task/manifest.py), rubrics, review records and drafts (review/), the app's config,
keymap and themes (app/) all read their fields through it, so every complaint has the same shape: the
file, the dotted field (and the line where it can be told), what is wrong and how to fix it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from nkitui.common.names import one_of
from nkitui.common.problems import Problem

_MISSING = object()

Table = dict[str, Any]  # a parsed TOML table


class FieldReader:
    def __init__(self, display: str, docs: str, *, locate: bool = False):
        self.display = display  # the file as the user would type it
        self.docs = docs  # where the format is described, quoted in fixes
        self.problems: list[Problem] = []
        # locate: give each problem the line of its key when the key is written once in the file
        # (flat settings files: config, keymap, themes); tomllib keeps no positions of its own.
        self._locate = locate
        self._lines: list[str] = []

    # -- problems --------------------------------------------------------------------------------
    def error(self, field: str, message: str, fix: str, line: int | None = None) -> None:
        self.problems.append(Problem(self.display, field, message, fix, "error", line or self.line_of(field)))

    def warn(self, field: str, message: str, fix: str, line: int | None = None) -> None:
        self.problems.append(Problem(self.display, field, message, fix, "warning", line or self.line_of(field)))

    def line_of(self, field: str) -> int | None:
        """The 1-based line where the last key of `field` is assigned, when located and written once."""
        if not self._locate or not field:
            return None
        bare = re.sub(r"\[\d+\]$", "", field)
        for key in dict.fromkeys((bare, bare.rsplit(".", 1)[-1])):  # a quoted dotted key, else the last part
            quoted = re.escape(key)
            pattern = re.compile(rf"""^\s*(?:{quoted}|"{quoted}"|'{quoted}')\s*=""")
            found = [i for i, text in enumerate(self._lines, 1) if pattern.match(text)]
            if len(found) == 1:
                return found[0]
        return None

    def messages(self) -> list[str]:
        """The problems as lines to print or notify (Problem's own wording)."""
        return [str(p) for p in self.problems]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def _type_error(self, field: str, expected: str, value: Any, example: str) -> None:
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        self.error(field, f"expected {expected}, got {type(value).__name__} {shown}", f"write e.g. {example}")

    # -- parsing ---------------------------------------------------------------------------------
    def parse_bytes(self, raw: bytes) -> dict[str, Any] | None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.error("", f"not UTF-8 text (bad byte at offset {exc.start})", "save the file as UTF-8")
            return None
        return self.parse_text(text)

    def parse_text(self, text: str) -> dict[str, Any] | None:
        self._lines = text.splitlines()
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"line (\d+)", str(exc))
            line = int(match.group(1)) if match else (text.count("\n") + 1 if "end of document" in str(exc) else None)
            self.error("", f"TOML syntax error: {exc}", f"fix the TOML syntax at that line (see {self.docs})", line)
            return None
        except (ValueError, RecursionError) as exc:  # tomllib raises these on pathological input
            self.error("", f"unreadable TOML: {exc}", f"rewrite the file following {self.docs}")
            return None

    # -- typed getters ---------------------------------------------------------------------------
    def _lookup(self, table: Table, key: str, field: str, required: bool, example: str) -> Any:
        """table[key], or _MISSING (reported when the field is required)."""
        value = table.get(key, _MISSING)
        if value is _MISSING and required:
            self.error(field, "required field is missing", f"add {key} = {example}")
        return value

    def str_(self, table: Table, key: str, field: str, *, required: bool = False, example: str = '"..."',
             allow_empty: bool = False, strip: bool = False) -> str | None:
        value = self._lookup(table, key, field, required, example)
        if value is _MISSING:
            return None
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            self._type_error(field, "a non-empty string" if not allow_empty else "a string", value, f"{key} = {example}")
            return None
        return value.strip() if strip else value

    def choice(self, table: Table, key: str, field: str, choices: tuple[str, ...], *, what: str | None = None,
               required: bool = False) -> str | None:
        """A string that must be one of `choices` (the vocabulary's names for backends, targets ...)."""
        value = self.str_(table, key, field, required=required, example=f'"{choices[0]}"', strip=True)
        if value is not None and value not in choices:
            self.error(field, f"unknown {what or key} {value!r}", one_of(choices))
            return None
        return value

    def int_(self, table: Table, key: str, field: str, *, required: bool = False, minimum: int | None = None,
             example: str = "1") -> int | None:
        value = self._lookup(table, key, field, required, example)
        if value is _MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self._type_error(field, "an integer", value, f"{key} = {example}")
            return None
        if minimum is not None and value < minimum:
            self.error(field, f"must be at least {minimum}, got {value}", f"use a value >= {minimum}")
            return None
        return value

    def number(self, table: Table, key: str, field: str, *, required: bool = False, minimum: float | None = None,
               example: str = "1.0") -> float | None:
        value = self._lookup(table, key, field, required, example)
        if value is _MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._type_error(field, "a number", value, f"{key} = {example}")
            return None
        if not math.isfinite(value):
            self.error(field, f"must be a finite number, got {value}", f"write e.g. {key} = {example}")
            return None
        if minimum is not None and value < minimum:
            self.error(field, f"must be at least {minimum:g}, got {value:g}", f"use a value >= {minimum:g}")
            return None
        return value

    def bool_(self, table: Table, key: str, field: str, *, default: bool) -> bool:
        value = table.get(key, _MISSING)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self._type_error(field, "true or false", value, f"{key} = {str(default).lower()}")
            return default
        return value

    def table(self, table: Table, key: str, field: str, *, required: bool = False) -> Table | None:
        value = table.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.error(field, f"required table [{key}] is missing", f"add a [{key}] table (see {self.docs})")
            return None
        if not isinstance(value, dict):
            self._type_error(field, "a table", value, f"[{key}]")
            return None
        return value

    def table_list(self, table: Table, key: str, field: str, *, required: bool = False) -> list[Table]:
        """An array of tables ([[key]]); entries that are not tables are reported and dropped."""
        value = table.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.error(field, f"required [[{key}]] entries are missing", f"add at least one [[{key}]] table (see {self.docs})")
            return []
        if not isinstance(value, list):
            self._type_error(field, "an array of tables", value, f"[[{key}]]")
            return []
        out = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                out.append(item)
            else:
                self._type_error(f"{field}[{i}]", "a table", item, f"[[{key}]]")
        return out

    def str_list(self, table: Table, key: str, field: str, *, example: str = '["a", "b"]') -> list[str]:
        value = table.get(key, _MISSING)
        if value is _MISSING:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self._type_error(field, "a list of non-empty strings", value, f"{key} = {example}")
            return []
        return list(value)

    def datetime_(self, table: Table, key: str, field: str, *, required: bool = False) -> dt.datetime | None:
        value = table.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.error(field, "required field is missing", f"add {key} = 2026-01-31T12:00:00Z")
            return None
        if isinstance(value, str):  # tolerate an ISO string written by hand
            try:
                value = dt.datetime.fromisoformat(value)
            except ValueError:
                pass
        if not isinstance(value, dt.datetime):
            self._type_error(field, "a date-time", value, f"{key} = 2026-01-31T12:00:00Z")
            return None
        if value.tzinfo is None:
            self.error(field, "the date-time has no time zone", f"write it in UTC, e.g. {key} = 2026-01-31T12:00:00Z")
            return None
        return value.astimezone(dt.timezone.utc)

    def unknown_keys(self, table: Table, known: set[str], prefix: str) -> None:
        import difflib

        for key in table:
            if key not in known:
                near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
                hint = f"did you mean {near[0]!r}?" if near else f"known keys: {', '.join(sorted(known))}"
                self.warn(f"{prefix}{key}", f"unknown key {key!r} is ignored", hint)


def display_path(path: Path, base: Path | None = None) -> str:
    """`path` relative to `base` when it lies inside it, else as given."""
    if base is not None:
        try:
            return path.resolve().relative_to(base.resolve()).as_posix()
        except (ValueError, OSError):
            pass
    return str(path)

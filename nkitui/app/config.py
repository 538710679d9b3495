"""The auditor's settings: `<XDG config>/nkitui/config.toml`, validated strictly.

    theme = "dark"            # dark | light | high-contrast | a user theme's name
    layout = "auto"           # auto (tabs below 140x40, split above) | tabs | split
    editor = "nvim"           # long comments; default $VISUAL, then $EDITOR, then vi
    backend = "auto"          # default backend for runs: auto | emulator | simulator | neuron
    target = "trn2"           # default target when the task does not say: trn1 | trn2 | trn3
    blind = false             # hide other auditors' reviews until you have submitted your own
    auditor = "Ada Lovelace <ada@example.com>"   # who submits reviews (else git's identity); the app
                                                 # asks once and writes this line when it has none

Command-line options win over the file. Problems name the file and the key; the app reports them and
uses the defaults for those keys.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from dataclasses import dataclass, field, replace
import re
from pathlib import Path

from nkitui.common.names import BACKEND_CHOICES, TARGET_NAMES
from nkitui.common.paths import config_dir

CONFIG_FILE_NAME = "config.toml"
KEYS = ("theme", "layout", "editor", "backend", "target", "blind", "auditor")
LAYOUTS = ("auto", "tabs", "split")
BACKENDS = BACKEND_CHOICES
TARGETS = TARGET_NAMES


@dataclass(frozen=True)
class AppConfig:
    theme: str | None = None
    layout: str = "auto"
    editor: str | None = None
    backend: str = "auto"
    target: str | None = None
    blind: bool = False
    auditor: str | None = None
    problems: tuple[str, ...] = field(default=(), compare=False)
    path: Path | None = field(default=None, compare=False)  # the file it was read from (and is written to)

    def editor_command(self) -> list[str]:
        """The editor to open long comments in, as argv (the file name is appended)."""
        raw = self.editor or os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        return shlex.split(raw)


def default_config_path() -> Path:
    return config_dir() / CONFIG_FILE_NAME


def parse_config(text: str, source: str) -> AppConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return AppConfig(problems=(f"{source}: not valid TOML ({exc}); fix the syntax or delete the file",))
    problems: list[str] = []
    values: dict[str, object] = {}
    choices = {"layout": LAYOUTS, "backend": BACKENDS, "target": TARGETS}
    for key, value in data.items():
        if key not in KEYS:
            problems.append(f"{source}: key {key!r}: unknown setting (known: {', '.join(sorted(KEYS))})")
            continue
        if key == "blind":
            if isinstance(value, bool):
                values[key] = value
            else:
                problems.append(f"{source}: key 'blind': expected true or false")
            continue
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{source}: key {key!r}: expected a non-empty string")
            continue
        if key in choices and value not in choices[key]:
            problems.append(f"{source}: key {key!r}: {value!r} is not one of {', '.join(choices[key])}")
            continue
        if key == "auditor":
            from nkitui.session.identity import IdentityError, parse_auditor

            try:
                parse_auditor(value)
            except IdentityError as exc:
                problems.append(f"{source}: key 'auditor': {exc}")
                continue
        values[key] = value.strip()
    return AppConfig(problems=tuple(problems), **values)  # type: ignore[arg-type]  # each value was checked against its key above


def load_config(path: Path | None = None) -> AppConfig:
    path = path or default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return AppConfig(path=path)
    except OSError as exc:
        return AppConfig(problems=(f"{path}: cannot be read ({exc.strerror})",), path=path)
    return replace(parse_config(text, str(path)), path=path)


def save_setting(path: Path, key: str, value: str) -> None:
    """Set one top-level string setting in the config file, keeping every other line (comments too):
    the line `key = ...` is replaced, or added before the first table. Atomic."""
    from nkitui.common.atomic import atomic_write_text

    if key not in KEYS:
        raise KeyError(f"unknown setting {key!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    line = f"{key} = {_toml_string(value)}"
    lines = text.splitlines()
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    first_table = next((i for i, s in enumerate(lines) if s.lstrip().startswith("[")), len(lines))
    found = next((i for i, s in enumerate(lines[:first_table]) if pattern.match(s)), None)
    if found is not None:
        lines[found] = line
    else:
        lines.insert(first_table, line)
    atomic_write_text(path, "\n".join(lines) + "\n")


def _toml_string(value: str) -> str:
    """A TOML basic string (what json.dumps writes is valid TOML for these characters)."""
    import json

    return json.dumps(value, ensure_ascii=False)

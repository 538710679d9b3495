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
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from nkitui.common.fields import FieldReader
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
    """Read config.toml's text; every problem names the file, the key (and its line) and the fix, and
    the keys with problems keep their defaults."""
    reader = FieldReader(source, "the Settings in README.md", locate=True)
    data = reader.parse_text(text)
    if data is None:
        return AppConfig(problems=tuple(reader.messages()))
    reader.unknown_keys(data, set(KEYS), "")
    values: dict[str, object] = {}
    for key, choices in (("layout", LAYOUTS), ("backend", BACKENDS), ("target", TARGETS)):
        if (value := reader.choice(data, key, key, choices)) is not None:
            values[key] = value
    for key in ("theme", "editor"):
        if (value := reader.str_(data, key, key, strip=True, example='"dark"' if key == "theme" else '"nvim"')):
            values[key] = value
    if "blind" in data:
        values["blind"] = reader.bool_(data, "blind", "blind", default=False)
    auditor = reader.str_(data, "auditor", "auditor", strip=True, example='"Ada Lovelace <ada@example.com>"')
    if auditor is not None:
        from nkitui.session.identity import IdentityError, parse_auditor

        try:
            parse_auditor(auditor)
        except IdentityError as exc:
            reader.error("auditor", str(exc), 'write auditor = "Your Name <you@example.com>"')
        else:
            values["auditor"] = auditor
    return AppConfig(problems=tuple(reader.messages()), **values)  # type: ignore[arg-type]  # each value was checked against its key above


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

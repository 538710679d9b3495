"""The auditor's settings: `<XDG config>/nkitui/config.toml`, validated strictly.

    theme = "dark"            # dark | light | high-contrast | a user theme's name
    layout = "auto"           # auto (tabs below 140x40, split above) | tabs | split
    editor = "nvim"           # long comments; default $VISUAL, then $EDITOR, then vi
    backend = "auto"          # default backend for runs: auto | emulator | simulator | neuron
    target = "trn2"           # default target when the task does not say: trn1 | trn2 | trn3
    blind = false             # hide other auditors' reviews until you have submitted your own

Command-line options win over the file. Problems name the file and the key; the app reports them and
uses the defaults for those keys.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from nkitui.common.paths import config_dir

CONFIG_FILE_NAME = "config.toml"
LAYOUTS = ("auto", "tabs", "split")
BACKENDS = ("auto", "emulator", "simulator", "neuron")
TARGETS = ("trn1", "trn2", "trn3")


@dataclass(frozen=True)
class AppConfig:
    theme: str | None = None
    layout: str = "auto"
    editor: str | None = None
    backend: str = "auto"
    target: str | None = None
    blind: bool = False
    problems: tuple[str, ...] = field(default=(), compare=False)

    def editor_command(self) -> list[str]:
        """The editor to open long comments in, as argv (the file name is appended)."""
        raw = self.editor or os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        return shlex.split(raw)

    def with_overrides(self, **changes: object) -> "AppConfig":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


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
        if key not in ("theme", "layout", "editor", "backend", "target", "blind"):
            problems.append(f"{source}: key {key!r}: unknown setting (known: backend, blind, editor, layout, target, theme)")
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
        values[key] = value.strip()
    return AppConfig(problems=tuple(problems), **values)  # type: ignore[arg-type]


def load_config(path: Path | None = None) -> AppConfig:
    path = path or default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return AppConfig()
    except OSError as exc:
        return AppConfig(problems=(f"{path}: cannot be read ({exc.strerror})",))
    return parse_config(text, str(path))

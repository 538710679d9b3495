"""nkitui's command line: opens the workstation or runs its headless twin.

Each sub-command lives in its own module in this package and defines `register(subparsers)`.
Modules are discovered automatically; heavy imports happen inside the handlers so that
`nkitui --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from nkitui import __version__

# Order in `nkitui --help`; modules not listed here come after, alphabetically.
COMMAND_ORDER = ["open", "demo", "check", "batch", "runs", "emu", "analyze", "review", "history", "export", "task", "perf"]


def _command_modules() -> list[str]:
    found = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    ordered = [name for name in COMMAND_ORDER if name in found]
    return ordered + sorted(name for name in found if name not in COMMAND_ORDER)


def _passthrough(name: str):
    """A command whose module defines `passthrough(argv)` parses its own arguments (e.g. `perf`)."""
    if name.startswith("-") or name not in _command_modules():
        return None
    return getattr(importlib.import_module(f"{__name__}.{name}"), "passthrough", None)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the command `only` (what a run of one command needs: the
    other commands' modules, some of which import numpy or the emulator, are not imported)."""
    parser = argparse.ArgumentParser(
        prog="nkitui",
        description="Terminal workstation for auditing CUDA-to-NKI kernel ports (AWS Trainium).",
    )
    parser.add_argument("--version", action="version", version=f"nkitui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _command_modules():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from nkitui.executor.confine import harden_parent

    harden_parent()  # not dumpable: no same-user process reads /proc/<nkitui>/environ, cwd or mem
    args_list = list(sys.argv[1:] if argv is None else argv)
    direct = _passthrough(args_list[0]) if args_list else None
    if direct is not None:
        return int(direct(args_list[1:]) or 0)
    commands = set(_command_modules())  # each module registers the command of its name
    # `nkitui [TASK_DIR]` opens the workstation: route a bare path to the `open` command.
    if args_list and not args_list[0].startswith("-") and args_list[0] not in commands:
        args_list = ["open", *args_list]
    elif not args_list:
        args_list = ["open"]
    parser = build_parser(only=args_list[0] if args_list[0] in commands else None)
    args = parser.parse_args(args_list)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130

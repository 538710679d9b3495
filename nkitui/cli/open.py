"""`nkitui [DIR]` / `nkitui open [DIR]`: open the workstation on a task, or the queue of the tasks under a folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from nkitui.common.names import AUTO, BACKEND_CHOICES, TARGET_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("open", help="open the workstation on a task, or the queue of the tasks under a folder "
                                    "(the default command: nkitui [DIR])")
    p.add_argument("task_dir", nargs="?", type=Path, default=Path("."), metavar="DIR",
                   help="a task folder (or its task.toml), or a folder holding several tasks: the queue (default: .)")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=AUTO, help="where runs execute (default: auto)")
    p.add_argument("--target", choices=TARGET_NAMES, default=None, help="Trainium generation (default: the task's)")
    p.add_argument("--theme", default=None, help="dark, light, high-contrast or a user theme's name")
    p.set_defaults(func=_open)


def _open(args: argparse.Namespace) -> int:
    from nkitui.app import run_app

    return run_app(args.task_dir, backend=args.backend, target=args.target, theme=args.theme)

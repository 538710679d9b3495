"""`nkitui demo`: copy the bundled sample tasks into a folder and open the queue of them."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="copy the bundled sample tasks into DIR (default ./nkitui-demo), one git repo each, and open the queue "
             "of them",
    )
    p.add_argument("--dir", type=Path, default=None, help="where to put the tasks (default: a new ./nkitui-demo folder)")
    p.add_argument("--no-open", action="store_true", help="only copy the tasks; do not open the queue")
    p.add_argument("--theme", default=None, help="theme to open with (e.g. dark, light, high-contrast)")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from nkitui.task.samples import default_demo_dir, install_samples

    dest = (args.dir or default_demo_dir()).resolve()
    installed = install_samples(dest)
    if args.no_open or not installed:
        # Without the queue to show them, say what is where.
        for item in installed:
            state = "created" if item.created else "kept (already there)"
            print(f"  {item.name:<28} {state}")
        print(f"{len(installed)} sample tasks in {dest}")
        return 0
    from nkitui.app import run_app

    code = run_app(dest, backend="emulator", theme=args.theme, mode="queue")
    print(f"The {len(installed)} sample tasks are in {dest}; `nkitui {dest}` opens their queue again.")
    return code

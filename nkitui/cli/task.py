"""`nkitui task validate|init`: check a task's manifest, or draft one from discovery."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("task", help="validate a task manifest or draft one (task validate|init DIR)")
    tsub = p.add_subparsers(dest="task_command", metavar="ACTION", required=True)
    v = tsub.add_parser("validate", help="report every problem in DIR/task.toml (exit 2 if any)")
    v.add_argument("task_dir", type=Path)
    v.set_defaults(func=_validate)
    i = tsub.add_parser("init", help="write DIR/task.toml drafted from the files found in DIR")
    i.add_argument("task_dir", type=Path)
    i.add_argument("--force", action="store_true", help="overwrite an existing task.toml")
    i.set_defaults(func=_init)


def _validate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from nkitui.task import TaskError, load_task

    console = Console(highlight=False)
    try:
        task = load_task(args.task_dir)
    except TaskError as exc:
        for p in exc.problems + exc.warnings:
            style = "red" if p.severity == "error" else "yellow"
            console.print(f"[{style}]{p.severity}[/] {escape(str(p))}", soft_wrap=True)  # "[[inputs]]" is text
        return 2
    for w in task.warnings:
        console.print(f"[yellow]warning[/] {escape(str(w))}", soft_wrap=True)
    if task.discovered:
        console.print(f"[yellow]no task.toml[/] in {task.root}: discovered")
        for g in task.guesses:
            console.print(f"  - {g}", soft_wrap=True)
        return 2 if not task.runnable else 0
    console.print(f"[green]ok[/] {task.id}: {task.title} ({len(task.inputs)} inputs, {len(task.outputs)} outputs, target {task.target})")
    return 0


def _init(args: argparse.Namespace) -> int:
    from nkitui.task import MANIFEST_NAME, TaskError, discover_task
    from nkitui.task.draft import draft_manifest

    target = args.task_dir / MANIFEST_NAME
    if target.exists() and not args.force:
        print(f"{target} already exists; use --force to overwrite it")
        return 2
    try:
        task = discover_task(args.task_dir)
    except TaskError as exc:
        print(exc)
        return 2
    target.write_text(draft_manifest(task), encoding="utf-8")
    print(f"wrote {target}; complete the [[inputs]] and [[outputs]] tables, then run `nkitui task validate {args.task_dir}`")
    return 0

"""`nkitui task validate|init`: check a task's manifest, or draft one from discovery."""

from __future__ import annotations

import argparse
from pathlib import Path

from nkitui.cli.textout import print_wrapped


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("task", help="validate a task manifest or draft one (task validate|init DIR)")
    tsub = p.add_subparsers(dest="task_command", metavar="ACTION", required=True)
    v = tsub.add_parser("validate", help="report every problem in DIR/task.toml (exit 2 if any)")
    v.add_argument("task_dir", type=Path, metavar="TASK_DIR", help="the task folder (or its task.toml)")
    v.set_defaults(func=_validate)
    i = tsub.add_parser("init", help="write DIR/task.toml drafted from the files found in DIR")
    i.add_argument("task_dir", type=Path, metavar="TASK_DIR",
                   help="the folder to write task.toml into (its files are discovered, never run)")
    i.add_argument("--force", action="store_true", help="overwrite an existing task.toml")
    i.set_defaults(func=_init)


def _validate(args: argparse.Namespace) -> int:
    from nkitui.cli.textout import print_styled
    from nkitui.task import TaskError, load_task

    try:
        task = load_task(args.task_dir)
    except TaskError as exc:
        for p in exc.problems + exc.warnings:
            style = "red" if p.severity == "error" else "yellow"
            print_styled(f"{p.severity} {p}", style, subsequent="    ")
        return 2
    for w in task.warnings:
        print_styled(f"warning {w}", "yellow", subsequent="    ")
    if task.discovered:
        print_styled(f"no task.toml in {task.root}: discovered", "yellow", subsequent="    ")
        for g in task.guesses:
            print_styled(f"  - {g}", subsequent="    ")
        return 2 if not task.runnable else 0
    print_styled(f"ok {task.id}: {task.title} ({len(task.inputs)} inputs, {len(task.outputs)} outputs, "
                 f"target {task.target})", "green", subsequent="    ")
    return 0


def _init(args: argparse.Namespace) -> int:
    from nkitui.task import MANIFEST_NAME, TaskError, discover_task
    from nkitui.task.draft import draft_manifest

    target = args.task_dir / MANIFEST_NAME
    if target.exists() and not args.force:
        print_wrapped(f"{target} already exists; use --force to overwrite it", subsequent="  ")
        return 2
    try:
        task = discover_task(args.task_dir)
    except TaskError as exc:
        print(exc)
        return 2
    target.write_text(draft_manifest(task), encoding="utf-8")
    print_wrapped(f"wrote {target}; complete the [[inputs]] and [[outputs]] tables, then run "
                  f"`nkitui task validate {args.task_dir}`", subsequent="  ")
    return 0

"""`nkitui runs`: the stored run results of `nkitui check` and the workstation.

    nkitui runs list TASK_DIR [--json]              a task's runs, newest first
    nkitui runs show RUN_ID [--task TASK_DIR] [--json]
                                                    one run's report (the same as `nkitui check` prints)
    nkitui runs compare A B [--task TASK_DIR] [--json]
                                                    A/B: checks, worst metrics, timing, utilisation

RUN_ID is a full id (20261130T133725Z-df614b) or its short id (df614b). Exit 0 on success, 2 when
the task folder, a run id or a stored file is not usable (the message says which and how to fix it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nkitui.common import units

EXIT_OK, EXIT_INVALID = 0, 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="stored run results: list a task's runs, show one, compare two (A/B)",
                       description="Run results stored by `nkitui check` and the workstation (in the XDG data folder).")
    actions = p.add_subparsers(dest="runs_command", metavar="ACTION")

    ls = actions.add_parser("list", help="a task's stored runs, newest first")
    ls.add_argument("task_dir", type=Path, help="the task folder (or its task.toml)")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=_list)

    show = actions.add_parser("show", help="the report of one stored run (as `nkitui check` prints it)")
    show.add_argument("run_id", help="full run id or its short id (the last 6 characters)")
    show.add_argument("--task", type=Path, metavar="TASK_DIR", help="look only among this task's runs")
    show.add_argument("--json", action="store_true", help="print the stored run result (JSON)")
    show.set_defaults(func=_show)

    cmp = actions.add_parser("compare", help="A/B comparison of two stored runs (B against A)")
    cmp.add_argument("run_a", metavar="A", help="the baseline run id")
    cmp.add_argument("run_b", metavar="B", help="the run compared with it")
    cmp.add_argument("--task", type=Path, metavar="TASK_DIR", help="look only among this task's runs")
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp.set_defaults(func=_compare)

    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_usage(sys.stderr)
    sys.stderr.write("error: choose an action: list, show or compare\n")
    return EXIT_INVALID


def _err(text: str) -> None:
    sys.stderr.write(f"error: {text}\n")


def _print_json(data: Any) -> None:
    from nkitui.common.codec import encode as jsonable

    print(json.dumps(jsonable(data), indent=2, allow_nan=False, ensure_ascii=False))


def _task_id(task_dir: Path) -> str | None:
    """The id of the task in `task_dir`, or None after saying what is wrong with it."""
    from nkitui.task import TaskError, load_task

    try:
        return load_task(task_dir).id
    except TaskError as exc:
        for problem in exc.problems:  # compiler style: "file [field]: error: ... — fix: ..."
            sys.stderr.write(f"{problem}\n")
        return None


def _load(store: Any, run_id: str, task_id: str | None) -> Any:
    """The stored RunResult, or None after saying why it cannot be had."""
    from nkitui.evaluate.run.result import ResultVersionError
    from nkitui.evaluate.run.store import RunNotFound

    try:
        return store.load(run_id, task_id)
    except RunNotFound as exc:
        _err(str(exc))
    except ResultVersionError as exc:
        _err(f"{exc} — the stored file cannot be read by this nkitui")
    return None


def _summary(s: Any, commit: bool = True) -> str:
    if s.error:
        return f"unreadable: {s.error}"
    parts = [f"{s.checks_passed}/{s.checks_total} checks"]
    if s.median_us is not None:
        parts.append(f"{s.timing_kind or ''} {units.time_us(s.median_us)}".strip())
    if commit and s.task_commit:
        parts.append(f"commit {s.task_commit[:10]}")
    return ", ".join(parts)


def _short_time(iso: str) -> str:
    """2026-11-30T14:54:20+00:00 -> 2026-11-30 14:54:20 (results are stamped in UTC)."""
    return iso.replace("T", " ").removesuffix("+00:00") if iso else "-"


def _list(args: argparse.Namespace) -> int:
    task_id = _task_id(args.task_dir)
    if task_id is None:
        return EXIT_INVALID
    from nkitui.evaluate.run.store import RunStore

    store = RunStore()
    runs = store.list(task_id)
    if args.json:
        _print_json({"task_id": task_id, "store": str(store.root),
                     "runs": [s.to_dict() | {"summary": _summary(s)} for s in runs]})
        return EXIT_OK
    if not runs:
        from nkitui.cli.textout import print_wrapped

        print_wrapped(f"no stored runs of task {task_id!r} (in {store.root}); `nkitui check {args.task_dir}` makes one",
                      subsequent="  ")
        return EXIT_OK
    from rich.table import Table
    from rich.text import Text

    from nkitui.common.textfit import FitText
    from nkitui.evaluate.present.report import STATUS_STYLE

    console = _console()
    # The id starts with the run's UTC time: where the terminal is narrow the time column goes first.
    with_time = console.width >= 104
    title = f"runs of {task_id}, newest first" + (" (times in UTC)" if with_time else " (ids start with the UTC time)")
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("id", no_wrap=True)
    if with_time:
        table.add_column("time", no_wrap=True)
    table.add_column("backend", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("summary")
    for s in runs:
        cells = [s.run_id] + ([_short_time(s.created_at)] if with_time else [])
        table.add_row(*cells, f"{s.backend}/{s.target}" if s.backend else "-",
                      Text(s.status, style=STATUS_STYLE.get(s.status, "yellow")), FitText(_summary(s, commit=False)))
    console.print(table)
    return EXIT_OK


def _report_console() -> Any:
    """The console `nkitui check` prints its report on (Rich's: the terminal's width or COLUMNS), so
    `runs show` prints exactly what check printed."""
    from rich.console import Console

    return Console(highlight=False)


def _console() -> Any:
    """A Rich console as wide as the terminal (or COLUMNS); a pipe or a file gets wide rows."""
    from nkitui.cli.textout import console

    return console()


def _show(args: argparse.Namespace) -> int:
    task_id = None
    if args.task is not None:
        task_id = _task_id(args.task)
        if task_id is None:
            return EXIT_INVALID
    from nkitui.evaluate.run.store import RunStore

    result = _load(RunStore(), args.run_id, task_id)
    if result is None:
        return EXIT_INVALID
    if args.json:
        print(result.to_json())
        return EXIT_OK

    from nkitui.evaluate.present.report import render_result

    _report_console().print(render_result(result))
    return EXIT_OK


def _compare(args: argparse.Namespace) -> int:
    task_id = None
    if args.task is not None:
        task_id = _task_id(args.task)
        if task_id is None:
            return EXIT_INVALID
    from nkitui.evaluate.run.store import RunStore, compare_runs

    store = RunStore()
    a, b = _load(store, args.run_a, task_id), _load(store, args.run_b, task_id)
    if a is None or b is None:
        return EXIT_INVALID
    comparison = compare_runs(a, b)
    if args.json:
        _print_json(comparison.to_dict())
        return EXIT_OK

    from nkitui.evaluate.present.report import render_comparison

    _report_console().print(render_comparison(comparison, a, b))
    return EXIT_OK

"""`nkitui analyze TASK_DIR [--json]`: static findings on the port and the CUDA<->NKI alignment."""

from __future__ import annotations

import argparse
from pathlib import Path

_EPILOG = """\
exit status:
  0  analysis done, no high-severity finding
  1  analysis done, at least one high-severity finding (a clear defect or a
     reward hack)
  2  the task or the command is invalid (the message says what and where)

Rules are documented in docs/analysis-rules.md; `--rules` lists them."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="static findings on the port and the CUDA<->NKI alignment",
        description=("Read the task's NKI port (and CUDA source) without running them: report idiom findings "
                     "(file:line, severity, rule id, a paragraph to paste into feedback) and pair CUDA "
                     "constructs with their NKI counterparts by role."),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("task_dir", metavar="TASK_DIR", nargs="?", type=Path, default=Path("."),
                   help="task folder (with task.toml, or discovered), default: current directory")
    p.add_argument("--json", action="store_true", help="print the report as JSON (findings, alignment, models)")
    p.add_argument("--rules", action="store_true", help="list every rule id with its severity and exit")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import json
    import sys

    from rich.console import Console

    from nkitui.analysis import all_rule_specs, analyze_task, render
    from nkitui.cli.textout import print_wrapped
    from nkitui.task import TaskError, load_task

    console = Console(highlight=False)
    if args.rules:
        for spec in all_rule_specs():  # a long title wraps under the titles, not under the ids
            print_wrapped(f"{spec.id:<20} {spec.severity:<6}  {spec.category:<11}  {spec.title}", subsequent=" " * 43)
        return 0
    try:
        task = load_task(args.task_dir)
    except TaskError as exc:
        # Plain text: "file [field]: error: ..." (through Rich, a field such as [kernel.entry] reads as markup)
        for problem in exc.problems:
            print_wrapped(str(problem), subsequent="    ", file=sys.stderr)
        if args.json:  # scripts reading stdout get the problems too, not an empty document
            sys.stdout.write(json.dumps({"version": 1, "ok": False,
                                         "problems": [p.to_dict() for p in exc.problems]}, indent=2) + "\n")
        return 2
    try:
        report = analyze_task(task)
    except (OSError, ValueError) as exc:
        print(f"nkitui analyze: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        console.print(render(report))
    return 1 if report.has_high else 0

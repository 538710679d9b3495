"""`nkitui check TASK_DIR`: headless evaluation with a Rich report or JSON (CONTRACT exit codes)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nkitui.common.names import AUTO, BACKEND_CHOICES, TARGET_NAMES


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _capped(parse, cap: float, what: str):  # noqa: ANN001, ANN202
    def parse_capped(text: str):  # noqa: ANN202
        value = parse(text)
        if value > cap:
            raise argparse.ArgumentTypeError(f"at most {cap:g} {what}, got {value:,}" if isinstance(value, int) else f"at most {cap:g} {what}, got {value:g}")
        return value

    return parse_capped


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="run a task's kernel against its reference in a sandboxed worker (exit 0 pass, 1 fail, 2 invalid)",
        description="Headless evaluation of a task: the kernel runs in a child process with limits; the report "
                    "lists phases, checks, metrics per seed, tolerance advice, timing and engine utilisation.",
    )
    p.add_argument("task_dir", type=Path, help="the task folder (or its task.toml)")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=AUTO,
                   help="where the kernel runs (default auto: the best available, with the reason in the report)")
    p.add_argument("--target", choices=TARGET_NAMES, help="hardware generation (default: the task's)")
    p.add_argument("--seeds", type=_capped(_positive_int, 1000, "seeds (each is a whole run)"), metavar="N",
                   help="run seeds 0..N-1 (default: the task's, usually 0 1 2; at most 1000)")
    p.add_argument("--timeout", type=_capped(_positive_float, 86400, "seconds (a day)"), metavar="S",
                   help="wall-clock limit of the run in seconds (at most 86400)")
    p.add_argument("--memory-mb", type=_positive_int, metavar="MB", help="address-space limit of the worker (default 8192)")
    p.add_argument("--json", action="store_true", help="print the run result as JSON instead of the report")
    p.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    p.add_argument("--no-static", action="store_true", help="skip static analysis of the port")
    p.add_argument("--no-trials", action="store_true", help="skip the adversarial-input trials")
    p.add_argument("--no-precision", action="store_true", help="skip precision isolation (precise off vs on)")
    p.add_argument("--mutants", action="store_true", help="also run mutation testing of the task's tolerance (slower)")
    p.add_argument("--no-store", action="store_true", help="do not keep the result in the run store")
    p.set_defaults(func=_check)


def _progress_printer(stream):  # noqa: ANN001, ANN202
    from nkitui.cli.textout import print_wrapped
    from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, ProgressEvent

    detail_column = " " * 33  # a wrapped detail stays under the details, not under the phase names

    def show(event) -> None:  # noqa: ANN001
        if isinstance(event, PhaseEvent) and event.state == "end":
            dur = f"{event.duration_s:.2f} s" if event.duration_s is not None else ""
            print_wrapped(f"  {event.name:<10} {event.status:<8} {dur:>9}  {event.detail}", subsequent=detail_column,
                          file=stream)
        elif isinstance(event, ProgressEvent):
            pass
        elif isinstance(event, ErrorEvent):
            print_wrapped(f"  error ({event.kind}): {event.message}", subsequent="    ", file=stream)
        elif isinstance(event, LogEvent) and event.stream == "worker" and event.text.startswith("backend:"):
            print_wrapped(f"  {event.text}", subsequent="    ", file=stream)
        stream.flush()

    return show


def _check(args: argparse.Namespace) -> int:
    from nkitui.evaluate.options import EvaluationOptions, EvaluationRequest
    from nkitui.evaluate.run.headless import EXIT_INVALID, run_check
    from nkitui.executor.limits import DEFAULT_MEMORY_MB

    options = EvaluationOptions(backend=args.backend, target=args.target, seeds=args.seeds, static=not args.no_static,
                                trials=not args.no_trials, precision=not args.no_precision, mutants=args.mutants)
    request = EvaluationRequest(args.task_dir, options, timeout_s=args.timeout,
                                memory_mb=args.memory_mb or DEFAULT_MEMORY_MB, store=not args.no_store)
    live = None if (args.json or args.quiet) else _progress_printer(sys.stderr)
    if live is not None:
        sys.stderr.write(f"checking {args.task_dir} ...\n")
    outcome = run_check(request, on_event=live)
    if outcome.result is None:
        if args.json:
            print(json.dumps({"status": "invalid", "exit_code": outcome.exit_code, "problems": outcome.problems}, indent=2))
        else:
            from nkitui.cli.textout import print_wrapped

            for problem in outcome.problems:
                print_wrapped(str(problem), subsequent="    ", file=sys.stderr)
        return outcome.exit_code
    if args.json:
        print(outcome.result.to_json())
    else:
        from rich.console import Console

        from nkitui.evaluate.present.report import render_result

        Console(highlight=False).print(render_result(outcome.result))
        if outcome.exit_code == EXIT_INVALID:
            for problem in outcome.problems:
                sys.stderr.write(f"{problem}\n")
    return outcome.exit_code

"""`nkitui batch DIR`: `nkitui check` on every task under DIR, on a local pool or on Ray.

    nkitui batch DIR [--workers N] [--backend B] [--target T] [--seeds N] [--timeout S] [--resume]
                     [--jsonl OUT] [--table OUT.csv|OUT.jsonl] [--ray [ADDRESS]] ...
    nkitui batch export DIR [--out FILE] [--format csv|jsonl]

A live progress bar (ETA, counts per state) on a terminal, one plain line per task otherwise, a
summary table at the end. Exit 0 every task passed, 1 any failed (or timed out, crashed), 2 any
was invalid, 130 after Ctrl-C (finished results are kept; running evaluations are stopped).
docs/batch.md has the JSONL schema and the Ray set-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nkitui.cli.check import _positive_float, _positive_int
from nkitui.common.names import AUTO, BACKEND_CHOICES, TARGET_NAMES

STATUS_STYLE = {
    "passed": ("✓", "green"), "failed": ("✗", "red"), "invalid": ("!", "magenta"), "timeout": ("⏱", "yellow"),
    "cancelled": ("-", "dim"), "crashed": ("✗", "red"), "memory-limit": ("✗", "red"), "cpu-limit": ("✗", "red"),
    "killed": ("✗", "red"), "internal-error": ("✗", "red"),
}
COUNT_ORDER = ("passed", "failed", "invalid", "timeout", "crashed", "cancelled")
FULL_TABLE_MAX = 40  # above this many tasks the summary lists only those that did not pass
LISTED_MAX = 100


def register(sub: argparse._SubParsersAction) -> None:
    # Listed in `nkitui --help`; `passthrough` parses (so that `nkitui batch export DIR` works too).
    sub.add_parser("batch", help="`check` every task under a folder: local process pool or Ray; --resume, JSONL, "
                                 "export a verdict/findings/latency/scores table (exit 0/1/2 like check)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nkitui batch",
        description="Run the same evaluation as `nkitui check` on every task found under DIR (folders with a "
                    "task.toml, or discovered ports), keep each result in the run store, and print a summary. "
                    "Exit 0 every task passed, 1 any failed, 2 any was invalid, 130 interrupted. "
                    "`nkitui batch export DIR` writes the aggregate table without running anything.",
        epilog="See docs/batch.md for the JSONL schema, resume rules and running on a Ray cluster.",
    )
    p.add_argument("dir", type=Path, nargs="?", help="the folder holding the tasks (searched recursively)")
    run = p.add_argument_group("where and how many")
    run.add_argument("--workers", type=_positive_int, metavar="N",
                     help="evaluations at once (default: from the CPUs and free memory; with --ray: the cluster's CPUs)")
    run.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                     help="run on Ray: alone, start a local Ray runtime; with ADDRESS (host:port, ray://host:10001 "
                          "or auto) join an existing cluster (needs the `ray` extra)")
    run.add_argument("--cpus-per-task", type=_positive_float, default=1.0, metavar="N",
                     help="with --ray: CPUs each task reserves (default 1; e.g. 4 on Trn hosts, where neuronx-cc compiles)")
    run.add_argument("--neuron-cores-per-task", type=_positive_int, default=1, metavar="N",
                     help="with --ray on a cluster with NeuronCores: cores each kernel reserves (default 1)")
    check = p.add_argument_group("evaluation (as `nkitui check`)")
    check.add_argument("--backend", choices=BACKEND_CHOICES, default=AUTO,
                       help="where each kernel runs (default auto)")
    check.add_argument("--target", choices=TARGET_NAMES, help="hardware generation (default: each task's)")
    check.add_argument("--seeds", type=_positive_int, metavar="N", help="run seeds 0..N-1 (default: each task's)")
    check.add_argument("--timeout", type=_positive_float, metavar="S", help="wall-clock limit of each task's run in seconds")
    check.add_argument("--memory-mb", type=_positive_int, metavar="MB", help="address-space limit of each worker (default 8192)")
    check.add_argument("--no-static", action="store_true", help="skip static analysis of the ports")
    check.add_argument("--no-trials", action="store_true", help="skip the adversarial-input trials")
    check.add_argument("--no-precision", action="store_true", help="skip precision isolation")
    check.add_argument("--mutants", action="store_true", help="also run mutation testing of each tolerance (slower)")
    out = p.add_argument_group("results")
    out.add_argument("--resume", action="store_true",
                     help="skip tasks that already have a result (passed, failed or invalid) for their current commit, "
                          "this nkitui version and these options")
    out.add_argument("--jsonl", metavar="OUT", help="write one JSON line per task to OUT ('-' for standard output)")
    out.add_argument("--table", type=Path, metavar="OUT",
                     help="after the run, export the aggregate table (verdict, findings, latency, review scores) "
                          "to OUT.csv or OUT.jsonl")
    out.add_argument("--no-store", action="store_true", help="do not keep results in the run store (disables --resume)")
    out.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    return p


def build_export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nkitui batch export",
        description="One row per task under DIR: its latest verdict for its current commit (from the run store), "
                    "findings by severity, estimated latency and the submitted review scores per criterion.",
    )
    p.add_argument("dir", type=Path, help="the folder holding the tasks")
    p.add_argument("--out", type=Path, help="write to this file (format from its suffix) instead of standard output")
    p.add_argument("--format", choices=("csv", "jsonl"), help="output format (default: the --out suffix, else csv)")
    return p


def passthrough(argv: list[str]) -> int:
    if argv and argv[0] == "export":
        return _export(build_export_parser().parse_args(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dir is None and args.ray not in (None, "local") and Path(args.ray).is_dir():
        args.dir, args.ray = Path(args.ray), "local"  # `nkitui batch --ray DIR`
    if args.dir is None:
        parser.error("give the folder holding the tasks: nkitui batch DIR")
    try:
        return _batch(args)
    except KeyboardInterrupt:
        return 130


# -- nkitui batch DIR ----------------------------------------------------------------------------

def _error(message: str, fix: str) -> int:
    sys.stderr.write(f"error: {message} — fix: {fix}\n")
    return 2


def _options(args: argparse.Namespace):  # noqa: ANN202
    from nkitui.batch import BatchOptions
    from nkitui.executor.limits import DEFAULT_MEMORY_MB

    return BatchOptions(backend=args.backend, target=args.target, seeds=args.seeds, timeout_s=args.timeout,
                        memory_mb=args.memory_mb or DEFAULT_MEMORY_MB, static=not args.no_static,
                        trials=not args.no_trials, precision=not args.no_precision, mutants=args.mutants,
                        store=not args.no_store)


def _executor(args: argparse.Namespace):  # noqa: ANN202
    if args.ray is None:
        from nkitui.batch.local import LocalExecutor

        return LocalExecutor(args.workers)
    from nkitui.batch.ray_executor import RayExecutor

    return RayExecutor(None if args.ray == "local" else args.ray, workers=args.workers, num_cpus=args.cpus_per_task,
                       neuron_cores=args.neuron_cores_per_task)


def _batch(args: argparse.Namespace) -> int:
    from rich.console import Console

    from nkitui.batch.runner import start_batch

    root: Path = args.dir
    if not root.is_dir():
        what = "is a file, not a folder" if root.is_file() else "no such folder"
        return _error(f"{root}: {what}", "give the folder that holds the tasks (each with a task.toml)")
    if args.resume and args.no_store:
        return _error("--resume needs the run store", "drop --no-store")
    if args.ray is None and (args.cpus_per_task != 1.0 or args.neuron_cores_per_task != 1):
        return _error("--cpus-per-task and --neuron-cores-per-task are Ray resources", "add --ray (or drop them)")
    if args.table is not None and args.table.suffix not in (".csv", ".jsonl"):
        return _error(f"--table {args.table}: unknown format", "name the file .csv or .jsonl")
    jsonl_to_stdout = args.jsonl == "-"
    report = Console(stderr=jsonl_to_stdout, highlight=False)  # the summary: stdout unless JSONL goes there
    progress_console = Console(stderr=True, highlight=False)
    try:
        executor = _executor(args)
    except Exception as exc:  # noqa: BLE001 - Ray missing or unreachable: say so and how to fix it
        from nkitui.batch.ray_executor import RayUnavailable

        if isinstance(exc, RayUnavailable):
            return _error(str(exc), exc.fix)
        raise
    jsonl: Any = sys.stdout if jsonl_to_stdout else (Path(args.jsonl) if args.jsonl else None)
    handle = start_batch(root, options=_options(args), executor=executor, resume=args.resume, jsonl=jsonl)
    live = not args.quiet and progress_console.is_terminal
    view = _LiveView(progress_console) if live else _PlainView(None if args.quiet else progress_console)
    try:
        _consume(handle, view)
    finally:
        view.close()
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    summary = handle.summary
    _print_summary(report, handle, summary)
    if args.table is not None:
        code = _write_table(root, args.table, None, report)
        if code:
            return code
    return summary.exit_code


def _consume(handle, view) -> None:  # noqa: ANN001
    """Feed every event to the view; the first Ctrl-C cancels the batch and waits for its end."""
    interrupted = False
    while True:
        try:
            for event in handle.events():  # a fresh iterator after an interrupt: the queue keeps its place
                view.show(event)
            return
        except KeyboardInterrupt:
            if not interrupted:
                interrupted = True
                handle.cancel()
                view.note("cancelling: stopping the running evaluations (finished results are kept) …")
            else:
                view.note("still stopping; the running workers are being killed …")


class _PlainView:
    """One line per finished task (and the start and end of the batch): for logs and pipes."""

    def __init__(self, console) -> None:  # noqa: ANN001
        self.console = console
        self.done = 0
        self.total = 0

    def note(self, text: str) -> None:
        self._line(text, force=True)

    def _line(self, text: str, force: bool = False) -> None:
        if self.console is None and not force:
            return
        stream = self.console.file if self.console is not None else sys.stderr
        stream.write(text + "\n")  # whole lines, never wrapped: logs are read with grep
        stream.flush()

    def show(self, event) -> None:  # noqa: ANN001
        from nkitui.batch.events import BatchStarted, TaskFinished

        if self.console is None:
            return
        if isinstance(event, BatchStarted):
            self.total = len(event.tasks)
            resumed = len(event.tasks) - event.to_run
            extra = f" ({resumed} resumed or invalid)" if resumed else ""
            self._line(f"batch: {len(event.tasks)} task(s) under {event.root}, {event.to_run} to run{extra}; "
                       f"{event.executor}, {event.workers} at once ({event.workers_reason})")
        elif isinstance(event, TaskFinished):
            self.done += 1
            self._line(f"[{self.done}/{self.total}] {task_line(event.record)}")

    def close(self) -> None:
        pass


def task_line(record) -> str:  # noqa: ANN001
    """status, key, checks, time; why when it did not pass."""
    parts = [f"{record.status:<8} {record.key}"]
    details = []
    if record.resumed:
        details.append("resumed")
    if record.checks_total:
        details.append(f"{record.checks_passed}/{record.checks_total} checks")
    if record.duration_s is not None and not record.resumed:
        details.append(f"{record.duration_s:.1f} s")
    if record.attempts > 1:
        details.append(f"attempt {record.attempts}")
    if record.commit is None and record.commit_note:
        details.append("commit unknown")
    if details:
        parts.append(f"({', '.join(details)})")
    if record.status != "passed":
        why = ", ".join(record.failed_checks) if record.failed_checks else ""
        if not why and record.problems:
            why = record.problems[0]
        elif not why and record.error:
            why = record.error.get("message", "")
        if why:
            parts.append(f"— {why}")
    return " ".join(parts)


class _LiveView:
    """rich.progress: one bar with ETA and the count of tasks in each state; a line per finished task above it."""

    def __init__(self, console) -> None:  # noqa: ANN001
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = console
        self.counts: dict[str, int] = {}
        self.running: set[str] = set()
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[states]}"),
            console=console, transient=True, expand=True,
        )
        self.bar = self.progress.add_task("batch", total=None, states="")
        self.progress.start()

    def _states(self) -> str:
        parts = [f"[cyan]▶{len(self.running)}[/]"] if self.running else []
        for status in [*COUNT_ORDER, *sorted(set(self.counts) - set(COUNT_ORDER))]:
            n = self.counts.get(status, 0)
            if n:
                mark, style = STATUS_STYLE.get(status, ("?", "red"))
                parts.append(f"[{style}]{mark}{n}[/]")
        return " ".join(parts)

    def note(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False)

    def show(self, event) -> None:  # noqa: ANN001
        from nkitui.batch.events import BatchStarted, TaskFinished, TaskStarted

        if isinstance(event, BatchStarted):
            self.progress.update(self.bar, total=len(event.tasks))
            self.note(f"batch: {len(event.tasks)} task(s), {event.to_run} to run; {event.executor}, "
                      f"{event.workers} at once ({event.workers_reason})")
        elif isinstance(event, TaskStarted):
            self.running.add(event.key)
        elif isinstance(event, TaskFinished):
            record = event.record
            self.running.discard(record.key)
            self.counts[record.status] = self.counts.get(record.status, 0) + 1
            mark, style = STATUS_STYLE.get(record.status, ("?", "red"))
            from rich.text import Text

            line = Text(f"{mark} ", style=style)
            line.append(task_line(record))
            self.progress.console.print(line, overflow="ellipsis", no_wrap=True)
            self.progress.advance(self.bar)
        self.progress.update(self.bar, states=self._states())

    def close(self) -> None:
        self.progress.stop()


def _print_summary(console, handle, summary) -> None:  # noqa: ANN001
    from rich.table import Table

    records = [handle.records[t.key] for t in handle.tasks if t.key in handle.records]
    shown = records if len(records) <= FULL_TABLE_MAX else [r for r in records if r.status != "passed"][:LISTED_MAX]
    if shown:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
        table.add_column("task", overflow="ellipsis", no_wrap=True, ratio=1, min_width=8)
        table.add_column("status", no_wrap=True)
        table.add_column("checks", justify="right", no_wrap=True)
        table.add_column("H/M/L", justify="right", no_wrap=True)
        table.add_column("latency", justify="right", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        for r in shown:
            mark, style = STATUS_STYLE.get(r.status, ("?", "red"))
            checks = f"{r.checks_passed}/{r.checks_total}" if r.checks_total else "-"
            findings = f"{r.findings.get('high', 0)}/{r.findings.get('medium', 0)}/{r.findings.get('low', 0)}"
            latency = _latency(r.latency_us, r.latency_kind)
            time_s = "resumed" if r.resumed else (f"{r.duration_s:.1f}s" if r.duration_s is not None else "-")
            table.add_row(r.key, f"[{style}]{mark} {r.status}[/]", checks, findings, latency, time_s)
        console.print(table)
        if len(shown) < len(records):
            hidden = len(records) - len(shown)
            console.print(f"({hidden} more task(s) not listed: the passed ones, or past the first {LISTED_MAX}; "
                          "--jsonl has every task)", highlight=False)
    counts = ", ".join(f"{summary.counts[s]} {s}" for s in [*COUNT_ORDER, *sorted(set(summary.counts) - set(COUNT_ORDER))]
                       if summary.counts.get(s))
    extra = []
    if summary.resumed:
        extra.append(f"{summary.resumed} resumed")
    if summary.not_run:
        extra.append(f"{summary.not_run} not run")
    tail = f" ({', '.join(extra)})" if extra else ""
    console.print(f"{summary.total} task(s): {counts or 'none run'}{tail} in {summary.wall_s:.1f} s "
                  f"on {summary.executor} ×{summary.workers}", highlight=False)
    unknown = [r for r in records if r.commit is None and r.commit_note]
    if unknown:
        console.print(f"{len(unknown)} task(s) with an unknown commit ({unknown[0].commit_note.split(':')[0]}): their "
                      "results cannot be tied to a version", highlight=False)
    for note in summary.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    if summary.error:
        console.print(f"error: {summary.error}", highlight=False, markup=False)
    if summary.cancelled:
        console.print("interrupted: finished results are kept; `--resume` continues where this stopped",
                      highlight=False)


def _latency(us: float | None, kind: str | None) -> str:
    if us is None:
        return "-"
    text = f"{us:.1f}µs" if us < 1000 else f"{us / 1000:.2f}ms"
    return f"~{text}" if kind == "estimated" else text


# -- nkitui batch export DIR -------------------------------------------------------------------

def _write_table(root: Path, out: Path | None, fmt: str | None, console) -> int:  # noqa: ANN001
    import io

    from nkitui.batch.aggregate import aggregate, write_csv, write_jsonl
    from nkitui.common.atomic import atomic_write_text

    fmt = fmt or (out.suffix.lstrip(".") if out is not None and out.suffix in (".csv", ".jsonl") else "csv")
    table = aggregate(root)
    buffer = io.StringIO()
    (write_csv if fmt == "csv" else write_jsonl)(table, buffer)
    for problem in table.problems:
        sys.stderr.write(f"{problem}\n")
    if out is None:
        sys.stdout.write(buffer.getvalue())
        return 0
    try:
        atomic_write_text(out, buffer.getvalue())
    except OSError as exc:
        return _error(f"cannot write {out}: {exc.strerror or exc}", "choose a writable path")
    console.print(f"wrote the table of {len(table.rows)} task(s) to {out}", highlight=False, markup=False)
    return 0


def _export(args: argparse.Namespace) -> int:
    from rich.console import Console

    if not args.dir.is_dir():
        what = "is a file, not a folder" if args.dir.is_file() else "no such folder"
        return _error(f"{args.dir}: {what}", "give the folder that holds the tasks")
    if args.format is None and args.out is not None and args.out.suffix not in (".csv", ".jsonl"):
        return _error(f"--out {args.out}: cannot tell the format from the name", "name it .csv or .jsonl, or give --format")
    return _write_table(args.dir, args.out, args.format, Console(stderr=True, highlight=False))

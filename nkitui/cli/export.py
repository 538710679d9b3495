"""`nkitui export DIR [--format jsonl|csv] [--out FILE]`: every review under DIR, one record per review.

Corrupt review files are reported on standard error and skipped. Exit 2 when DIR is missing or
the output file cannot be written.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="every review under DIR as JSON lines or CSV, one record per review")
    p.add_argument("dir", type=Path, metavar="DIR",
                   help="a folder: every review under it (a task, or a folder of tasks) is exported")
    p.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="output format (default jsonl)")
    p.add_argument("--out", type=Path, help="write to this file instead of standard output")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from nkitui.common.atomic import atomic_write_text
    from nkitui.review import export

    if not args.dir.is_dir():
        what = "is a file, not a folder" if args.dir.is_file() else "no such folder"
        print(f"error: {args.dir}: {what} — fix: give a folder holding tasks with reviews/", file=sys.stderr)
        return 2
    buffer = io.StringIO()
    result = export(args.dir, buffer, args.format)
    for p in result.problems:
        print(p, file=sys.stderr)
    if args.out is None:
        sys.stdout.write(buffer.getvalue())
    else:
        try:
            atomic_write_text(args.out, buffer.getvalue())
        except OSError as exc:
            print(f"error: cannot write {args.out}: {exc.strerror or exc} — fix: choose a writable path", file=sys.stderr)
            return 2
        skipped = f", skipped {len(result.problems)} corrupt file(s)" if result.problems else ""
        print(f"wrote {len(result.rows)} review(s) to {args.out}{skipped}", file=sys.stderr)
    return 0

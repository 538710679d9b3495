"""`nkitui perf ...`: the cost model's own commands (estimate, profile, compare, sol)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    # Listed in `nkitui --help`; the arguments are parsed by nkitui.perf's own parser (passthrough).
    sub.add_parser(
        "perf",
        help="cost model: estimate a saved trace, parse a profiler export, compare two, or a task's speed of light",
    )


def passthrough(argv: list[str]) -> int:
    from nkitui.perf.__main__ import main

    return int(main(argv, prog="nkitui perf") or 0)

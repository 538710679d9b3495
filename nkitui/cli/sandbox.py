"""`nkitui sandbox check [--json]`: what the confinement of kernels can and does stop on this host.

A confined child, started exactly as a kernel's worker is, tries each escape (writes and reads
outside its scratch folder, nkitui's /proc entries, sockets, processes, signals, ptrace, io_uring,
exec) and the parent judges each attempt. Exit 0: every layer is active and every escape was
refused; 1: a layer is degraded on this host or an escape worked (the table says which).
"""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("sandbox", help="show and prove the confinement kernels run under",
                                   description="Inspect the OS confinement of untrusted task code on this host.")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION")
    check = sub.add_parser("check", help="try every escape in a confined child and report each layer",
                           description=__doc__.split("\n\n")[1])
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(func=_check)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _check(args) -> int:
    from nkitui.executor.confine.selftest import run_selftest

    try:
        result = run_selftest()
    except (OSError, RuntimeError) as exc:
        print(f"nkitui sandbox check: error: could not start a confined child: {exc}", file=sys.stderr)
        return 1
    degraded = result.report.get("degraded", [])
    ok = not result.failed and not degraded
    if args.json:
        print(json.dumps({**result.to_dict(), "ok": ok}))
        return 0 if ok else 1
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    console.print(result.report.get("summary", ""))
    seen = result.observed
    console.print(f"parent's view of the child in /proc: Seccomp {seen.get('seccomp')}, "
                  f"NoNewPrivs {int(bool(seen.get('no_new_privs')))}, own session {'yes' if seen.get('own_session') else 'no'}; "
                  f"nkitui itself {'dumpable (not hardened)' if result.dumpable else 'not dumpable'}")
    for line in result.report.get("details", []):
        console.print(f"  {line}")
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("escape attempt", overflow="fold", ratio=3)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=2)
    style = {"verified": "green", "FAILED": "bold red", "unverified": "yellow"}
    for p in result.probes:
        shown = {"verified": "stopped", "FAILED": "ESCAPED", "unverified": "unverified"}[p.outcome]
        if p.name == "threads":
            shown = "works" if p.outcome == "verified" else "BROKEN"
        table.add_row(p.what, f"[{style[p.outcome]}]{shown}[/]", p.detail)
    console.print(table)
    unverified = [p for p in result.probes if p.outcome == "unverified"]
    console.print(f"{result.verified} of {len(result.protections)} protections verified on this host "
                  f"in {result.seconds * 1000:.0f} ms"
                  + (f"; {len(unverified)} unverified (the layer is missing here)" if unverified else "")
                  + (f"; {len(result.failed)} FAILED" if result.failed else ""))
    return 0 if ok else 1

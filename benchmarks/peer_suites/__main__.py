"""`python -m benchmarks.peer_suites SUITE [options] [-- pytest args]`: SUITE names an adapter module
of this package (nki_library, nki_samples); see common.py for the options and the interface."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

from benchmarks.peer_suites.common import main


def _adapters() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)])
                  if m.name not in ("common", "plugin", "__main__") and not m.ispkg)


def cli(argv: list[str]) -> int:
    names = _adapters()
    if not argv or argv[0] in ("-h", "--help") or argv[0].replace("-", "_") not in names:
        print(f"usage: python -m benchmarks.peer_suites {{{','.join(names)}}} [--checkout DIR] [--python PY] "
              "[-n N] [--timeout S] [--memory-mb MB] [--json FILE] [--only] [-- pytest args] | --merge REPORT.json...", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"benchmarks.peer_suites.{argv[0].replace('-', '_')}")
    entry = getattr(module, "main", None)
    return entry(argv[1:]) if callable(entry) and entry is not main else main(module.SUITE, argv[1:])


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))

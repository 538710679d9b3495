"""Static-analysis speed: `analyze_task` on every bundled sample task, as a ratio to just parsing the
same files (Python's ast for the NKI port, tree-sitter for the CUDA source) in the same run.

    .venv/bin/python benchmarks/analysis.py [--repeat N]

Goal (issue #10): a typical task is analysed in well under a second; the ratio shows how much the
models, rules and alignment cost on top of parsing.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tree_sitter as ts  # noqa: E402
import tree_sitter_cuda as tsc  # noqa: E402

from nkitui.analysis import analyze_task  # noqa: E402
from nkitui.common.resources import bundled_dir  # noqa: E402
from nkitui.task import load_task  # noqa: E402
from nkitui.task.samples import sample_task_names  # noqa: E402
from timing import best_of  # noqa: E402  (benchmarks/timing.py)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cuda_parser = ts.Parser(ts.Language(tsc.language()))
    root = bundled_dir("sample_tasks")
    analyze_task(load_task(root / sample_task_names()[0]))  # warm imports and caches
    print(f"{'task':<26} {'analyze':>10} {'parse only':>11} {'ratio':>7}")
    ratios = []
    for name in sample_task_names():
        task = load_task(root / name)
        nki_text = task.sources.nki.read_text()
        cuda_bytes = task.sources.cuda.read_bytes() if task.sources.cuda else b""

        def parse_only(nki_text: str = nki_text, cuda_bytes: bytes = cuda_bytes) -> None:
            ast.parse(nki_text)
            if cuda_bytes:
                cuda_parser.parse(cuda_bytes)

        full = best_of(lambda task=task: analyze_task(task), args.repeat)
        base = best_of(parse_only, args.repeat)
        ratios.append(full / base)
        print(f"{name:<26} {full * 1e3:>8.1f}ms {base * 1e3:>9.2f}ms {full / base:>6.1f}x")
    print(f"median ratio to parsing alone: {statistics.median(ratios):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

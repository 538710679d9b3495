"""HACK-ENV-PROBE: code that asks where it runs (red team A, finding 4): what it flags, and what it leaves alone."""

from __future__ import annotations

import textwrap

import pytest

from nkitui.analysis import analyze_task, integrity_findings
from nkitui.analysis.rules.probes import env_probe_findings, probe_lines
from nkitui.task import load_task
from tests.analysis.conftest import SAMPLE_TASKS, findings

HEADER = """\
import os
import sys
import time
import platform
import socket
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from os import getcwd
from os.path import exists
"""

# (construct, a word of what the finding says it asks about)
PROBES = [
    ("x = os.getcwd()", "working folder"),
    ("x = getcwd()", "working folder"),
    ("x = os.environ.get('USER')", "environment"),
    ("x = os.environ['HOME']", "environment"),
    ("x = os.getenv('NKITUI')", "environment"),
    ("x = os.path.exists('data')", "file system"),
    ("x = exists('data')", "file system"),
    ("x = os.listdir('.')", "file system"),
    ("x = os.getpid()", "process"),
    ("x = sys.argv", "command line"),
    ("x = sys.executable", "interpreter"),
    ("x = sys.platform", "interpreter"),
    ("x = platform.node()", "platform"),
    ("x = socket.gethostname()", "host"),
    ("x = time.perf_counter()", "clock"),
    ("x = __file__", "copied"),
    ("x = nl.__name__", "identity"),
    ("x = nki.__file__", "identity"),
    ("x = type(a)", "type"),
    ("x = str(type(a))", "type"),
    ("x = a.__class__", "type"),
    ("x = nl.add.__module__", "type"),
    ("x = type(a).__qualname__", "type"),
    ("x = isinstance(a, np.ndarray)", "not NKI"),
    ("x = isinstance(a, type(b))", "not NKI"),
    ("x = hasattr(a, 'storage_id')", "does not promise"),
    ("x = getattr(a, 'geometry', None)", "does not promise"),
    ("x = dir(nl)", "imported module"),
    ("x = 'nkitui' in repr(a)", "nkitui"),
    ("x = repr(a).startswith('<Emulated')", "emulat"),
    ("x = 'NEURONXCC' in str(nl)", "neuronxcc"),
    ("x = open('/proc/self/cmdline').read()", "/proc"),
    ("x = len('/dev/neuron0')", "dev"),
]


def _kernel(line: str) -> str:
    return HEADER + textwrap.dedent(f"""
        @nki.jit
        def add(a, b):
            {line}
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            return out
        """)


@pytest.mark.parametrize("line,word", PROBES, ids=[p[0] for p in PROBES])
def test_each_probe_is_flagged_high_at_its_line(line: str, word: str) -> None:
    source = _kernel(line)
    at = source.splitlines().index(f"    {line}") + 1
    [finding] = env_probe_findings(source, "k.py")
    assert finding.rule == "HACK-ENV-PROBE" and finding.severity == "high" and finding.category == "integrity"
    assert at in finding.data["lines"] and f"line {at}:" in finding.message, finding.message
    assert word.lower() in finding.message.lower(), finding.message


def test_probing_for_a_private_module_is_flagged() -> None:
    source = "try:\n    from neuronxcc.starfish.penguin import targets\n    DEVICE = 1\nexcept ImportError:\n" \
             "    DEVICE = 0\n" + _kernel("pass")
    [finding] = env_probe_findings(source, "k.py")
    assert finding.severity == "high" and finding.line == 1 and "neuronxcc.starfish.penguin" in finding.message


BENIGN = [
    "assert isinstance(n, int)",
    "flag = isinstance(scale, (int, float))",
    "flag = type(scale) is float",
    "flag = type(scale) in (int, float)",
    "flag = isinstance(a, nl.NkiTensor)",
    "flag = isinstance(cfg, Config)",
    "flag = hasattr(a, 'shape')",
    "print('tile', file=sys.stderr)",
    "big = sys.maxsize",
    "time.sleep(0.01)",
    "flag = mode == 'exp'",
    "flag = a.dtype == nl.float32",
]


def test_what_kernels_do_honestly_is_not_flagged() -> None:
    source = HEADER + textwrap.dedent("""
        os.environ["NEURON_CC_FLAGS"] = "--auto-cast=none"

        try:
            import nki.language as nl2
        except ImportError:
            import neuronxcc.nki.language as nl2


        class Config:
            tile = 128
        """) + "\n".join(_kernel(line)[len(HEADER):].replace("def add", f"def add{i}") for i, line in enumerate(BENIGN)) \
        + textwrap.dedent("""

        if __name__ == "__main__":
            import argparse
            print(os.getcwd(), sys.argv, time.time(), __file__)
        """)
    assert all(line in source for line in BENIGN)
    assert probe_lines(source) == []


def test_a_main_block_counts_when_the_file_rebinds_name() -> None:
    source = _kernel("pass") + '\n__name__ = "__main__"\nif __name__ == "__main__":\n    X = os.getcwd()\n'
    [finding] = env_probe_findings(source, "k.py")
    assert finding.severity == "high"


def test_feature_detection_of_a_public_module_is_shown_not_failed() -> None:
    source = "try:\n    import nki.collectives as cc\nexcept ImportError:\n    cc = None\n" + _kernel("pass")
    [finding] = env_probe_findings(source, "k.py")
    assert finding.severity == "medium" and "does not fail the run" in finding.message


def test_the_reference_is_shown_not_failed() -> None:
    [finding] = env_probe_findings("import os\n\ndef ref(a):\n    return a * int(os.getenv('K', '1'))\n", "ref.py",
                                   reference=True)
    assert finding.severity == "medium" and "reference" in finding.message


@pytest.mark.parametrize("name", sorted(p.parent.name for p in SAMPLE_TASKS.glob("*/task.toml")))
def test_no_bundled_task_probes_its_environment(name: str) -> None:
    task = load_task(SAMPLE_TASKS / name)
    assert [f for f in integrity_findings(task) if f.rule == "HACK-ENV-PROBE"] == []
    assert findings(analyze_task(task), "HACK-ENV-PROBE") == []


def test_nkitui_analyze_reports_the_probe(tmp_path) -> None:
    """The red team's kernel through `analyze_task`: the finding names the file and line of the probe."""
    task = tmp_path / "t"
    task.mkdir()
    for p in (SAMPLE_TASKS / "vector_add").iterdir():
        if p.is_file():
            (task / p.name).write_text(p.read_text())
    kernel = task / "vector_add_nki.py"
    load = "nisa.dma_copy(dst=b_tile, src=b_rows[row0:row0 + P, :])"
    kernel.write_text(kernel.read_text().replace(
        load, 'other = b_rows if "nkitui" in str(type(a)) else a_rows\n        '
              "nisa.dma_copy(dst=b_tile, src=other[row0:row0 + P, :])"))
    line = next(i for i, text in enumerate(kernel.read_text().splitlines(), 1) if "other =" in text)
    [finding] = findings(analyze_task(load_task(task)), "HACK-ENV-PROBE")
    assert finding.file == "vector_add_nki.py" and finding.line == line and finding.severity == "high"

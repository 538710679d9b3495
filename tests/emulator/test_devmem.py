"""The device memory's protection calls mprotect with arguments made once per mapping (its region):
writes through the write path land, any other write faults, also on a mapping at a reused address."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

SETUP = """
import numpy as np
from nkitui.emulator import devmem
devmem.enable()
"""


def _run(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(SETUP) + textwrap.dedent(body)], capture_output=True,
                          text=True, timeout=120)


def test_the_write_path_writes_and_leaves_the_pages_read_only():
    proc = _run("""
        for shape in [(128, 64), (4,), (2048, 1024), (3000, 1024)]:   # pooled tiles and mappings of their own
            a = devmem.empty(shape, np.float32)
            with devmem.writing(a):
                a[...] = 7
            assert float(a.sum()) == 7 * a.size
        big = devmem.empty((2048, 1024), np.float32)    # 8 MiB: not pooled, unmapped when it dies
        del big
        other = devmem.empty((1500, 1024), np.float32)  # may take the same address with another length
        with devmem.writing(other):
            other[...] = 1
        print("ok", flush=True)
        other[0, 0] = 2                                  # not through the write path: faults
        print("wrote", flush=True)
    """)
    assert proc.stdout.split() == ["ok"], proc.stderr
    assert proc.returncode == -signal.SIGSEGV


@pytest.mark.parametrize("size", [(64,), (2048, 1024)])
def test_a_direct_write_faults(size):
    proc = _run(f"""
        a = devmem.copy_of(np.ones({size!r}, np.float32))
        assert float(a[0] if a.ndim == 1 else a[0, 0]) == 1
        print("ok", flush=True)
        a[...] = 5
        print("wrote", flush=True)
    """)
    assert proc.stdout.split() == ["ok"], proc.stderr
    assert proc.returncode == -signal.SIGSEGV

"""Red team A, finding 5: integer outputs passed as arguments were zero-filled.

With `outputs = "arguments"`, nkitui pre-allocates each output and passes it after the inputs. Floats
started as NaN, but integers as zeros, so a port that accumulates into its output (`c += (a > 0)`,
written for the CUDA host's `cudaMemset(c, 0)`) passed, while on a device the buffer holds whatever was
there. Integer outputs now start as a non-zero pattern (4, the AWS simulator's sentinel, and large
positive and negative values), booleans as True: such a port fails; one that writes every element passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nkitui.executor.backends.base import allocate_outputs, unwritten_fill
from nkitui.task import load_task
from tests.helpers.add_task import write_files
from tests.security.conftest import git_commit_all

REPO = Path(__file__).resolve().parents[2]

MANIFEST = """\
id = "count_positive"
title = "c = (a > 0) + (b > 0) as int32, output passed as an argument"
target = "trn2"
op = "elementwise"

[sources]
nki = "count_nki.py"
reference = "reference.py::count_positive"

[kernel]
entry = "count_nki.py::count_kernel"
namespace = "new"
outputs = "arguments"

[[inputs]]
name = "a"
shape = [128, 512]
dtype = "float32"

[[inputs]]
name = "b"
shape = [128, 512]
dtype = "float32"

[[outputs]]
name = "c"
shape = [128, 512]
dtype = "int32"
tolerance = { kind = "exact" }

[evaluation]
seeds = [0]
"""

REFERENCE = """\
import numpy as np


def count_positive(a, b):
    return (a > 0).astype(np.int32) + (b > 0).astype(np.int32)
"""

# the red team's port: reads its output first (assumed zero, as after cudaMemset) and accumulates into it
ACCUMULATES_INTO_OUTPUT = """\
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def count_kernel(a, b, c):
    P, F = a.shape
    acc = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=acc, src=c)  # the output's current contents (assumed zero)
    for x in (a, b):
        x_tile = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x)
        m = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=m, data=x_tile, op0=nl.greater, operand0=0.0)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=m, op=nl.add)
    nisa.dma_copy(dst=c, src=acc)
"""

# the same port, zeroing its accumulator itself: right wherever it runs
ZEROES_ITS_ACCUMULATOR = ACCUMULATES_INTO_OUTPUT.replace(
    "    nisa.dma_copy(dst=acc, src=c)  # the output's current contents (assumed zero)\n",
    "    nisa.memset(dst=acc, value=0)\n")

# a max over the old contents (assumed zero): the large negative values of the fill do not hide it
MAX_INTO_OUTPUT = ACCUMULATES_INTO_OUTPUT.replace("op=nl.add)", "op=nl.maximum)")


def _check(tmp_path: Path, kernel: str) -> dict:
    task = write_files(tmp_path / "task", {"task.toml": MANIFEST, "reference.py": REFERENCE, "count_nki.py": kernel})
    git_commit_all(task)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "nkitui", "check", str(task), "--json", "--no-trials", "--no-precision",
                           "--no-store"], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    result["returncode"] = proc.returncode
    return result


def _passed(result: dict, check: str) -> bool:
    return next(c for c in result["checks"] if c["id"] == check)["passed"]


def test_a_port_that_reads_its_integer_output_before_writing_it_fails(tmp_path, record_property) -> None:
    record_property("protection", "outputs:unwritten-integer-fill")
    result = _check(tmp_path / "accumulates", ACCUMULATES_INTO_OUTPUT)
    assert result["status"] == "failed" and result["returncode"] == 1, result["checks"]
    assert not _passed(result, "output:c")
    result = _check(tmp_path / "max", MAX_INTO_OUTPUT)
    assert result["status"] != "passed" and not _passed(result, "output:c"), result["checks"]


def test_a_port_that_writes_every_output_element_passes(tmp_path) -> None:
    result = _check(tmp_path / "honest", ZEROES_ITS_ACCUMULATOR)
    assert result["status"] == "passed" and result["returncode"] == 0, result["checks"]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "bool"])
def test_unwritten_outputs_never_start_as_zero(dtype: str) -> None:
    fill = unwritten_fill((4, 6), np.dtype(dtype))
    assert fill.dtype == np.dtype(dtype) and fill.shape == (4, 6)
    assert np.all(fill != 0)  # a read of it is never what a zeroed buffer gives
    if dtype != "bool":
        assert fill.ravel()[0] == 4 and fill.max() >= np.iinfo(dtype).max // 4
        if np.dtype(dtype).kind == "i":
            assert fill.min() < -(np.iinfo(dtype).max // 4)  # a max over it is wrong too


def test_allocate_outputs_fills_each_declared_output(tmp_path) -> None:
    manifest = MANIFEST.replace('dtype = "int32"\ntolerance = { kind = "exact" }',
                                'dtype = "int32"\ntolerance = { kind = "exact" }\n\n[[outputs]]\nname = "d"\n'
                                'shape = [128, 512]\ndtype = "float32"\ntolerance = { kind = "exact" }')
    task = write_files(tmp_path / "t", {"task.toml": manifest, "reference.py": REFERENCE,
                                        "count_nki.py": ACCUMULATES_INTO_OUTPUT})
    c, d = allocate_outputs(load_task(task).outputs)
    assert c.dtype == np.int32 and not np.any(c == 0)
    assert d.dtype == np.float32 and np.isnan(d).all()

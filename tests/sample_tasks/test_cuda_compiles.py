"""Every sample task's CUDA source compiles with `nvcc -c` (host and device code).

No GPU is needed to compile; the test is skipped on machines without nvcc.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.sample_tasks.harness import load, task_names

NVCC = shutil.which("nvcc")


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("name", task_names())
def test_cuda_source_compiles(name, tmp_path):
    cuda = load(name).sources.cuda
    obj = tmp_path / (cuda.stem + ".o")
    proc = subprocess.run(
        [NVCC, "-c", "-std=c++17", "-Werror", "all-warnings", str(cuda), "-o", str(obj)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"nvcc failed on {cuda.name}:\n{proc.stdout}\n{proc.stderr}"
    assert obj.stat().st_size > 0

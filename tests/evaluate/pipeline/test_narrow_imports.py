"""ml_dtypes in the evaluator: imported before the children fork only for a task whose data or whose
top-level Python files name a bf16/fp8/MX type (the emulator makes those types on first use, and
importing ml_dtypes costs about 0.65 s of CPU). A kernel that reaches a narrow type some other way
makes it in its own confined process, and the evaluator's replay makes it again: slower, never wrong."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.pipeline.session import _names_narrow_types
from nkitui.evaluate.run import start_evaluation
from nkitui.executor.events import ResultEvent
from tests.helpers.evaluation import HEADER, quick_request, write_task

SAMPLES = bundled_dir("sample_tasks")


@pytest.mark.parametrize("task, narrow", [("vector_add", False), ("row_softmax", False), ("matmul_bf16", True),
                                          ("attention_fwd", True), ("flawed_bf16_accum", True)])
def test_the_guess_reads_nki_type_names_not_cudas_float4(task, narrow):
    # vector_add's port mentions CUDA's float4 vector type in its docstring: not a narrow NKI type
    assert _names_narrow_types(SAMPLES / task) is narrow


def test_the_guess_reads_regular_files_only_so_a_fifo_cannot_block_the_evaluator(tmp_path: Path):
    os.mkfifo(tmp_path / "kernel.py")  # opening it for reading would wait for a writer forever
    (tmp_path / "link.py").symlink_to(SAMPLES / "matmul_bf16" / "matmul_bf16_nki.py")
    (tmp_path / "ok.py").write_text("x = 1  # float32 only\n")
    assert _names_narrow_types(tmp_path) is False
    (tmp_path / "port.py").write_text("import nki.language as nl\nDT = nl.float8_e4m3\n")
    assert _names_narrow_types(tmp_path) is True


# the narrow type's name never appears as a word: "bf" "16" is one string literal to Python, not to the guess
HIDDEN_BF16 = HEADER + '''

@nki.jit
def add_kernel(a, b):
    x = nl.load(a)
    y = nl.load(b)
    rounded = nl.add(x, y, dtype="bf" "16")  # made in the confined kernel process, on first use
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(x, nl.subtract(y, nl.subtract(rounded, rounded))))
    return out
'''


def test_a_kernel_reaching_bf16_without_naming_it_makes_it_in_its_confined_process_and_passes(tmp_path: Path):
    task = write_task(tmp_path / "hidden", kernel=HIDDEN_BF16)
    assert _names_narrow_types(task) is False
    handle = start_evaluation(quick_request(task, seeds=1))
    events = list(handle.events())
    assert isinstance(events[-1], ResultEvent)
    result = handle.result
    assert result.status == "passed", (result.status, result.error, [(c.id, c.detail) for c in result.failed_checks()])
    assert {c.id for c in result.checks if c.passed} >= {"output:out", "replay"}

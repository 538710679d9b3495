"""Run a bundled sample task in-process: manifest inputs -> kernel on the emulator -> numpy reference.

The sample tasks are our own code, so running them in the test process (rather than in a limited
child process, as nkitui does for task code it does not trust) is acceptable here.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.numerics.inputs import from_kernel_layout, make_inputs, to_kernel_layout
from nkitui.evaluate.numerics.tolerance import PolicyOutcome, check_policy
from nkitui.task import MANIFEST_NAME, Task, TensorSpec, load_task

SAMPLE_ROOT = bundled_dir("sample_tasks")


def task_names() -> list[str]:
    return sorted(p.name for p in SAMPLE_ROOT.iterdir() if (p / MANIFEST_NAME).is_file())


def good_task_names() -> list[str]:
    return [n for n in task_names() if not n.startswith("flawed")]


def flawed_task_names() -> list[str]:
    return [n for n in task_names() if n.startswith("flawed")]


def load(name: str) -> Task:
    return load_task(SAMPLE_ROOT / name)


def import_file(path: Path, label: str) -> ModuleType:
    """Import `path` under a unique module name (every task has its own reference.py)."""
    module_name = "sample_task_" + re.sub(r"\W", "_", label)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None, f"cannot import {path}"
    module = importlib.util.module_from_spec(spec)
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # keep __pycache__ out of the bundled task folders
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = previous
    return module


def install_emulator() -> None:
    from nkitui import emulator

    emulator.install()


def _launch(task: Task, kernel: Any) -> Any:
    entry = task.kernel
    assert entry is not None
    if entry.grid:
        return kernel[entry.grid if len(entry.grid) > 1 else entry.grid[0]]
    if entry.lnc:
        return kernel[entry.lnc]
    return kernel


@dataclass
class OutputCheck:
    spec: TensorSpec
    actual: np.ndarray  # natural layout, as the kernel produced it
    expected: np.ndarray  # the reference's output
    outcome: PolicyOutcome


def run_kernel(task: Task, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The kernel's outputs, by name, in the natural layout."""
    install_emulator()
    entry = task.kernel
    assert entry is not None and entry.outputs_mode == "return"
    module = import_file(entry.path, f"{task.id}_{entry.path.stem}")
    kernel = getattr(module, entry.name)
    args = [to_kernel_layout(spec, inputs[spec.name]) for spec in task.inputs]
    returned = _launch(task, kernel)(*args, **entry.kwargs)
    values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    assert len(values) == len(task.outputs), f"{task.id}: kernel returned {len(values)} outputs"
    return {spec.name: from_kernel_layout(spec, np.asarray(v)) for spec, v in zip(task.outputs, values)}


def run_reference(task: Task, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ref = task.sources.reference
    assert ref is not None
    module = import_file(ref.path, f"{task.id}_reference")
    kwargs = dict(task.kernel.kwargs) if task.kernel else {}
    returned = getattr(module, ref.name)(**inputs, **kwargs)
    if isinstance(returned, dict):
        return {spec.name: np.asarray(returned[spec.name]) for spec in task.outputs}
    values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    return {spec.name: np.asarray(v) for spec, v in zip(task.outputs, values)}


def evaluate(task: Task, seed: int) -> list[OutputCheck]:
    """Run kernel and reference on the seed's inputs and judge every output by its own policy."""
    inputs = make_inputs(task, seed)
    actual = run_kernel(task, inputs)
    expected = run_reference(task, inputs)
    checks = []
    for spec in task.outputs:
        assert spec.tolerance is not None
        outcome = check_policy(actual[spec.name], expected[spec.name], spec.tolerance, spec.dtype)
        checks.append(OutputCheck(spec, actual[spec.name], expected[spec.name], outcome))
    return checks

"""The callables the numerics checks run through, built on a backend (inside the worker).

  kernel_runner(backend, task)   KernelRunner: natural-layout inputs -> natural-layout outputs
  source_runner(backend, task)   SourceRunner: a mutated kernel source -> outputs (mutation testing)
  load_reference(task)           ReferenceFn: the task's numpy reference, outputs by name
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from nkitui.evaluate.numerics.inputs import from_kernel_layout, to_kernel_layout
from nkitui.evaluate.numerics.callables import KernelRunner, ReferenceFn, RunOptions, SourceRunner
from nkitui.executor.backends.base import Backend, KernelLoadError, get_function, launch_target, load_module
from nkitui.task.model import Task

if TYPE_CHECKING:
    from nkitui.common.findings import Finding

MUTANT_DIR = ".nkitui-mutants"


class ReferenceOutputError(Exception):
    """The reference's return value does not match the manifest's outputs."""


def kernel_args(task: Task, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Inputs in manifest order and kernel layout, as private copies (a kernel that writes into
    its inputs must not change what the reference sees)."""
    return [np.array(to_kernel_layout(spec, np.asarray(inputs[spec.name])), copy=True) for spec in task.inputs]


def natural_outputs(task: Task, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {spec.name: from_kernel_layout(spec, np.asarray(outputs[spec.name])) for spec in task.outputs}


def output_dtype_findings(task: Task, outputs: Mapping[str, np.ndarray]) -> list[Finding]:
    """A finding per output the kernel returned in another dtype than the manifest declares: the
    values are compared as returned, so a result rounded to a narrower dtype can still pass a loose
    tolerance while the caller gets the wrong type."""
    from nkitui.evaluate.numerics import findings as rules
    from nkitui.task.dtypes import numpy_dtype

    findings = []
    nki_file = task.rel(task.kernel.path) if task.kernel is not None else None
    for spec in task.outputs:
        got, declared = np.asarray(outputs[spec.name]).dtype, numpy_dtype(spec.dtype)
        if got == declared:
            continue
        message = (f"The kernel returned output `{spec.name}` as {got.name}; the manifest declares {spec.dtype}. "
                   f"nkitui compares the values as returned, so the tolerance judged {got.name} values, and a "
                   f"caller expecting {spec.dtype} gets another dtype. Allocate the output with dtype "
                   f"{spec.dtype} (e.g. nl.ndarray(shape, dtype=nl.{spec.dtype}, buffer=nl.shared_hbm)), or "
                   "correct the manifest if the port is right.")
        findings.append(rules.numerics_finding(
            rules.OUTPUT_DTYPE, "high" if got.itemsize < declared.itemsize else "medium",
            f"`{spec.name}` is returned as {got.name}, declared {spec.dtype}", message,
            data={"output": spec.name, "returned": got.name, "declared": spec.dtype}, file=nki_file))
    return findings


def kernel_runner(backend: Backend, task: Task) -> KernelRunner:
    def run(inputs: dict[str, np.ndarray], options: RunOptions) -> Mapping[str, np.ndarray]:
        precise = options.precise if backend.supports_precise_switch else True
        result = backend.run(kernel_args(task, inputs), precise=precise)
        return natural_outputs(task, result.outputs)

    return run


def source_runner(backend: Backend, task: Task, workspace: Path) -> SourceRunner:
    """Runs a mutated copy of the kernel file, written beside the original under .nkitui-mutants/
    (so the SDK, which may read kernel sources from disk, sees the mutant)."""
    entry = task.kernel
    assert entry is not None

    def run(source: str, inputs: dict[str, np.ndarray], options: RunOptions) -> Mapping[str, np.ndarray]:
        digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:12]
        folder = workspace / MUTANT_DIR / digest
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / entry.path.name
        path.write_text(source, encoding="utf-8")
        module = load_module(path, f"_nkitui_mutant_{digest}")
        launch = launch_target(get_function(module, entry.name, entry.path.name), task)
        precise = options.precise if backend.supports_precise_switch else True
        outputs = backend.run_with(launch, kernel_args(task, inputs), precise=precise)
        return natural_outputs(task, outputs)

    return run


def collect_reference_outputs(returned: Any, task: Task, label: str) -> dict[str, np.ndarray]:
    names = [o.name for o in task.outputs]
    if isinstance(returned, dict):
        missing = [n for n in names if n not in returned]
        if missing:
            raise ReferenceOutputError(f"{label} returned a dict without {', '.join(missing)}")
        values = [returned[n] for n in names]
    elif isinstance(returned, (tuple, list)):
        if len(returned) != len(names):
            raise ReferenceOutputError(f"{label} returned {len(returned)} values for {len(names)} declared output(s) ({', '.join(names)})")
        values = list(returned)
    elif returned is None:
        raise ReferenceOutputError(f"{label} returned nothing; it must return its output(s)")
    else:
        if len(names) != 1:
            raise ReferenceOutputError(f"{label} returned one array for {len(names)} declared outputs ({', '.join(names)})")
        values = [returned]
    out = {}
    for spec, value in zip(task.outputs, values):
        arr = np.asarray(value)
        if arr.shape != spec.shape:
            raise ReferenceOutputError(
                f"{label} returned shape {arr.shape} for output {spec.name!r}; the manifest declares {spec.shape}"
            )
        out[spec.name] = arr
    return out


def load_reference(task: Task) -> ReferenceFn:
    ref = task.sources.reference
    if ref is None:
        raise KernelLoadError("the task names no reference (sources.reference)")
    module = load_module(ref.path, f"_nkitui_reference_{ref.path.stem}")
    fn = get_function(module, ref.name, ref.path.name)
    kwargs = dict(task.kernel.kwargs) if task.kernel else {}

    def reference(inputs: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        copies = {k: np.array(v, copy=True) for k, v in inputs.items()}
        with np.errstate(all="ignore"):
            returned = fn(**copies, **kwargs)
        return collect_reference_outputs(returned, task, ref.spec)

    return reference

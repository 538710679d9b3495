"""The callables the numerics checks run kernels through.

The executor provides them for a backend (emulator, simulator, hardware); tests provide small
numpy ones. Arrays are in the natural (reference) layout on both sides: the runner applies the
kernel layout of the manifest and undoes it on the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np


@dataclass(frozen=True)
class RunOptions:
    precise: bool = True  # False: the emulator keeps every float in fp32 (NKI_PRECISE_FP=0)
    label: str = ""  # what this run is for, e.g. "seed 1", "adversarial: large", "mutant 3"


KernelRunner = Callable[[dict[str, np.ndarray], RunOptions], Mapping[str, np.ndarray]]
"""Runs the port on inputs (by name) and returns its outputs (by name)."""

ReferenceFn = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]
"""Runs the reference on inputs (by name) and returns its outputs (by name)."""

SourceRunner = Callable[[str, dict[str, np.ndarray], RunOptions], Mapping[str, np.ndarray]]
"""Runs a (mutated) NKI source text on inputs; the entry point is the task's kernel."""

InputMaker = Callable[[int], dict[str, np.ndarray]]
"""Makes the task's inputs for a seed."""


def source_kernel_runner(run_source: SourceRunner, source: str) -> KernelRunner:
    """A KernelRunner that always runs `source` through `run_source`."""

    def run(inputs: dict[str, np.ndarray], options: RunOptions) -> Mapping[str, np.ndarray]:
        return run_source(source, inputs, options)

    return run


def abs_inputs(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """|inputs| in float64: the reference run on them gives the partial sums' magnitude (linear ops).
    One definition, so the audit asks the reference for exactly the arrays it later judges with."""
    return {n: np.abs(np.asarray(v).astype(np.float64)) for n, v in inputs.items()}


def describe_exception(exc: BaseException) -> str:
    """One line: the exception type and its message (first line); an error that already carries
    its words (`described`, e.g. a failure reported by the kernel's process) keeps them."""
    described = getattr(exc, "described", None)
    if isinstance(described, str) and described:
        return described
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__

"""CPU emulator of NKI (Neuron Kernel Interface). See docs/emulator.md.

    from nkitui import emulator
    emulator.install()                       # neuronxcc.nki(.language/.isa/.typing/.compiler)
    with emulator.trace() as tr:             # collect the instruction trace
        out = my_kernel(a, b)                # @nki.jit kernels run on numpy arrays
    with emulator.trace(execute=False):      # shape-only: bookkeeping and trace, no numpy math
        my_kernel(emulator.ShapeDtype((4096, 8192), "bfloat16"), ...)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Unpack

from nkitui.emulator.config import Options, TraceOptionChanges, configure, current_options, options
from nkitui.emulator.errors import (
    ActivationOperandError,
    CapacityError,
    CollectiveError,
    EngineDtypeError,
    EngineMemoryError,
    EngineOpError,
    HostMemoryError,
    IndexingError,
    InstallError,
    KernelArgumentError,
    MaskError,
    MatmulShapeError,
    NKIEmulatorError,
    NKIEmulatorWarning,
    OperandShapeError,
    OutOfBoundsError,
    PartitionDimError,
    PsumBankError,
    ReductionAxisError,
    UnsupportedError,
)
from nkitui.emulator.install import install, installed, register_modules, uninstall
from nkitui.emulator.trace import Access, Instruction, Trace

# Loaded on first use: the engine (launch, runtime and the front ends) imports ml_dtypes and numpy's
# math, ~0.5 s of CPU that a reader of traces (the cost model, the evaluator) does not need.
_LAZY = {
    "Kernel": "launch", "RunInfo": "launch", "ShapeDtype": "launch", "set_latency_estimator": "launch",
    "pop_trace": "runtime", "push_trace": "runtime",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nkitui.emulator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"nkitui.emulator.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "Access", "ActivationOperandError", "CapacityError", "CollectiveError", "EngineDtypeError", "EngineMemoryError",
    "EngineOpError", "HostMemoryError", "IndexingError", "InstallError", "Instruction", "Kernel",
    "KernelArgumentError", "MaskError", "MatmulShapeError", "NKIEmulatorError", "NKIEmulatorWarning",
    "OperandShapeError", "Options", "OutOfBoundsError", "PartitionDimError", "PsumBankError", "ReductionAxisError",
    "RunInfo", "ShapeDtype",
    "Trace", "UnsupportedError", "configure", "current_options", "install", "installed", "options",
    "register_modules", "set_latency_estimator", "trace", "uninstall",
]


@contextlib.contextmanager
def trace(execute: bool | None = None, **opts: Unpack[TraceOptionChanges]) -> Iterator[Trace]:
    """Collect the instruction trace of every kernel launched inside the block.

    `execute=False` is the shape-only mode: allocations, validation and the trace happen, the numpy
    math does not (inputs may be `ShapeDtype` placeholders; outputs come back as `ShapeDtype`).
    Other keyword arguments (target=, precise=, check_affine=, capacity=, seed=) set options for
    the block.
    """
    from nkitui.emulator.runtime import pop_trace, push_trace

    block: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if execute is not None:
        block = options(**opts, execute=execute)
    elif opts:
        block = options(**opts)
    with block:
        o = current_options()
        tr = Trace(target=o.target)
        tr.meta["options"] = {"target": o.target, "precise": o.precise, "execute": o.execute,
                              "check_affine": o.check_affine, "capacity": o.capacity}
        push_trace(tr)
        try:
            yield tr
        finally:
            pop_trace(tr)

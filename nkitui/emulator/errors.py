"""Emulator errors and warnings.

Every error names the rule the kernel broke and the kernel's own source line, e.g.
"partition dimension 256 exceeds 128 at softmax.py:31". The line is found by walking the Python
stack outwards until the first frame that is not emulator code (cheap: a few frames).
"""

from __future__ import annotations

import os
import sys

_EMULATOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def kernel_frame():
    """The innermost stack frame outside the emulator package (the kernel's line), or None."""
    frame = sys._getframe(1)
    prefix = _EMULATOR_DIR
    while frame is not None and frame.f_code.co_filename.startswith(prefix):
        frame = frame.f_back
    return frame


def assigned_name(frame) -> str | None:
    """The variable a kernel source line assigns (`x = ...`), or None."""
    import ast
    import linecache

    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    try:
        node = ast.parse(text).body[0]
    except (SyntaxError, IndexError):
        return None
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return targets[0].id
    return None


def kernel_location() -> tuple[str, int]:
    """(full path, line) of the kernel source line that called into the emulator."""
    frame = kernel_frame()
    if frame is None:
        return ("", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


class NKIEmulatorError(Exception):
    """Base class of every error the emulator raises on behalf of a kernel."""

    rule = "emulator"

    def __init__(self, message: str, *, location: tuple[str, int] | None = None) -> None:
        path, line = location if location is not None else kernel_location()
        self.detail = message
        self.path = path
        self.file = os.path.basename(path) if path else ""
        self.line = line
        text = f"{message} at {self.file}:{line}" if path else message
        super().__init__(text)


class PartitionDimError(NKIEmulatorError):
    """C1: a tile's partition dimension exceeds 128, or is not the first dimension."""

    rule = "partition-dim"


class MatmulShapeError(NKIEmulatorError):
    """C3: TensorE shape limits (contraction/stationary/moving sizes)."""

    rule = "matmul-shape"


class PsumBankError(NKIEmulatorError):
    """C2: a PSUM tile or matmul result does not fit one 2 KiB bank per partition."""

    rule = "psum-bank"


class CapacityError(NKIEmulatorError):
    """Live SBUF bytes or PSUM banks exceed the target's on-chip capacity."""

    rule = "capacity"


class ReductionAxisError(NKIEmulatorError):
    """C9: reductions only over trailing, contiguous free axes (never the partition axis)."""

    rule = "reduction-axis"


class EngineMemoryError(NKIEmulatorError):
    """C7/C8: an engine reads or writes a memory it cannot access (e.g. GpSimd and PSUM)."""

    rule = "engine-memory"


class EngineDtypeError(NKIEmulatorError):
    """An engine is given a data type it does not support."""

    rule = "engine-dtype"


class EngineOpError(NKIEmulatorError):
    """An engine is asked for an operation (or operator combination) it does not implement."""

    rule = "engine-op"


class ActivationOperandError(NKIEmulatorError):
    """C14: activation scale must be an fp32 scalar or (P, 1) vector; bias a (P, 1) vector."""

    rule = "activation-operand"


class OutOfBoundsError(NKIEmulatorError):
    """C13: an access outside a tensor's bounds."""

    rule = "out-of-bounds"


class OperandShapeError(NKIEmulatorError):
    """C6 and friends: operand shapes or partition counts do not match."""

    rule = "operand-shape"


class IndexingError(NKIEmulatorError):
    """Unsupported or malformed index expressions (mixing basic/advanced indexing, 1-D arange...)."""

    rule = "indexing"


class MaskError(NKIEmulatorError):
    """C16: malformed mask predicates."""

    rule = "mask"


class KernelArgumentError(NKIEmulatorError):
    """Kernel arguments do not match the kernel's signature or annotations."""

    rule = "kernel-argument"


class UnsupportedError(NKIEmulatorError):
    """A documented NKI feature that the emulator does not model (message says what to use)."""

    rule = "unsupported"


class InstallError(Exception):
    """`emulator.install()` refused to shadow a real Neuron SDK installation."""


class NKIEmulatorWarning(UserWarning):
    """Non-fatal diagnostics (e.g. affine_range loop-carried writes, would-spill capacity)."""

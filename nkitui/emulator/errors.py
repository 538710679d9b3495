"""Emulator errors and warnings.

Every error names the rule the kernel broke and the kernel's own source line, e.g.
"partition dimension 256 exceeds 128 at softmax.py:31". The line is found by walking the Python
stack outwards until the first frame that is not emulator code (cheap: a few frames).
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast  # imported where used: parsing is rare

_EMULATOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_emulator(name: object) -> bool:
    return isinstance(name, str) and (name == "nkitui.emulator" or name.startswith("nkitui.emulator."))


def kernel_frame(skip: int = 0) -> FrameType | None:
    """The innermost stack frame outside the emulator package (the kernel's line), or None.

    `skip`: how many frames, from the caller outwards, are known to be the emulator's and are not looked
    at (Run.record, on the path of every traced instruction, skips itself and its caller, an engine
    function: two frames of the five or so walked).

    Frames are told apart by their module's name (f_globals), not by f_code: reading `f_code` raises
    an audit event, and in an untrusted child every audit event runs the introspection guard
    (nkitui.executor.untrusted.introspection), which made tracing a kernel several times slower."""
    try:
        frame: FrameType | None = sys._getframe(1 + skip)
    except ValueError:  # a stack shorter than `skip`: no kernel frame
        return None
    known = _EMULATOR_NAMES
    while frame is not None:
        try:  # subscripts, not .get(): no method call per frame in the common case (a known module)
            emulator = known[frame.f_globals["__name__"]]
        except (KeyError, TypeError):  # a module not seen yet, globals without __name__, an unhashable name
            emulator = _classify(frame.f_globals.get("__name__"))
        if not emulator:
            break
        frame = frame.f_back
    return frame


def _classify(name: object) -> bool:
    emulator = _is_emulator(name)
    if type(name) is str and len(_EMULATOR_NAMES) < 4096:
        _EMULATOR_NAMES[name] = emulator
    return emulator


# module name -> is it the emulator's (kernel_frame runs once per traced instruction, walking ~5 frames)
_EMULATOR_NAMES: dict[str, bool] = {}


def assigned_name(frame: FrameType) -> str | None:
    """The variable a kernel source line assigns (`x = ...`), or None."""
    import ast

    target = assigned_target(frame)
    return target.id if isinstance(target, ast.Name) else None


_PARSED: dict[str, tuple[int, ast.Module | None]] = {}


def assigned_target(frame: FrameType) -> ast.expr | None:
    """The single target (an `ast` node: Name, Subscript, ...) of the assignment statement the frame
    is executing, also when the statement spans several lines; None for anything else."""
    import ast
    import linecache

    filename = frame.f_code.co_filename
    lines = linecache.getlines(filename, frame.f_globals)
    if not lines:
        return None
    key = hash(tuple(lines))
    cached = _PARSED.get(filename)
    if cached is None or cached[0] != key:
        parsed: ast.Module | None
        try:
            parsed = ast.parse("".join(lines))
        except SyntaxError:
            parsed = None
        cached = _PARSED[filename] = (key, parsed)
    tree = cached[1]
    if tree is None:
        return None
    try:  # the source position of the call being executed (3.11+: exact, also mid-statement)
        line = list(frame.f_code.co_positions())[frame.f_lasti // 2][0] or frame.f_lineno
    except (AttributeError, IndexError):
        line = frame.f_lineno
    best: ast.Assign | ast.AnnAssign | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno:
                best = node
    if best is None or best.value is None or not (best.value.lineno <= line <= (best.value.end_lineno or line)):
        return None
    targets = best.targets if isinstance(best, ast.Assign) else [best.target]
    return targets[0] if len(targets) == 1 else None


def evaluate_target(frame: FrameType, target: ast.expr) -> object:
    """The value of an assignment target such as `acc[i, :, j]` in the frame (None when the target
    calls anything: only names, constants, attributes, subscripts, slices and arithmetic)."""
    import ast

    for node in ast.walk(target):
        if isinstance(node, (ast.Call, ast.NamedExpr, ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom)):
            return None
    load = ast.fix_missing_locations(ast.Expression(_as_load(target)))
    return eval(compile(load, frame.f_code.co_filename, "eval"), frame.f_globals, frame.f_locals)  # noqa: S307  (the kernel's own expression, re-read)


def _as_load(node: ast.expr) -> ast.expr:
    import ast
    import copy

    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return node


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


class CollectiveError(NKIEmulatorError):
    """A cross-core or cross-rank operation that cannot complete: a partner finished without its
    matching call, or the participants wait on operations that do not match."""

    rule = "collective"


class HostMemoryError(NKIEmulatorError, MemoryError):
    """Emulating the kernel needs more host memory than is available (says how much, and for what)."""

    rule = "host-memory"


class UnsupportedError(NKIEmulatorError):
    """A documented NKI feature that the emulator does not model (message says what to use)."""

    rule = "unsupported"


class InstallError(Exception):
    """`emulator.install()` refused to shadow a real Neuron SDK installation."""


class NKIEmulatorWarning(UserWarning):
    """Non-fatal diagnostics (e.g. affine_range loop-carried writes, would-spill capacity)."""

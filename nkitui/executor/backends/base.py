"""What every backend does, and the launch rules shared by all of them.

A backend lives in the worker. `prepare()` imports (emulator, simulator) or compiles (neuron) the
task's kernel from the workspace copy; `run()` launches it on arrays already in the kernel's
layout and returns its outputs by name, still in the kernel's layout. Launch rules
(docs/task-format.md): inputs positionally in manifest order, `kernel.kwargs` as keywords, with
`outputs = "arguments"` one pre-allocated array per output after the inputs (NaN for floats, True
for booleans, a non-zero pattern for integers: `unwritten_fill`, so elements the kernel never writes,
or reads before writing, show up), `grid` as `kernel[g0, g1](...)` and `lnc`
as `kernel[lnc](...)`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast

import numpy as np

from nkitui.task.dtypes import is_float, numpy_dtype
from nkitui.task.model import Task, TensorSpec


class BackendUnavailable(Exception):
    """The requested backend cannot run here (no device, no SDK); the message says what is missing."""


class KernelLoadError(Exception):
    """The kernel (or reference) module could not be imported or has no such function."""


class OutputError(Exception):
    """The kernel's return value does not match the manifest's outputs."""


@dataclass
class BackendRun:
    outputs: dict[str, np.ndarray]  # by output name, kernel layout
    elapsed_s: float
    trace: Any = None  # nkitui.emulator.trace.Trace when asked for and available
    # by output name: {"device": bool, "why": text, ...} where the backend can tell whether the array
    # came out of the device (the emulator can); None where it cannot
    provenance: dict[str, dict[str, Any]] | None = None


@dataclass
class ProfileOutcome:
    """What the profile phase learned: timing and utilisation (a PerfRecord as JSON)."""

    timing: dict[str, Any] | None = None
    utilisation: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    skipped: str = ""  # non-empty: why nothing was measured or estimated


def load_module(path: Path, name: str | None = None) -> Any:
    """Import a task file by path under a fresh module name (its stem by default)."""
    module_name = name or path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"cannot import {path.name}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def get_function(module: Any, name: str, file_label: str) -> Any:
    try:
        return getattr(module, name)
    except AttributeError:
        have = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise KernelLoadError(f"{file_label} defines no {name!r} (callables found: {', '.join(have[:12]) or 'none'})") from None


def unwritten_fill(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """What an output passed as an argument holds before the kernel writes it: never zeros, which a port
    that reads its output (`c += ...`, the CUDA host's `cudaMemset(c, 0)` assumed) would get right by luck,
    while on a device the buffer holds whatever was there. Floats: NaN (as the AWS simulator fills fresh
    memory). Booleans: True (the simulator's sentinel too). Integers: the repeating pattern 4 (the simulator's
    integer sentinel), a large positive and a large negative value (unsigned: a second large value), so an
    accumulation (`+=`), a max or a min over the old contents is wrong wherever it read them."""
    if dtype.kind == "f" or dtype.kind == "V" or dtype.kind == "c":  # (ml_dtypes' bf16/fp8 are kind "V")
        return np.full(shape, np.nan, dtype=dtype)
    if dtype.kind == "b":
        return np.ones(shape, dtype=dtype)
    info = np.iinfo(dtype)
    low = info.min // 2 + 3 if info.min < 0 else info.max // 4 + 3
    pattern = np.array([4, info.max // 2 + 1, low], dtype=dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return np.resize(pattern, count).reshape(shape)


def allocate_outputs(outputs: tuple[TensorSpec, ...]) -> list[np.ndarray]:
    """Pre-allocated outputs for `outputs = "arguments"`, in the kernel's layout, filled as `unwritten_fill`
    says (NaN, True, or a non-zero integer pattern) so that elements the kernel never writes, or reads before
    writing, show up in the comparison."""
    arrays = []
    for spec in outputs:
        dtype = numpy_dtype(spec.dtype)
        if is_float(spec.dtype):
            arrays.append(np.full(spec.kernel_shape, np.nan, dtype=dtype))
        else:
            arrays.append(unwritten_fill(tuple(spec.kernel_shape), np.dtype(dtype)))
    return arrays


def collect_outputs(returned: Any, outputs: tuple[TensorSpec, ...], kernel_label: str) -> dict[str, np.ndarray]:
    """The kernel's return value as {output name: array} (one array, a tuple/list in manifest
    order, or a dict keyed by output name)."""
    names = [o.name for o in outputs]
    if returned is None:
        raise OutputError(
            f"{kernel_label} returned nothing; it should return its output(s) "
            '(or declare kernel.outputs = "arguments" if it writes into arguments)'
        )
    if isinstance(returned, dict):
        missing = [n for n in names if n not in returned]
        if missing:
            raise OutputError(f"{kernel_label} returned a dict without {', '.join(missing)} (keys: {', '.join(map(str, returned))})")
        return {n: np.asarray(returned[n]) for n in names}
    if isinstance(returned, (tuple, list)):
        if len(returned) != len(names):
            raise OutputError(f"{kernel_label} returned {len(returned)} values; the manifest declares {len(names)} output(s): {', '.join(names)}")
        return {n: np.asarray(v) for n, v in zip(names, returned)}
    if len(names) != 1:
        raise OutputError(f"{kernel_label} returned one value; the manifest declares {len(names)} outputs: {', '.join(names)}")
    return {names[0]: np.asarray(returned)}


def launch_target(kernel: Any, task: Task) -> Callable[..., Any]:
    """`kernel`, indexed for its SPMD grid (legacy) or logical-core count (new) when the manifest asks."""
    entry = task.kernel
    assert entry is not None
    index: tuple[int, ...] | int | None = None
    if entry.grid:
        index = entry.grid if len(entry.grid) > 1 else entry.grid[0]
    elif entry.lnc:
        index = entry.lnc
    if index is None:
        return cast("Callable[..., Any]", kernel)  # the task's kernel: callable is what the manifest promises
    try:
        return cast("Callable[..., Any]", kernel[index])
    except TypeError as exc:
        what = f"grid {list(entry.grid)}" if entry.grid else f"lnc {entry.lnc}"
        raise KernelLoadError(
            f"{entry.spec} cannot be launched with {what}: {exc} (is it decorated with @nki.jit?)"
        ) from exc


class Backend(ABC):
    name: str = ""
    supports_precise_switch: bool = False  # can run with every float kept in fp32 (precise=False)
    allows_subprocess: bool = False  # its SDK calls start processes (compiler, profiler)

    def __init__(self, task: Task, target: str, reason: str = "") -> None:
        self.task = task
        self.target = target
        self.reason = reason  # why this backend was chosen, in words
        self.kernel: Any = None
        self.kernel_module: Any = None
        self._launch: Any = None
        self._preloaded = False

    def ensure_preloaded(self) -> None:
        if not self._preloaded:
            self.preload()
            self._preloaded = True

    @property
    def kernel_label(self) -> str:
        assert self.task.kernel is not None
        return self.task.kernel.spec

    def versions(self) -> dict[str, Any]:
        return {}

    def preload(self) -> None:  # noqa: B027 - optional hook: most backends import nothing ahead
        """What the backend imports that is not task code (the emulator, the SDK): done before the
        process that runs the kernel is confined, and before the kernel is imported."""

    def prepare(self) -> None:
        """Import (and, on hardware, set up compilation of) the kernel: the compile phase."""
        if not self._preloaded:
            self.preload()
            self._preloaded = True
        self.kernel = self._import_kernel()
        self._launch = self.wrap(self.kernel)

    @abstractmethod
    def wrap(self, kernel: Any) -> Callable[..., Any]:
        """The callable that launches `kernel` on this backend, indexed for grid/lnc."""

    def context(self, precise: bool, trace: bool) -> Any:
        """A context manager around one launch; entering it gives the trace recorder (or None)."""
        return contextlib.nullcontext(None)

    def run(self, args: list[np.ndarray], *, precise: bool = True, trace: bool = False) -> BackendRun:
        """Launch the kernel once on `args` (kernel layout, manifest order)."""
        with self.context(precise, trace) as recorder:
            outputs, elapsed = self._call(self._launch, args)
        return BackendRun(outputs=outputs, elapsed_s=elapsed, trace=recorder if trace else None)

    def run_with(self, kernel: Any, args: list[np.ndarray], *, precise: bool = True) -> dict[str, np.ndarray]:
        """Launch another kernel function (e.g. a mutant of the port) the same way."""
        launch = self.wrap(kernel)
        with self.context(precise, False):
            return self._call(launch, args)[0]

    def profile(self, args: list[np.ndarray], reference_outputs: dict[str, np.ndarray] | None,
                recheck: Callable[[dict[str, np.ndarray]], str | None], trace: Any, log: Callable[[str], None]) -> ProfileOutcome:
        """Timing and utilisation measured where the kernel runs (hardware: the neuron backend). The
        other backends are profiled by the evaluator itself: the cost model on their instruction trace
        (nkitui.executor.backends.costmodel), never in the process that ran the kernel."""
        return ProfileOutcome(skipped=f"the {self.name} backend measures nothing itself: the cost model estimates from its trace")

    def expect_inputs(self, arrays: list[np.ndarray]) -> None:
        """Told the arrays the entry point is about to be called with (the emulator checks that the
        launch producing the outputs received exactly these); other backends have no such check."""
        return None

    # -- shared helpers ---------------------------------------------------------------------------
    def _import_kernel(self, module_name: str | None = None) -> Any:
        entry = self.task.kernel
        assert entry is not None
        module = load_module(entry.path, module_name)
        self.kernel_module = module
        return get_function(module, entry.name, entry.path.name)

    def _call(self, target: Callable[..., Any], args: list[np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        """Call a launch target with the manifest's calling convention; returns (outputs, seconds)."""
        entry = self.task.kernel
        assert entry is not None
        call_args = list(args)
        preallocated: list[np.ndarray] = []
        if entry.outputs_mode == "arguments":
            preallocated = allocate_outputs(self.task.outputs)
            call_args += preallocated
        self.expect_inputs(call_args)
        start = time.perf_counter()
        returned = target(*call_args, **entry.kwargs)
        elapsed = time.perf_counter() - start
        if entry.outputs_mode == "arguments":
            return {o.name: a for o, a in zip(self.task.outputs, preallocated)}, elapsed
        return collect_outputs(returned, self.task.outputs, self.kernel_label), elapsed

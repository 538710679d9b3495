"""Kernel objects and launches: numpy arguments in, numpy results out, SPMD grids, trace hooks.

A `Kernel` wraps a kernel function for one front end. Calling it launches the kernel on the
emulator (every program of the SPMD grid, serially, in row-major order); calling it from inside a
running kernel just calls the function (sub-kernels). Arguments that are numpy arrays become HBM
tensors backed by the caller's arrays, so kernels that write their outputs into arguments
(`torch_neuronx.nki_jit` style) work. Returned HBM tensors come back as numpy arrays.
"""

from __future__ import annotations

import enum
import functools
import gc
import importlib
import inspect
import itertools
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Final, cast

import numpy as np

from nkitui.emulator import devmem, provenance, replaylog
from nkitui.emulator import dtypes as dt
from nkitui.emulator.blas import single_threaded
from nkitui.emulator.config import Options, current_options
from nkitui.emulator.errors import KernelArgumentError, NKIEmulatorError
from nkitui.emulator.runtime import Run, active_trace, current_or_none, set_current
from nkitui.emulator.tensor import Tensor
from nkitui.emulator.trace import Trace


@dataclass(frozen=True, slots=True)
class ShapeDtype:
    """A stand-in for an array in shape-only mode (`emulator.trace(execute=False)`)."""

    shape: tuple[int, ...]
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(slots=True)
class RunInfo:
    """Summary of the last launch of a kernel (also kept when no trace is collected)."""

    kernel: str
    grid: tuple[int, ...]
    instructions: int
    engine_counts: dict[str, int]
    wall_s: float
    diagnostics: list[dict[str, Any]]
    sbuf_peak_bytes: int
    psum_peak_bytes: int
    trace: Trace | None = None
    options: dict[str, Any] = field(default_factory=dict)  # target (str), precise, execute (bool)
    written_args: list[str] = field(default_factory=list)  # argument arrays the kernel wrote to


class Frontend:
    """What a front end contributes to launches: its tensor class and name.

    Front ends with their own per-run state or program scheduling (the `nki` front end runs the
    logical cores of `kernel[lnc]` concurrently) override `make_run` and `execute`.
    """

    def __init__(self, name: str, tensor_cls: type[Tensor]) -> None:
        self.name = name
        self.tensor_cls = tensor_cls

    def make_run(self, options: Options, kernel_name: str, grid: tuple[int, ...], trace: Trace | None) -> Run:
        """The Run of one launch."""
        return Run(options, kernel_name, grid, trace)

    def execute(self, run: Run, kernel: Kernel, args: tuple[object, ...], kwargs: Mapping[str, object],
                programs: Iterable[tuple[int, ...]]) -> object:
        """Run the kernel body for every program of the grid (serially, in order); returns the
        result of the last program."""
        result: object = None
        for pid in programs:
            run.program = tuple(pid)
            run.shared_idx = 0
            result = kernel.func(*args, **kwargs)
        return result


def grid_sizes(grid: object) -> tuple[int, ...]:
    if not isinstance(grid, tuple):
        grid = (grid,)
    out: list[int] = []
    for g in grid:
        size = getattr(g, "grid_size", g)
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise KernelArgumentError(f"SPMD grid dimensions must be positive integers, got {g!r}")
        out.append(int(size))
    return tuple(out)


class Kernel:
    """A kernel function bound to a front end (what `@nki.jit` returns)."""

    def __init__(self, func: Callable[..., Any], frontend: Frontend, *, launcher: str = "jit", mode: str = "auto",
                 options: dict[str, object] | None = None, grid: tuple[int, ...] = ()) -> None:
        while isinstance(func, Kernel):  # nki.baremetal(nki.jit(f)) wraps the same function
            options = {**func.compiler_options, **(options or {})}
            func = func.func
        self.func: Callable[..., Any] = func
        self.frontend = frontend
        self.launcher = launcher
        self.mode = mode
        self.compiler_options: dict[str, Any] = dict(options or {})  # as the kernel's author gave them
        self.grid = grid
        self.last_run: RunInfo | None = None
        self.benchmark_result: object = None  # nki.benchmark: the front end's result record
        self.profile_result: Trace | None = None  # nki.profile: the run's trace
        functools.update_wrapper(self, func, updated=())

    @property
    def name(self) -> str:
        return getattr(self.func, "__name__", "kernel")

    def __getitem__(self, grid: object) -> Kernel:
        k = type(self).__new__(type(self))
        k.__dict__.update(self.__dict__)
        k.grid = grid_sizes(grid)
        return k

    def __call__(self, *args: object, **kwargs: object) -> Any:  # the kernel's outputs, as numpy arrays
        if current_or_none() is not None:  # a sub-kernel called from a running kernel
            return self.func(*args, **kwargs)
        return run_kernel(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<nki kernel {self.name} ({self.frontend.name}, {self.launcher})>"


# ---------------------------------------------------------------------------------------------


Writebacks = list[tuple[np.ndarray, Tensor]]  # (the caller's array, the tensor holding a copy of it)


def _to_tensor(run: Run, value: object, name: str, cls: type[Tensor], writebacks: Writebacks) -> object:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        arr = value
        try:
            d = dt.dtype_of(arr.dtype)
        except TypeError as e:
            raise KernelArgumentError(f"argument '{name}': {e}") from None
        if arr.ndim == 0:
            return arr.item()
        if d.host is not None and arr.dtype == d.host:  # e.g. MX x4 host arrays: the engine keeps raw cells
            arr = value = arr.view(d.np)
        need_copy = not arr.flags.c_contiguous or not arr.flags.writeable or (
            run.execute and arr.dtype != dt.storage_dtype(d, run.precise))
        if run.execute and devmem.enabled():
            # in the kernel's process every argument lives in write-protected device memory: the
            # harness's inputs already do (wrapped as they are); any other array is copied there and
            # gets the kernel's writes back when the launch ends
            if not need_copy and devmem.owns(arr):
                return _input(run.wrap_array(arr, name, cls, d), value)
            stored = devmem.copy_of(arr, dt.storage_dtype(d, run.precise))
            t = _input(run.wrap_array(stored, name, cls, d), value)
            writebacks.append((value, t))
            return t
        if need_copy and run.execute:
            stored = np.ascontiguousarray(arr, dtype=dt.storage_dtype(d, run.precise))
            t = _input(run.wrap_array(stored, name, cls, d), value)
            writebacks.append((value, t))
            return t
        t = _input(run.wrap_array(arr, name, cls, d), value)
        return t
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, complex)):
        if run.execute:
            arr = np.asarray(value)
            if arr.dtype == object:
                raise KernelArgumentError(f"argument '{name}' ({type(value).__name__}) is not an array; pass numpy "
                                          "arrays (shape-only placeholders need emulator.trace(execute=False))")
            return _to_tensor(run, arr, name, cls, writebacks)
        d = dt.dtype_of(value.dtype)
        from nkitui.emulator.memory import Storage
        st = Storage(name, "hbm", tuple(int(s) for s in value.shape), d, None, kind="input")
        run.input_ids.add(st.id)
        if run.recording:
            from nkitui.emulator.trace import StorageInfo
            run.trace.storages[st.id] = StorageInfo(st.id, name, "hbm", st.shape, d.name)  # type: ignore[union-attr]  # recording: run.trace is set
        return cls.whole(st)
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_to_tensor(run, v, f"{name}[{i}]", cls, writebacks) for i, v in enumerate(value))
    return value


def _input(t: Tensor, original: object) -> Tensor:
    """The harness's array `original` wrapped as `t`: the replayable log names it by its position."""
    rec = replaylog.active()
    if rec is not None:
        rec.note_input(t.storage, original)
    return t


def _arrays_in(values: Iterable[object]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for v in values:
        if isinstance(v, np.ndarray):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, np.ndarray))
    return out


def _bind(kernel: Kernel, args: tuple[object, ...], kwargs: Mapping[str, object]) -> inspect.BoundArguments | None:
    try:
        sig = inspect.signature(kernel.func)
    except (TypeError, ValueError):
        return None
    try:
        return sig.bind(*args, **kwargs)
    except TypeError as e:
        raise KernelArgumentError(f"arguments do not match the signature of kernel '{kernel.name}{sig}': {e}",
                                  location=_func_location(kernel.func)) from None


def _func_location(func: object) -> tuple[str, int]:
    code = getattr(func, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code else ("", 0)


def _check_annotations(kernel: Kernel, bound: inspect.BoundArguments | None) -> None:
    if bound is None:
        return
    try:  # string annotations (from __future__ import annotations) are evaluated in the kernel's module
        hints = inspect.get_annotations(kernel.func, eval_str=True)
    except Exception:
        hints = getattr(kernel.func, "__annotations__", {}) or {}
    for pname, value in bound.arguments.items():
        ann = hints.get(pname)
        check = getattr(ann, "nki_check", None)
        if check is not None and isinstance(value, Tensor):
            problem = check(value.shape, value.storage.dtype)
            if problem:
                raise KernelArgumentError(f"err_annotation_shape_mismatch: argument '{pname}' of kernel "
                                          f"'{kernel.name}': {problem}", location=_func_location(kernel.func))


def _output(run: Run, value: object, name: str = "output") -> object:
    if isinstance(value, Tensor):
        st = value.storage
        if st.memory != "hbm":
            raise KernelArgumentError(f"kernel '{run.kernel_name}' returned a {st.memory} tile as {name}; kernel "
                                      "outputs must be HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm)) "
                                      "written with nl.store / nisa.dma_copy")
        if not run.execute:
            return ShapeDtype(value.shape, st.dtype.public)
        out = value._apply(st.data) if devmem.enabled() else value.array()  # Storage.data: device memory
        if not isinstance(out, np.ndarray) or out.base is not None or out is st.data:
            out = np.array(out, copy=True)
        if st.dtype.host is not None:
            out = out.view(st.dtype.host)
        if provenance.collecting():
            provenance.note(out, st, run.kernel_name, "returned", run.received)
        rec = replaylog.active()
        if rec is not None:
            rec.note_output(out, value)
        return out
    if isinstance(value, tuple):
        return tuple(_output(run, v, f"{name}[{i}]") for i, v in enumerate(value))
    if isinstance(value, list):
        return [_output(run, v, f"{name}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _output(run, v, f"{name}[{k!r}]") for k, v in value.items()}
    return value


class _Default(enum.Enum):
    ACTIVE = 0


_ACTIVE: Final = _Default.ACTIVE  # run_kernel's trace: the active one


def run_kernel(kernel: Kernel, args: tuple[object, ...], kwargs: Mapping[str, object], *,
               grid: tuple[int, ...] | None = None, trace: Trace | None | _Default = _ACTIVE) -> object:
    """Launch `kernel` on numpy arguments; `trace`: the Trace to record into (default: the active
    `emulator.trace()`, if any; multi-rank launches give each rank its own and merge them)."""
    opts = current_options()
    if trace is _ACTIVE:
        trace = active_trace()
    grid = kernel.grid if grid is None else grid
    run = kernel.frontend.make_run(opts, kernel.name, grid, trace)
    cls = kernel.frontend.tensor_cls
    writebacks: Writebacks = []
    if provenance.collecting():  # the array arguments as the caller passed them (Collector.expect)
        run.received = _arrays_in([*args, *kwargs.values()])
    bound = _bind(kernel, args, kwargs)
    if bound is not None:
        for pname, value in list(bound.arguments.items()):
            bound.arguments[pname] = _to_tensor(run, value, pname, cls, writebacks)
        targs, tkwargs = bound.args, bound.kwargs
    else:
        targs = tuple(_to_tensor(run, v, f"arg{i}", cls, writebacks) for i, v in enumerate(args))
        tkwargs = {k: _to_tensor(run, v, k, cls, writebacks) for k, v in kwargs.items()}
    _check_annotations(kernel, bound)
    if bound is not None:
        arg_tensors = [(n, v) for n, v in bound.arguments.items() if isinstance(v, Tensor)]
    else:
        arg_tensors = [(f"arg{i}", v) for i, v in enumerate(targs) if isinstance(v, Tensor)]
    first_seq = len(trace.instructions) if trace is not None else 0
    if trace is not None and not trace.kernel:
        trace.kernel = kernel.name
    programs = itertools.product(*(range(g) for g in grid)) if grid else [()]
    t0 = time.perf_counter()
    result = None
    prev = set_current(run)
    saved_err = np.seterr(all="ignore")  # fp exceptions are data, as on the device (NaN/Inf propagate)
    # Tiles are freed by reference counting; the cyclic collector would only rescan the growing trace
    # over and over (quadratic in trace length), so it pauses during the launch.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        rec = replaylog.active()
        if rec is not None:
            rec.body = True
        with single_threaded():
            result = kernel.frontend.execute(run, kernel, targs, tkwargs, programs)
    finally:
        if rec is not None:
            rec.body = False
        if gc_was_enabled:
            gc.enable()
        np.seterr(**saved_err)
        set_current(prev)
    wall = time.perf_counter() - t0
    run.alloc.close()
    out = _output(run, result)
    for original, t in writebacks:
        if t.storage.id in run.written_inputs and original.flags.writeable:
            np.copyto(original, t.storage.data.astype(original.dtype) if t.storage.data.dtype != original.dtype
                      else t.storage.data, casting="unsafe")
    written = [name for name, t in arg_tensors if t.storage.id in run.written_inputs]
    if provenance.collecting():  # outputs written into argument arrays count as the device's too
        copied_from = {id(t.storage): original for original, t in writebacks}
        for _, t in arg_tensors:
            if t.storage.id in run.written_inputs:
                provenance.note(copied_from.get(id(t.storage), t.storage.data), t.storage, kernel.name, "argument",
                                run.received)
    rec = replaylog.active()
    if rec is not None:  # outputs written into argument arrays: the replay finds them in those storages
        copied = {id(t.storage): original for original, t in writebacks}
        for _, t in arg_tensors:
            if t.storage.id in run.written_inputs:
                rec.note_output(copied.get(id(t.storage), t.storage.data), t)
    info = RunInfo(kernel.name, grid, run.instructions, dict(run.engine_counts), wall, list(run.diagnostics),
                   run.alloc.sbuf_peak, run.alloc.psum_peak, trace,
                   {"target": run.target.name, "precise": run.precise, "execute": run.execute}, written)
    kernel.last_run = info
    if trace is not None:
        launches = trace.meta.setdefault("launches", [])
        launches.append({
            "kernel": kernel.name, "frontend": kernel.frontend.name, "launcher": kernel.launcher,
            "grid": list(grid), "first_seq": first_seq, "instructions": run.instructions,
            "engine_counts": dict(run.engine_counts), "wall_s": wall, "target": run.target.name,
            "precise": run.precise, "execute": run.execute, "sbuf_peak_bytes_per_partition": run.alloc.sbuf_peak,
            "psum_peak_bytes_per_partition": run.alloc.psum_peak, "hbm_bytes": run.hbm_bytes,
            "compiler_options": {k: _jsonable(v) for k, v in kernel.compiler_options.items()},
        })
        if run.diagnostics:
            trace.meta.setdefault("diagnostics", []).extend(run.diagnostics)
    return out


def _jsonable(v: object) -> object:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


# ---------------------------------------------------------------------------------------------
# Latency estimates for nki.benchmark / nki.profile on the emulator

_estimator: Callable[[Trace], float | None] | None = None


def set_latency_estimator(fn: Callable[[Trace], float | None] | None) -> None:
    """Register the cost model: fn(trace) -> estimated kernel latency in seconds (or None)."""
    global _estimator
    _estimator = fn


def latency_estimator() -> Callable[[Trace], float | None] | None:
    """The registered estimator, else the one `NKITUI_LATENCY_ESTIMATOR` names, else None.

    The variable names a module (`nkitui.perf`: its `estimate_latency`) or `package.module:function`;
    it is imported by name when a benchmark first asks, so the emulator never imports the cost model."""
    if _estimator is not None:
        return _estimator
    spec = os.environ.get("NKITUI_LATENCY_ESTIMATOR", "").strip()
    if not spec:
        return None
    mod, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), attr or "estimate_latency")
    except (ImportError, AttributeError) as e:
        raise NKIEmulatorError(f"NKITUI_LATENCY_ESTIMATOR={spec!r} cannot be loaded ({e}); expected "
                               "'package.module' (with an estimate_latency function) or "
                               "'package.module:function'", location=("", 0)) from None
    if not callable(fn):
        raise NKIEmulatorError(f"NKITUI_LATENCY_ESTIMATOR={spec!r} names {type(fn).__name__} "
                               f"{attr or 'estimate_latency'!r}, not a function taking a trace",
                               location=("", 0))
    return cast("Callable[[Trace], float | None]", fn)  # the function the variable names (callable, checked)


Kernel.__module__ = "neuronxcc.nki"  # what `type(kernel)` names (red team A, finding 4: nkitui.emulator.newns.tensor)

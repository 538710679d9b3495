"""`neuronxcc.nki` on the emulator: jit, baremetal, benchmark, profile, simulate_kernel, trace.

Every launcher runs the kernel on the emulator. Compiler and launch options that mean nothing on
a CPU (save_neff_name, additional_compile_opt, platform_target, ...) are accepted and recorded in
`kernel.compiler_options` (and in the trace's launch metadata), never rejected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import SupportsFloat, TypeAlias, TypeVar, cast, overload

from nkitui.emulator.launch import Frontend, Kernel, latency_estimator, run_kernel
from nkitui.emulator.legacy import spmd
from nkitui.emulator.legacy import compiler, isa, language, typing  # noqa: F401  (submodules)
from nkitui.emulator.legacy.tile import LegacyTensor
from nkitui.emulator.runtime import Run, active_trace, current_or_none, pop_trace, push_trace
from nkitui.emulator.trace import Trace

_K = TypeVar("_K", bound=Kernel)
KernelFunction: TypeAlias = Callable[..., object]
# what a launcher decorator gives: the kernel (`nki.jit(f)`), or a decorator (`@nki.jit(...)`)
Launched: TypeAlias = "Kernel | Callable[[KernelFunction], Kernel]"

class LegacyFrontend(Frontend):
    """Programs run one after another, unless the kernel calls nl.all_reduce across programs:
    then they take turns (legacy/spmd.py)."""

    def execute(self, run: Run, kernel: Kernel, args: tuple[object, ...], kwargs: Mapping[str, object],
                programs: Iterable[tuple[int, ...]]) -> object:
        program_list = list(programs)
        if len(program_list) > 1 and spmd.mentions(kernel.func):
            return spmd.TurnTaking(run, program_list).execute(kernel, args, kwargs)
        return super().execute(run, kernel, args, kwargs, program_list)


FRONTEND = LegacyFrontend("neuronxcc.nki", LegacyTensor)


def _options(func: object, kwargs: dict[str, object]) -> dict[str, object]:
    opts = dict(getattr(func, "__nki_compiler_options__", {}) or {})
    opts.update(kwargs)
    return opts


@overload
def _decorator(cls: type[_K], launcher: str, func: KernelFunction, mode: str, kwargs: dict[str, object]) -> _K: ...


@overload
def _decorator(cls: type[_K], launcher: str, func: str | None, mode: str,
               kwargs: dict[str, object]) -> Callable[[KernelFunction], _K]: ...


def _decorator(cls: type[_K], launcher: str, func: KernelFunction | str | None, mode: str,
               kwargs: dict[str, object]) -> _K | Callable[[KernelFunction], _K]:
    if func is None:
        return lambda f: _decorator(cls, launcher, f, mode, kwargs)
    if isinstance(func, str) and mode == "auto":  # nki.jit("simulation")
        return lambda f: _decorator(cls, launcher, f, func, kwargs)
    # (a string with an explicit mode= is passed on: calling that kernel fails, as it would on the SDK)
    return cls(cast(KernelFunction, func), FRONTEND, launcher=launcher, mode=mode, options=_options(func, kwargs))


def jit(func: KernelFunction | str | None = None, mode: str = "auto", **kwargs: object) -> Launched:
    """`@nki.jit`, `@nki.jit(mode="simulation")`, `nki.jit(f, ...)`: a kernel runnable on numpy arrays."""
    return _decorator(Kernel, "jit", func, mode, kwargs)


def trace(func: KernelFunction | str | None = None, mode: str = "auto", **kwargs: object) -> Launched:
    """Legacy `@nki.trace` (sub-kernel decorator; also used as `nki_jit = nki.trace`)."""
    return _decorator(Kernel, "trace", func, mode, kwargs)


def baremetal(kernel: KernelFunction | None = None, **kwargs: object) -> Launched:
    """`nki.baremetal(kernel)`, `nki.baremetal()(kernel)`, `nki.baremetal(kernel, save_neff_name=...)`."""
    return _decorator(Kernel, "baremetal", kernel, "baremetal", kwargs)


def simulate_kernel(kernel: KernelFunction, *args: object, **kwargs: object) -> object:
    """Run a kernel (a jit/baremetal kernel, a grid-bound kernel or a plain function) on numpy arrays."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel, FRONTEND, launcher="simulate_kernel", mode="simulation")
    return run_kernel(kernel, args, kwargs)


# -- benchmark / profile --------------------------------------------------------------------------
class NCLatency:
    """Latency of one emulated run in microseconds. The emulator has one number, not a distribution:
    every percentile returns it. `source` says whether it is a cost-model estimate or wall time."""

    PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)

    def __init__(self, latency_us: float, source: str) -> None:
        self.latency_us = float(latency_us)
        self.source = source

    def get_latency_percentile(self, percentile: SupportsFloat) -> float:
        p = float(percentile)
        if not 0 <= p <= 100:
            raise ValueError(f"percentile must be between 0 and 100, got {percentile}")
        return self.latency_us

    def __repr__(self) -> str:
        rows = "\n".join(f"p{p} = {self.latency_us:.0f}us" for p in self.PERCENTILES)
        return f"NCLatency ({self.source}):\n{rows}"


@dataclass
class BenchmarkResult:
    nc_latency: NCLatency
    source: str  # "cost-model estimate" | "emulator wall time (not device time)"
    warmup: int
    iters: int
    trace: Trace


class _MeasuredKernel(Kernel):
    """Runs once under a private trace so that the cost model (if registered) can estimate latency."""

    def _measure(self, args: tuple[object, ...], kwargs: dict[str, object]) -> tuple[object, Trace, float, str]:
        outer = active_trace()
        tr = Trace(target=outer.target if outer is not None else "")
        push_trace(tr)
        try:
            out = run_kernel(self, args, kwargs)
        finally:
            pop_trace(tr)
        info = self.last_run
        assert info is not None  # run_kernel recorded it
        tr.target = info.options.get("target", tr.target)
        if outer is not None:  # the caller's trace sees this launch too
            base = len(outer.instructions)
            for ins in tr.instructions:
                ins.seq += base
                outer.instructions.append(ins)
            outer.storages.update(tr.storages)
            for key in ("launches", "diagnostics"):
                if key in tr.meta:
                    outer.meta.setdefault(key, []).extend(tr.meta[key])
        est = latency_estimator()
        seconds = est(tr) if est is not None else None
        if seconds is None:
            return out, tr, info.wall_s, "emulator wall time (not device time)"
        return out, tr, float(seconds), "cost-model estimate"


class BenchmarkKernel(_MeasuredKernel):
    def __call__(self, *args: object, **kwargs: object) -> object:
        if current_or_none() is not None:
            return self.func(*args, **kwargs)
        out, tr, seconds, source = self._measure(args, kwargs)
        opts = self.compiler_options
        self.benchmark_result = BenchmarkResult(NCLatency(seconds * 1e6, source), source,
                                                int(opts.get("warmup", 10)), int(opts.get("iters", 100)), tr)
        return out


def benchmark(kernel: KernelFunction | None = None, **kwargs: object) -> Launched:
    """`nki.benchmark(warmup=, iters=, ...)(kernel)`: runs once; `kernel.benchmark_result.nc_latency`
    reports the cost-model estimate when one is registered, else the emulator's wall time (labelled)."""
    return _decorator(BenchmarkKernel, "benchmark", kernel, "benchmark", kwargs)


class ProfileKernel(_MeasuredKernel):
    def __call__(self, *args: object, **kwargs: object) -> object:
        if current_or_none() is not None:
            return self.func(*args, **kwargs)
        out, tr, seconds, source = self._measure(args, kwargs)
        self.profile_result = tr
        workdir = self.compiler_options.get("working_directory")
        if workdir:
            name = self.compiler_options.get("save_trace_name") or "profile.ntff"
            stem = os.path.splitext(os.path.basename(str(name)))[0]
            path = os.path.join(str(workdir), f"{stem}.emulator-trace.json")
            if os.path.exists(path) and not self.compiler_options.get("overwrite", False):
                raise FileExistsError(f"{path} exists; pass overwrite=True to nki.profile to replace it")
            os.makedirs(str(workdir), exist_ok=True)
            doc = {"summary": {"total_time": seconds, "source": source, "kernel": self.name},
                   "trace": tr.to_json()}
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f)
        return out


def profile(func: KernelFunction | None = None, **kwargs: object) -> Launched:
    """`nki.profile(working_directory=..., save_neff_name=..., save_trace_name=..., ...)`: runs once and,
    given a working_directory, writes `<save_trace_name stem>.emulator-trace.json` there (the
    emulator has no NEFF/NTFF); the trace is also on `kernel.profile_result`."""
    return _decorator(ProfileKernel, "profile", func, "profile", kwargs)


tensor = LegacyTensor

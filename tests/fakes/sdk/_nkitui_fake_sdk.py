"""Shared implementation of the fake Neuron SDK (tests only; see tests/fakes/README.md)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

RECORDED = Path(__file__).resolve().parent.parent / "recorded"
FAKE_DEVICE_ENV = "NKITUI_FAKE_NEURON_DEVICE"


def device() -> str | None:
    return os.environ.get(FAKE_DEVICE_ENV) or None


def require_device(api: str) -> None:
    if device() is None:
        raise RuntimeError(f"{api}: no Neuron device found (nrt_init failed: /dev/neuron0 not present)")


def write_neff(func, path: str | os.PathLike[str] | None = None) -> Path | None:  # noqa: ANN001
    """Pretend to compile `func`: write a small NEFF file (where asked, or under ./neuronxcc-*/
    when NEURON_FRAMEWORK_DEBUG=1 keeps the compiler's artifacts)."""
    if path is None:
        if os.environ.get("NEURON_FRAMEWORK_DEBUG") != "1":
            return None
        digest = hashlib.sha1(func.__qualname__.encode()).hexdigest()[:8]
        target = Path.cwd() / f"neuronxcc-{digest}" / "graph.neff"
    else:
        target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"FAKE-NEFF\n{func.__module__}.{func.__qualname__}\n")
    return target


def underlying(kernel):  # noqa: ANN001, ANN201
    while hasattr(kernel, "func"):
        kernel = kernel.func
    return kernel


class FakeKernel:
    """What @nki.jit returns: callable on numpy arrays, indexable for an SPMD grid / LNC count."""

    def __init__(self, func, mode: str = "auto", grid=None, options=None) -> None:  # noqa: ANN001
        self.func = func
        self.mode = mode
        self.grid = grid
        self.options = dict(options or {})
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__wrapped__ = func

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return FakeKernel(self.func, self.mode, grid, self.options)

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        if os.environ.get("NKI_SIMULATOR") == "1" or self.mode == "simulation":
            return self.func(*args, **kwargs)
        require_device("nki.jit")
        write_neff(self.func)
        return self.func(*args, **kwargs)


def jit(func=None, mode: str = "auto", **options):  # noqa: ANN001, ANN201
    if func is None:
        return lambda f: FakeKernel(f, mode, options=options)
    return FakeKernel(func, mode, options=options)


def simulate(kernel):  # noqa: ANN001, ANN201
    func = underlying(kernel)

    def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return func(*args, **kwargs)

    return run


class FakeBaremetal:
    def __init__(self, kernel, grid=None, save_neff_name=None, artifacts_dir=None) -> None:  # noqa: ANN001
        self.func = underlying(kernel)
        self.grid = grid
        self.save_neff_name = save_neff_name
        self.artifacts_dir = artifacts_dir

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return FakeBaremetal(self.func, grid, self.save_neff_name, self.artifacts_dir)

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        require_device("nki.baremetal")
        write_neff(self.func, self.save_neff_name)
        return self.func(*args, **kwargs)


def baremetal(kernel=None, *, save_neff_name=None, save_trace_name=None, additional_compile_opt=None,  # noqa: ANN001, ANN201
              artifacts_dir=None, **_ignored):
    if kernel is None:
        return lambda k: FakeBaremetal(k, save_neff_name=save_neff_name, artifacts_dir=artifacts_dir)
    return FakeBaremetal(kernel, save_neff_name=save_neff_name, artifacts_dir=artifacts_dir)


def simulate_kernel(kernel, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
    return underlying(kernel)(*args, **kwargs)


class _Latency:
    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def get_latency_percentile(self, p: int) -> float:
        return float(self.table[f"p{p}"])


class _BenchmarkResult:
    def __init__(self, table: dict[str, float]) -> None:
        self.nc_latency = _Latency(table)


class FakeBenchmark:
    def __init__(self, kernel, warmup: int, iters: int, save_neff_name=None, grid=None, owner=None) -> None:  # noqa: ANN001
        self.func = underlying(kernel)
        self.warmup, self.iters, self.save_neff_name, self.grid = warmup, iters, save_neff_name, grid
        self.owner = owner
        self.benchmark_result = None

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return FakeBenchmark(self.func, self.warmup, self.iters, self.save_neff_name, grid, owner=self)

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        require_device("nki.benchmark")
        write_neff(self.func, self.save_neff_name)
        out = self.func(*args, **kwargs)  # neuron-bench ignores input values; outputs are garbage
        table = json.loads((RECORDED / "benchmark_latency.json").read_text())
        result = _BenchmarkResult(table)
        self.benchmark_result = result
        if self.owner is not None:
            self.owner.benchmark_result = result
        print("Latency results are:\nNCLatency:\n" + "\n".join(f"{k} = {v:g}us" for k, v in table.items()))
        return out


def benchmark(warmup: int = 10, iters: int = 100, save_neff_name=None, save_trace_name=None,  # noqa: ANN001, ANN201
              additional_compile_opt=None, **_ignored):
    return lambda kernel: FakeBenchmark(kernel, warmup, iters, save_neff_name)

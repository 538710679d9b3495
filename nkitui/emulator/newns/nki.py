"""The top-level `nki` module (NKI 0.3 to 0.6) on the emulator.

* `@nki.jit` / `nki.jit(f, platform_target=...)`: a kernel runnable on numpy arrays (returns numpy
  arrays); `kernel[lnc](...)` runs lnc in {1, 2} logical cores concurrently;
* `nki.simulate(kernel)(*args)` and `nki.simulate(kernel)[lnc](**kwargs)`; `nki.cpu_simulate` is
  the same entry under the name nki-library's simulation harness uses;
* `nki.multi_rank_simulate(kernel, world_size=N, per_rank_inputs=...)`: N ranks for
  `nki.collectives` (see newns/ranked.py);
* `nki.baremetal`, `nki.benchmark`, `nki.profile`, `nki.simulate_kernel` do not exist in the new
  namespace: they raise the documented "not available" error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, overload

from nkitui.emulator.errors import UnsupportedError
from nkitui.emulator.launch import Kernel
from nkitui.emulator.newns import collectives, compiler, isa, language, tracetime, typing  # noqa: F401
from nkitui.emulator.newns import dtypes as dtype  # noqa: F401  (the nki.dtype module)
from nkitui.emulator.newns.launcher import NkiKernel, as_kernel
from nkitui.emulator.newns.tensor import NkiTensor  # noqa: F401

tensor = tracetime  # `nki.tensor` (trace-time constants); the device tensor class is nki.language.NkiTensor


@overload
def jit(func: Callable[..., object], mode: str = "auto", **kwargs: object) -> NkiKernel: ...


@overload
def jit(func: str | None = None, mode: str = "auto", **kwargs: object) -> Callable[[Callable[..., object]], NkiKernel]:
    ...


def jit(func: Callable[..., object] | str | None = None, mode: str = "auto",
        **kwargs: object) -> NkiKernel | Callable[[Callable[..., object]], NkiKernel]:
    """`@nki.jit`, `@nki.jit(platform_target="trn3")`, `nki.jit(f)`: the framework is detected from
    the arguments; numpy arrays run standalone, here on the emulator. Options without meaning on a
    CPU are recorded in `kernel.compiler_options`."""
    if func is None:
        return lambda f: jit(f, mode=mode, **kwargs)
    if isinstance(func, str):  # nki.jit("trace")
        return lambda f: jit(f, mode=func, **kwargs)
    opts = dict(getattr(func, "__nki_compiler_options__", {}) or {})
    opts.update(kwargs)
    if mode != "auto":
        opts["mode"] = mode
    return as_kernel(func, "jit", mode, opts)


class _Simulated:
    """`nki.simulate(kernel)`: call it, or subscript it with the logical-core degree first."""

    def __init__(self, kernel: NkiKernel) -> None:
        self.kernel = kernel

    def __getitem__(self, lnc: object) -> NkiKernel:
        return self.kernel[lnc]

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.kernel(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<nki.simulate({self.kernel.name})>"


def simulate(kernel: Callable[..., object], **kwargs: object) -> _Simulated:
    """Run a kernel (an `@nki.jit` kernel or a plain kernel function) on the CPU emulator."""
    k = kernel if isinstance(kernel, NkiKernel) else as_kernel(kernel, "simulate", "simulation", kwargs or None)
    if kwargs and k is kernel:
        k = as_kernel(kernel.func, "simulate", "simulation", {**kernel.compiler_options, **kwargs})
    return _Simulated(k)


cpu_simulate = simulate


def multi_rank_simulate(kernel: Callable[..., object], *, world_size: int, per_rank_inputs: object) -> list[object]:
    """Run `kernel` on `world_size` ranks in this process, concurrently (one thread per rank, and
    per core of a `kernel[2]`), so that `nki.collectives` exchange data between them; returns each
    rank's result in rank order. `per_rank_inputs`: one (args, kwargs) pair per rank, as a sequence
    in rank order or a mapping rank -> pair. Array arguments may differ in value across ranks but
    must have the same shape and dtype; every other argument must be equal on every rank."""
    from nkitui.emulator.newns.ranked import run_multi_rank

    k = kernel.kernel if isinstance(kernel, _Simulated) else kernel
    k = k if isinstance(k, NkiKernel) else as_kernel(k, "multi_rank_simulate", "simulation")
    return run_multi_rank(k, world_size, per_rank_inputs)


def _not_available(name: str, instead: str) -> Callable[..., NoReturn]:
    def fn(*args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(f"nki.{name} is not available in the nki namespace (NKI 0.3+): {instead}",
                               location=("", 0))
    fn.__name__ = name
    return fn


baremetal = _not_available("baremetal", "call the @nki.jit kernel with numpy arrays, or use nki.simulate(kernel)")
benchmark = _not_available("benchmark", "profile the compiled NEFF with neuron-explorer; on the emulator use the "
                           "cost model (nkitui perf)")
profile = _not_available("profile", "use neuron-explorer capture; on the emulator use emulator.trace()")
simulate_kernel = _not_available("simulate_kernel", "use nki.simulate(kernel)(*args)")


def is_kernel(obj: object) -> bool:
    return isinstance(obj, Kernel)

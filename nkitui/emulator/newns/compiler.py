"""`nki.compiler`: compiler decorators and per-kernel options. The decorators and most options do
not change what the emulator computes: they are accepted (with or without arguments) and recorded
on the kernel (`kernel.compiler_options`). One does change what the emulator accepts:
`@nki.jit(compile_config=CompileConfig(allocation=Allocation.LINEAR, nki_alloc_fallback=False))`.

With `Allocation.LINEAR` NKI allocates the kernel's tensors itself, by linear scan, each "at its
first write" until "its last read" (`nki.compiler.Allocation` docs); when that runs out of memory
the compiler falls back to its default flow unless `nki_alloc_fallback=False`, which "surfaces the
failure (e.g. an SBUF/PSUM out-of-memory) instead of retrying" (`CompileConfig` docs). So the
emulator runs such a kernel with SBUF capacity checked strictly (live ranges from first to last use,
as it counts them in every mode): no spill, a `CapacityError` that says it is NKI allocation's
out-of-memory. With the fallback (the default) an overflow is what the default flow makes of it (a
`spill` diagnostic)."""

from __future__ import annotations

import enum
from typing import Any

from nkitui.emulator.legacy.compiler import (  # noqa: F401  (same decorators in both namespaces)
    enable_stack_allocator,
    force_auto_alloc,
    multi_buffer,
    no_reorder,
    skip_middle_end_transformations,
)


class Allocation(enum.Enum):
    """How the tiles get their addresses (`CompileConfig.allocation`): COLORING, the default flow
    (neuronx-cc, graph coloring after tracing), or LINEAR (NKI's linear scan, first write to last read)."""

    COLORING = "coloring"
    LINEAR = "linear"


class CompileConfig:
    """Per-kernel compile configuration for `@nki.jit(compile_config=...)`. `allocation`,
    `scheduling` and `nki_alloc_fallback` are checked as `nki.jit` checks them; every other option
    is recorded as given (they tune code the emulator does not generate)."""

    def __init__(self, *, allocation: Allocation = Allocation.COLORING, scheduling: bool = False,
                 nki_alloc_fallback: bool = True, **options: Any) -> None:
        if not isinstance(allocation, Allocation):
            raise TypeError(f"allocation must be an nki.compiler.Allocation, got {allocation!r}")
        if scheduling and allocation is not Allocation.LINEAR:
            raise ValueError(f"scheduling=True needs allocation=Allocation.LINEAR, got allocation={allocation}")
        self.allocation = allocation
        self.scheduling = bool(scheduling)
        self.nki_alloc_fallback = bool(nki_alloc_fallback)
        self.options = dict(options)

    @property
    def nki_allocation_strict(self) -> bool:
        """NKI allocation whose out-of-memory is an error (no fallback to the default flow)."""
        return self.allocation is Allocation.LINEAR and not self.nki_alloc_fallback

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return (f"CompileConfig(allocation={self.allocation}, scheduling={self.scheduling}, "
                f"nki_alloc_fallback={self.nki_alloc_fallback}{extra})")

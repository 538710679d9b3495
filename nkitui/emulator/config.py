"""Execution options of the emulator: target, precision, shape-only mode, checks.

Options form a stack: `configure()` changes the process default, `options()` pushes a temporary
layer (a context manager) that holds in its own context only (thread / asyncio task, `state.py`). Defaults come from the same environment variables AWS's tools read:
NEURON_PLATFORM_TARGET_OVERRIDE (trn1/trn2/trn3, default trn2) and NKI_PRECISE_FP (0 = fp32 only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict, Unpack

from nkitui.emulator import state
from nkitui.emulator.targets import ALIASES

CAPACITY_MODES = ("error", "strict", "warn", "off")


@dataclass(frozen=True, slots=True)
class Options:
    target: str = "trn2"
    precise: bool = True  # False: keep every float in fp32 (separates algorithm error from dtype error)
    execute: bool = True  # False: shape-only mode, bookkeeping and trace without numpy math
    check_affine: bool = True  # C15 diagnostics for loop-carried writes in affine_range
    # on-chip overflow: "error" (what no allocation fits is an error; SBUF live data over capacity is a spill
    # diagnostic, as the compiler spills), "strict" (spills are errors too), "warn" (all warnings), "off"
    capacity: str = "error"
    seed: int = 0  # seed of nl.rand / dropout

    def validated(self) -> "Options":
        target = ALIASES.get(str(self.target).lower())
        if target is None:
            raise ValueError(f"unknown target {self.target!r}: use trn1, trn2 or trn3")
        if self.capacity not in CAPACITY_MODES:
            raise ValueError(f"capacity must be one of {CAPACITY_MODES}, got {self.capacity!r}")
        return dataclasses.replace(self, target=target, precise=bool(self.precise),
                                   execute=bool(self.execute))


class TraceOptionChanges(TypedDict, total=False):
    """The option keywords of emulator.trace(), which names `execute` itself."""

    target: str
    precise: bool
    check_affine: bool
    capacity: str
    seed: int


class OptionChanges(TraceOptionChanges, total=False):
    """The keyword arguments of configure() and options(): any of Options' fields."""

    execute: bool


def _from_env() -> Options:
    target = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    target = ALIASES.get(target.strip().lower(), "trn2")
    precise = os.environ.get("NKI_PRECISE_FP", "1").strip() not in ("0", "false", "False")
    return Options(target=target, precise=precise)


_default = _from_env()  # the process default (configure())
_layers = state.option_layers  # options() layers above it, per context (thread / asyncio task)


def current_options() -> Options:
    layers = _layers.get()
    return layers[-1] if layers else _default


def configure(**changes: Unpack[OptionChanges]) -> Options:
    """Change the process default for the rest of the process (every thread and task); returns the
    options now in force in this context (an enclosing options() block still wins here)."""
    global _default
    _default = dataclasses.replace(_default, **changes).validated()
    return current_options()


@contextlib.contextmanager
def options(**changes: Unpack[OptionChanges]) -> Iterator[Options]:
    """Temporarily override options in this context: `with emulator.options(target="trn1", precise=False): ...`
    (other threads and asyncio tasks keep theirs)."""
    opts = dataclasses.replace(current_options(), **changes).validated()
    _layers.set(_layers.get() + (opts,))
    try:
        yield opts
    finally:
        layers = _layers.get()
        for i in range(len(layers) - 1, -1, -1):
            if layers[i] is opts:
                _layers.set(layers[:i] + layers[i + 1:])
                break

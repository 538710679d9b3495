"""`nki.compiler.frontend`: the compiler's Python -> MLIR front ends, as names only.

The classes can be built and passed around (nki-library's harness takes a `ParserFrontend()`
default argument); compiling raises `UnsupportedError`, because lowering a kernel to MLIR is the
Neuron compiler's job, not an emulator's.
"""

from __future__ import annotations

from typing import NoReturn

from nkitui.emulator.errors import UnsupportedError

__all__ = ["NKIFrontend", "ParserFrontend", "TracerFrontend"]


class NKIFrontend:
    """Base of the compiler front ends (`compile(kernel, inputs=..., target=..., lnc=..., ...)`)."""

    name = "nki"

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args
        self.kwargs = kwargs

    def compile(self, kernel: object, *args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(
            f"nki.compiler.frontend.{type(self).__name__}.compile: lowering a kernel to MLIR/NEFF needs the Neuron "
            "compiler, which the nkitui emulator does not include; run the kernel itself instead (@nki.jit, "
            "nki.simulate) or use a host with the Neuron SDK")

    def __repr__(self) -> str:
        return f"{type(self).__name__}() (nkitui emulator: compile() needs the Neuron compiler)"


class ParserFrontend(NKIFrontend):
    """The parsing front end (the compiler's default)."""

    name = "parser"


class TracerFrontend(NKIFrontend):
    """The tracing front end."""

    name = "tracer"

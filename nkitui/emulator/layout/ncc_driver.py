"""`nki.compiler.ncc_driver`: the MLIR -> NEFF driver, as names only (see frontend.py)."""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from nkitui.emulator.errors import UnsupportedError

__all__ = ["CompileOptions", "CompiledKernel"]


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """The driver's options, recorded as given."""

    target: str = "trn2"
    lnc: int = 1
    output_path: str = "file.neff"
    artifacts_dir: str = "artifacts"
    neuronx_cc_args: tuple[str, ...] = ()
    backend_optimizations: bool = True

    def disable_backend_optimizations(self) -> "CompileOptions":
        return dataclasses.replace(self, backend_optimizations=False)


class CompiledKernel:
    """A NEFF built by the compiler: never produced by the emulator."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise UnsupportedError("nki.compiler.ncc_driver.CompiledKernel: building a NEFF needs the Neuron compiler, "
                               "which the nkitui emulator does not include")

    @classmethod
    def from_frontend(cls, result: object, options: CompileOptions | None = None) -> NoReturn:
        raise UnsupportedError("nki.compiler.ncc_driver.CompiledKernel.from_frontend: compiling MLIR to a NEFF needs "
                               "the Neuron compiler, which the nkitui emulator does not include")

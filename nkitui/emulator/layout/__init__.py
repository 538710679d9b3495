"""Thin aliases for the parts of the NKI package layout that test suites import but that only the
Neuron compiler can implement (docs/emulator.md, "Package layout").

`emulator.install()` imports this package, which registers:

| module | what the emulator provides |
|---|---|
| `nki.compiler.frontend` | `NKIFrontend`, `ParserFrontend`, `TracerFrontend`: constructible; `compile()` raises `UnsupportedError` (Python -> MLIR needs the compiler) |
| `nki.compiler.ncc_driver` | `CompileOptions` (a record of the options), `CompiledKernel.from_frontend()` raises `UnsupportedError` (MLIR -> NEFF) |
| `nki.compiler.backends` | an empty package (suites import it lazily, only to compile) |
| `neuronxcc.starfish.support.dtype` | `static_cast(array, dtype)`: the host-side cast also exported as `nl.static_cast` |

So a suite's harness imports cleanly, its simulation tests run on the emulator, and its
compile-only tests fail with a message that says they need the compiler (the peer-suite runner
classifies them "needs real hardware or the compiler").
"""

from __future__ import annotations

from nkitui.emulator.install import register_modules

register_modules({
    "nki.compiler.frontend": "nkitui.emulator.layout.frontend",
    "nki.compiler.ncc_driver": "nkitui.emulator.layout.ncc_driver",
    "nki.compiler.backends": None,
    "neuronxcc.starfish": None,
    "neuronxcc.starfish.support": None,
    "neuronxcc.starfish.support.dtype": "nkitui.emulator.layout.starfish_dtype",
})

"""The `nki` namespace (NKI 0.3 to 0.6) front end of the emulator. See docs/emulator-nki.md.

Importing this package registers its modules with `nkitui.emulator.install`, so that
`emulator.install()` makes `nki`, `nki.language`, `nki.isa`, `nki.isa.constants`, `nki.typing`,
`nki.compiler`, `nki.collectives`, `nki.dtype` and `nki.tensor` importable.
"""

from __future__ import annotations

from nkitui.emulator.install import register_modules

register_modules({
    "nki": "nkitui.emulator.newns.nki",
    "nki.language": "nkitui.emulator.newns.language",
    "nki.isa": "nkitui.emulator.newns.isa",
    "nki.isa.constants": "nkitui.emulator.newns.isa_constants",
    "nki.typing": "nkitui.emulator.newns.typing",
    "nki.compiler": "nkitui.emulator.newns.compiler",
    "nki.collectives": "nkitui.emulator.newns.collectives",
    "nki.dtype": "nkitui.emulator.newns.dtypes",
    "nki.tensor": "nkitui.emulator.newns.tracetime",
})

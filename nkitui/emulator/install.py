"""Put the emulator's front ends into `sys.modules` under the real Neuron module names.

`MODULES` maps each real name to the emulator module behind it. The legacy front end registers the
`neuronxcc` names here; the new-namespace front end (part 2) adds its `nki` names with
`register_modules()`. Packages that exist only to hold submodules get a synthetic module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Iterable

from nkitui.emulator.errors import InstallError

MODULES: dict[str, str | None] = {
    "neuronxcc": None,  # synthetic parent package
    "neuronxcc.nki": "nkitui.emulator.legacy.nki",
    "neuronxcc.nki.language": "nkitui.emulator.legacy.language",
    "neuronxcc.nki.isa": "nkitui.emulator.legacy.isa",
    "neuronxcc.nki.typing": "nkitui.emulator.legacy.typing",
    "neuronxcc.nki.compiler": "nkitui.emulator.legacy.compiler",
}
# top-level names whose real (AWS) packages make install() refuse unless force=True
GUARDED = ("neuronxcc", "nki")
# front-end packages imported by install() so that they can register their module names
FRONTEND_PACKAGES = ("nkitui.emulator.newns", "nkitui.emulator.layout")

_saved: dict[str, types.ModuleType | None] | None = None


def register_modules(mapping: dict[str, str | None]) -> None:
    """Add front-end modules (real name -> emulator module path, None for a synthetic package)."""
    MODULES.update(mapping)
    if _saved is not None:  # already installed: install the new names right away
        _install_names(list(mapping))


def _is_ours(mod: types.ModuleType) -> bool:
    return bool(getattr(mod, "__nkitui_emulator__", False))


def real_package(name: str) -> str | None:
    """Where a real (non-emulator) package `name` lives, or None. PyPI placeholders that raise
    ImportError on import count as absent."""
    mod = sys.modules.get(name)
    if mod is not None:
        return None if _is_ours(mod) else (getattr(mod, "__file__", None) or repr(mod))
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    try:
        mod = importlib.import_module(name)
    except ImportError:
        return None  # e.g. the PyPI placeholder `nki`, which refuses to import
    except Exception as e:  # a broken installation is still a real one
        return f"{spec.origin} (import failed: {e})"
    return getattr(mod, "__file__", None) or spec.origin or name


def installed() -> bool:
    return _saved is not None


def install(force: bool = False) -> None:
    """Make `neuronxcc.nki` (and its submodules) importable, backed by the emulator."""
    global _saved
    if _saved is not None:
        return
    if not force:
        for name in GUARDED:
            where = real_package(name)
            if where is not None:
                raise InstallError(f"a real Neuron package '{name}' is importable ({where}); the emulator will not "
                                   "shadow it. Use the real SDK, or call emulator.install(force=True) to use the "
                                   "emulator anyway")
    for package in FRONTEND_PACKAGES:  # registers its names through register_modules()
        importlib.import_module(package)
    _saved = {}
    _install_names(list(MODULES))


def _install_names(names: Iterable[str]) -> None:
    assert _saved is not None
    for name in sorted(names, key=lambda n: n.count(".")):
        if name not in _saved:
            _saved[name] = sys.modules.get(name)
        target = MODULES[name]
        if target is None:
            mod = types.ModuleType(name, f"{name} (nkitui emulator)")
            mod.__path__ = []
        else:
            mod = importlib.import_module(target)
        setattr(mod, "__nkitui_emulator__", True)  # noqa: B010  (a marker attribute ModuleType does not declare)
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, mod)


def uninstall() -> None:
    """Restore `sys.modules` as it was before `install()`."""
    global _saved
    if _saved is None:
        return
    for name, prev in _saved.items():
        if prev is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = prev
    _saved = None

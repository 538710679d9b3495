"""Which functions of the process's modules task code replaced (monkeypatching), seen from nkitui's side.

nkitui's own code in the kernel's process (the emulator's provenance, the outputs' transfer as .npy)
calls numpy, os, json and its own modules by attribute, at call time. Task code that assigns one
of those attributes (`np.save = forged`, reached through any alias) would rewrite the outputs after
they were checked. The static HACK-TAMPER rule flags the spelled-out forms; this catches every
form that leaves the replacement in place: the callables, classes and modules bound in the modules
on the outputs' path (nkitui, numpy, ml_dtypes, hashlib, io, os, json, ...) are recorded before task
code runs, and compared by identity after each launch and after its outputs are saved.

    patches = PatchWatch()          # before task code (after nkitui's imports)
    ...                             # the task's code runs
    changed = patches.changed()     # ["numpy.save", ...]: empty when nothing was replaced
"""

from __future__ import annotations

import sys
import types
from typing import Any


# the modules on the outputs' path from the launch to the evaluator (the provenance digest, the
# .npy transfer, the reply): others (the Neuron SDK's, torch's) may rebind their own functions as they
# initialise, which is no forgery
WATCHED = ("nkitui", "numpy", "ml_dtypes", "hashlib", "_hashlib", "io", "_io", "os", "posix", "posixpath", "json",
           "pathlib", "builtins", "codecs", "struct")


def _on_the_output_path(name: str) -> bool:
    return name.split(".", 1)[0] in WATCHED


def _watched(value: Any) -> bool:
    return callable(value) or isinstance(value, (type, types.ModuleType))


class PatchWatch:
    def __init__(self) -> None:
        self._modules: list[tuple[str, Any, dict[str, Any]]] = []
        for name, module in list(sys.modules.items()):
            if not _on_the_output_path(name):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            self._modules.append((name, namespace, {k: v for k, v in list(namespace.items()) if _watched(v)}))

    def changed(self, limit: int = 5) -> list[str]:
        """`module.name` of each recorded callable that is no longer the same object (or is gone)."""
        missing = object()
        found: list[str] = []
        for name, namespace, recorded in self._modules:
            for key, value in recorded.items():
                if namespace.get(key, missing) is not value:
                    found.append(f"{name}.{key}")
                    if len(found) >= limit:
                        return found
        return found

"""A second audit hook in the untrusted children: task code may not reach into the interpreter.

Forging a result means finding the objects that report it: walking frames (sys._getframe,
tb_frame, f_back after f_code), asking the garbage collector for every object (gc.get_objects),
calling C through ctypes, or tracing other code (sys.settrace). No kernel needs any of that, so
when the code asking is the task's own (directly, or through inspect/traceback/ctypes on its
behalf) the request raises PermissionError and is recorded; nkitui's own code (the emulator finds
the kernel's line with sys._getframe) and libraries acting for themselves are not affected.

Like every audit hook this sees Python-level operations only, and it cannot see everything (class
attributes can be replaced without an event); the static HACK-TAMPER rule reads the task's source
for the rest, and the verdict is computed in another process anyway (docs/executor.md).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from nkitui.executor.attribution import names_nkitui_file

# the events refused to the task's code: whoever stands between it and the event (inspect, traceback, ctypes,
# copy, functools, map, a finalizer, ...) acts on its behalf (nkitui.executor.attribution: the whole stack)
_REFUSED = frozenset({
    "sys._getframe", "sys._current_frames",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "sys.settrace", "sys.setprofile", "sys.addaudithook",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.addressof",
    "ctypes.call_function", "ctypes.string_at", "ctypes.wstring_at",
    "object.__getattr__",  # tb_frame, f_code, gi_frame, cr_frame, ...
    "object.__setattr__",  # __class__, __bases__, __name__ of classes
    # code made at run time under one of nkitui's file names (run with an nkitui module's globals it would pass
    # for nkitui's own frame, which vouches for what it asks): only when the name is nkitui's (hook)
    "compile", "code.__new__",
})
_NAMED_CODE = frozenset({"compile", "code.__new__"})
_MAX_RECORDED = 100
_key = object.__hash__  # identity like id(), without id()'s audit event (this hook runs on every event)
_local = threading.local()


class IntrospectionGuard:
    def __init__(self, task_root: str) -> None:
        from nkitui.executor.attribution import Attribution

        self.task_roots = tuple({os.path.join(task_root, ""), os.path.join(os.path.realpath(task_root), "")})
        self.attribution = Attribution(self.task_roots)
        self.refusals: list[dict[str, Any]] = []
        self.foreign_allowed: frozenset[int] = frozenset()  # C functions nkitui calls per instruction (addresses)

    def _is_nkitui(self, g: dict[str, Any]) -> bool:
        return self.attribution.is_nkitui(g)

    def culprit(self, event: str, frame: Any) -> tuple[str, int] | None:
        """(task file, line) when the task's code asked for `event`, directly or through any library frames
        (the whole stack); None when nkitui or a library on the allowlist asked for itself."""
        return self.attribution.task_location(frame, event)

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in _REFUSED:
            return
        if event == "ctypes.call_function" and args and args[0] in self.foreign_allowed:
            return  # the emulator's mprotect (devmem): reached only through nkitui's internals, as its callers are
        if getattr(_local, "busy", False):
            return
        if event == "object.__getattr__" and (len(args) < 2 or args[1] in ("__name__",)):
            return
        if event in _NAMED_CODE and not (len(args) >= 2 and names_nkitui_file(args[1])):
            return  # code under any other name: the integrity check reads dynamic code
        _local.busy = True
        try:
            try:
                frame = sys._getframe(1)
            except ValueError:  # no Python frame at all: the interpreter calling what the task registered at exit
                frame = None
            # fast path: nkitui's own code asking for itself (the emulator finds the kernel's line, opens
            # device memory with ctypes); told by the module's globals, which raise no audit event
            where = None if frame is not None and self.attribution.is_nkitui_frame(frame) else self.culprit(event, frame)
        finally:
            _local.busy = False
        if where is None:
            return
        detail = event if event != "object.__getattr__" and event != "object.__setattr__" else f"{event} {args[1]!r}"
        if event in _NAMED_CODE:
            detail = f"{event} under nkitui's file name {str(args[1])[:120]!r}"
        if len(self.refusals) < _MAX_RECORDED:
            self.refusals.append({"action": "introspection", "target": detail, "detail": event,
                                  "file": where[0], "line": where[1]})
        raise PermissionError(f"nkitui sandbox: {detail} refused: task code may not reach into the interpreter")


_installed: IntrospectionGuard | None = None


def install(task_root: str) -> IntrospectionGuard:
    """Add the hook (once; audit hooks cannot be removed). Call after nkitui's own imports, before task code."""
    global _installed
    if _installed is None:
        _installed = IntrospectionGuard(task_root)
        sys.addaudithook(_installed.hook)
    return _installed


def refusals() -> list[dict[str, Any]]:
    return list(_installed.refusals) if _installed is not None else []

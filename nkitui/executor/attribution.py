"""Who asked for an audited operation: the task's code, or not (the in-process guards' caller check).

Walks the whole stack from the frame that raised the event outwards. The first frame that is the
task's own code (a file of the task's scratch copy) makes the request the task's, however many library
frames lie between (`copy.deepcopy` of an object whose `__reduce_ex__` names `gc.get_objects`, `map`,
`sorted(key=...)`, `functools.partial`, a finalizer, a context manager: they all call on the task's
behalf). The first frame that is nkitui's own (told by its module's globals, the very dict of a module
imported under `nkitui.`; a file name can be forged with `compile`, a module's globals cannot without
`import nkitui`, which the integrity check fails) vouches for it: nkitui asked, for its own purposes.

A library module's body run by the import system (a task's `import asyncio` runs asyncio's own code, which
reads `__code__` and calls `sys._getframe` for itself) vouches as nkitui's frames do (`_imported`).

A short allowlist covers libraries acting for themselves on task-defined code when the task defines a
class or logs: `collections.namedtuple`, `enum`'s functional API, `typing` (`TypeVar`, `NamedTuple`),
`dataclasses`, `logging`'s caller lookup and `inspect.signature`. An entry is a (event, code object) pair,
taken from the modules as they were before any task code ran, and it counts only when that very code is
the *innermost* frame, the one that made the request: each of those functions uses what it asked for
itself (a module's name, a new class's attributes, a signature) and hands none of it back, so calling
them through a library on the task's behalf gains the task nothing (`logging.currentframe`, which does
return a frame, counts only when `Logger.findCaller` called it, and findCaller returns strings).
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType
from typing import Any

_key = object.__hash__  # identity like id(), without id()'s audit event (the hooks run on every event)


def _self_acting() -> tuple[dict[str, frozenset[int]], CodeType | None, CodeType | None]:
    """The allowlist, built from the standard library as imported by nkitui (before task code)."""
    import collections
    import dataclasses
    import enum
    import inspect
    import logging
    import typing

    def code(fn: Any) -> CodeType | None:
        return getattr(fn, "__code__", None)

    getframe = {code(collections.namedtuple), code(getattr(enum.EnumType, "_create_", None)),
                code(getattr(typing, "_caller", None))}
    getattr_ = {code(getattr(inspect, "_signature_from_function", None)), code(getattr(logging, "_is_internal_frame", None)),
                code(logging.Logger.findCaller)}
    setattr_ = {code(collections.namedtuple), code(getattr(dataclasses, "_process_class", None)),
                code(getattr(getattr(typing, "NamedTupleMeta", None), "__new__", None))}
    table = {"sys._getframe": getframe, "object.__getattr__": getattr_, "object.__setattr__": setattr_}
    # by identity (a code object's own hash reads its whole contents: too slow for a look-up per frame)
    clean = {event: frozenset(_key(c) for c in codes if isinstance(c, CodeType)) for event, codes in table.items()}
    return clean, code(getattr(logging, "currentframe", None)), code(logging.Logger.findCaller)


SELF_ACTING, _LOGGING_CURRENTFRAME, _LOGGING_FINDCALLER = _self_acting()


def _callback_runners() -> frozenset[int]:
    """Library frames that call back what someone registered earlier (a finalizer, an exit stack's callback):
    whoever runs them (nkitui's code that happened to trigger a collection, the interpreter at exit) is not the
    requester, so they end the walk as a stack with no vouching frame does."""
    import contextlib
    import weakref

    codes = [weakref.finalize.__call__, getattr(weakref.finalize, "_exitfunc", None), contextlib.ExitStack.__exit__,
             contextlib.AsyncExitStack.__aexit__, getattr(contextlib._BaseExitStack, "_create_cb_wrapper", None)]
    found = {getattr(fn, "__code__", None) for fn in codes}
    wrapper = getattr(contextlib._BaseExitStack, "_create_cb_wrapper", None)  # its nested _exit_wrapper
    for const in getattr(getattr(wrapper, "__code__", None), "co_consts", ()):
        if isinstance(const, CodeType):
            found.add(const)
    return frozenset(_key(c) for c in found if isinstance(c, CodeType))


CALLBACK_RUNNERS = _callback_runners()
UNVOUCHED = "(no frame of the task's or nkitui's on the stack: a callback it registered"


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the nkitui package
NKITUI_FILES = tuple({os.path.join(_PACKAGE, ""), os.path.join(os.path.realpath(_PACKAGE), "")})


def names_nkitui_file(filename: Any) -> bool:
    """Does `filename` (of code being compiled or made) claim to be one of nkitui's own files?"""
    if isinstance(filename, bytes):
        filename = os.fsdecode(filename)
    return isinstance(filename, str) and (filename.startswith(NKITUI_FILES)
                                          or os.path.realpath(filename).startswith(NKITUI_FILES))


class Attribution:
    """The caller check for one process: the task's roots (its scratch copy, as given and resolved)."""

    __slots__ = ("task_roots", "_nkitui_globals")

    def __init__(self, task_roots: tuple[str, ...]) -> None:
        self.task_roots = tuple(r for r in task_roots if r)
        self._nkitui_globals: set[int] = set()  # identities of nkitui modules' globals dicts seen so far

    def is_nkitui_frame(self, frame: FrameType) -> bool:
        """A frame of nkitui's own code: an nkitui module's globals *and* code from nkitui's files (code made at run
        time with an nkitui file name is refused to the task: IntrospectionGuard, events `compile`, `code.__new__`)."""
        return self.is_nkitui(frame.f_globals) and frame.f_code.co_filename.startswith(NKITUI_FILES)

    def is_nkitui(self, g: Any) -> bool:
        """Are `g` the globals of one of nkitui's modules (the very dict of the module imported under that name)?"""
        if _key(g) in self._nkitui_globals:
            return True
        if type(g) is not dict:
            return False
        globals_: dict[str, Any] = g
        name = globals_.get("__name__")
        if name == "__main__":  # `python -m nkitui.executor.worker`: its module runs as __main__
            main = sys.modules.get("__main__")
            spec = globals_.get("__spec__") if getattr(main, "__dict__", None) is globals_ else None
            name = getattr(spec, "name", None)
            if type(name) is str and name.startswith("nkitui."):
                self._nkitui_globals.add(_key(g))
                return True
            return False
        if type(name) is str and name.startswith("nkitui.") and getattr(sys.modules.get(name), "__dict__", None) is g:
            self._nkitui_globals.add(_key(g))
            return True
        return False

    @staticmethod
    def _imported(frame: FrameType) -> bool:
        """Is `frame` the body of a library module being imported (by the import system, under the name it is
        filed by in sys.modules)? Its code is the library's own, run for itself, whoever imported it: a module
        body the task could steer would be one it made (a `<string>` or other made-up file name between it and
        the request: `made` above), one run by runpy (`-m`-style mains), or one loaded by hand from a spec
        (not the module filed under its name), and none of those is taken for an import."""
        caller = frame.f_back
        if caller is None or caller.f_code.co_name != "_call_with_frames_removed" or \
                not caller.f_code.co_filename.startswith("<frozen importlib"):
            return False
        g = frame.f_globals
        name = g.get("__name__")
        return type(name) is str and getattr(sys.modules.get(name), "__dict__", None) is g

    def self_acting(self, event: str, frame: FrameType) -> bool:
        codes = SELF_ACTING.get(event)
        if not codes:
            return False
        code = frame.f_code
        if _key(code) in codes:
            return True
        # logging.currentframe returns a frame: only for Logger.findCaller, which returns strings
        return (event == "sys._getframe" and code is _LOGGING_CURRENTFRAME and frame.f_back is not None
                and frame.f_back.f_code is _LOGGING_FINDCALLER)

    def task_location(self, frame: FrameType | None, event: str = "", vouch: bool = True) -> tuple[str, int] | None:
        """(task-relative file, line) of the task's frame that asked for `event` raised in `frame`; None when an
        nkitui frame stands between (with `vouch`) or a library on the allowlist made the request for itself.

        A stack with neither (the interpreter running exit handlers, a finalizer or an exit stack's callback,
        which run what was registered earlier, whoever triggers them) is unvouched: in a process that runs task
        code every frame of nkitui's own work sits on `worker.main`, so such a request is the task's too, told
        by the library frame that ran it (UNVOUCHED, with its file name and line)."""
        if not self.task_roots:
            return None
        if frame is None:
            return (UNVOUCHED + " ran it at exit)", 0) if vouch else None
        if event and self.self_acting(event, frame):
            return None
        roots, runners, known = self.task_roots, CALLBACK_RUNNERS, self._nkitui_globals
        last, runner, made = frame, None, False
        while frame is not None:
            code = frame.f_code
            filename = code.co_filename
            if filename.startswith(roots):
                root = next(r for r in roots if filename.startswith(r))
                return filename[len(root):], frame.f_lineno
            if runner is None and _key(code) in runners:  # what runs below it did not ask: nobody vouches any more
                runner = frame
            elif vouch and runner is None:
                g = frame.f_globals
                if _key(g) in known or (type(name := g.get("__name__")) is str and name[:7] in ("nkitui.", "__main_")
                                        and self.is_nkitui(g)):
                    if filename.startswith(NKITUI_FILES):  # nkitui's globals and nkitui's code
                        return None
                made = made or (filename[:1] == "<" and not filename.startswith("<frozen "))
                if not made and code.co_name == "<module>" and self._imported(frame):
                    return None
            last = frame
            frame = frame.f_back
        if runner is not None:  # nkitui registers no callback that asks for these, with or without vouching
            return f"{UNVOUCHED}: {runner.f_code.co_filename.rsplit('/', 1)[-1]} {runner.f_code.co_name})", \
                runner.f_lineno
        if not vouch:  # the question was only "is a task frame on the stack"
            return None
        return f"{UNVOUCHED}: {last.f_code.co_filename.rsplit('/', 1)[-1]} {last.f_code.co_name})", last.f_lineno

"""`neuronxcc.nki.compiler` (ncc): decorators and allocation helpers. None of them changes what
the emulator computes; they are accepted (with or without arguments) and recorded on the kernel."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from nkitui.emulator.legacy import language as _nl

_F = TypeVar("_F")


def _option_decorator(name: str) -> Callable[..., Any]:
    # `@ncc.x`, `@ncc.x()` and `@ncc.x(option=...)`: the function itself, or a decorator that records the
    # options on it (Any: which one depends on how it is called)
    def decorator(func: object = None, *args: object, **kwargs: object) -> Any:
        def apply(f: _F) -> _F:
            opts = getattr(f, "compiler_options", None)
            if isinstance(opts, dict):
                opts[name] = kwargs or True
            else:
                try:
                    f.__nki_compiler_options__ = {  # type: ignore[attr-defined]  # set on functions; others raise (below)
                        **getattr(f, "__nki_compiler_options__", {}), name: kwargs or True}
                except (AttributeError, TypeError):
                    pass
            return f
        if callable(func) and not args and not kwargs:
            return apply(func)
        return apply
    decorator.__name__ = name
    return decorator


skip_middle_end_transformations = _option_decorator("skip_middle_end_transformations")
enable_stack_allocator = _option_decorator("enable_stack_allocator")
force_auto_alloc = _option_decorator("force_auto_alloc")


class _Allocator:
    """`ncc.sbuf` / `ncc.psum`: direct-allocation helpers. The emulator gives every tensor its own
    storage; `alloc` / `mod_alloc` buffers are the kernel's own placement and are not counted against
    SBUF/PSUM capacity (`auto_alloc` is automatic allocation)."""

    def __init__(self, memory: str) -> None:
        self.memory = memory

    def _buf(self, kind: str, **options: object) -> _nl.Buffer:
        return _nl.Buffer(self.memory, self.memory, "", {"allocator": kind, **options})

    def auto_alloc(self) -> _nl.Buffer:
        return _nl.sbuf if self.memory == "sbuf" else _nl.psum

    def alloc(self, func: object = None, **kwargs: object) -> _nl.Buffer:
        return self._buf("alloc", func=getattr(func, "__name__", repr(func)))

    def mod_alloc(self, base_addr: int = 0, *, base_partition: int = 0, num_par_tiles: Iterable[int] = (),
                  num_free_tiles: Iterable[int] = (), **kwargs: object) -> _nl.Buffer:
        return self._buf("mod_alloc", base_addr=base_addr, num_free_tiles=tuple(num_free_tiles))


sbuf = _Allocator("sbuf")
psum = _Allocator("psum")


def multi_buffer(n: int) -> int:
    """Hint for the number of buffers of a loop-allocated tensor (no effect on results)."""
    return int(n)


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """Keep instruction order (the emulator always runs in program order)."""
    yield

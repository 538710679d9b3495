"""The cyclic garbage collector paused around work that builds many small acyclic objects.

Packing or unpacking a trace, or costing one, allocates hundreds of thousands of lists, tuples and
records without a reference cycle among them; the collections their allocation triggers find nothing
to free but re-walk everything built so far. Reference counting still frees everything as usual."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block; restore it as it was, even when the block raises."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

"""Where the emulator keeps its ambient state: context variables, one per kind of state.

* the running kernel launch (`runtime.current()`),
* the open `emulator.trace()` blocks (innermost last),
* the `emulator.options()` layers above the process default (`emulator.configure()`),
* inside multi-rank launches and all-reduce SPMD launches, the rank or program the code runs as.

Context variables (PEP 567) give every thread its own state and every asyncio task a copy of its
creator's, so two audits running kernels concurrently in threads or tasks never see each other's
launch, trace or options. Threads the emulator starts for one launch (SPMD programs, logical
cores, ranks) run in a copy of the launching context (`start_thread`), so they see the launch's
options and trace as the launching code does.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

# The current kernel launch (a runtime.Run), None outside a kernel.
current_run: ContextVar[Any] = ContextVar("nkitui_emulator_run", default=None)
# Open emulator.trace() blocks, innermost last (immutable: a push or pop makes a new tuple).
open_traces: ContextVar[tuple] = ContextVar("nkitui_emulator_traces", default=())
# emulator.options() layers above the process default, innermost last.
option_layers: ContextVar[tuple] = ContextVar("nkitui_emulator_options", default=())
# The rank a multi-rank launch runs this code as (ranks.RankContext), None in a world of one.
rank_context: ContextVar[Any] = ContextVar("nkitui_emulator_rank", default=None)
# (scheduler, program index) of an SPMD program taking turns for all-reduce (legacy/spmd.py).
spmd_program: ContextVar[tuple | None] = ContextVar("nkitui_emulator_spmd_program", default=None)


# Who starts the emulator's threads: None is threading itself. A process that refuses threads to task
# code (nkitui.executor.confine.threads) sets its own starter, which starts them for the emulator only.
thread_starter: Callable[[Callable[..., Any], tuple, str, contextvars.Context], threading.Thread] | None = None


def start_thread(target: Callable[..., Any], args: tuple = (), *, name: str) -> threading.Thread:
    """Start a daemon thread running `target(*args)` in a copy of the calling context (each thread
    gets its own copy: a context can be entered by one thread at a time)."""
    ctx = contextvars.copy_context()
    if thread_starter is not None:
        return thread_starter(target, args, name, ctx)
    thread = threading.Thread(target=ctx.run, args=(target, *args), name=name, daemon=True)
    thread.start()
    return thread

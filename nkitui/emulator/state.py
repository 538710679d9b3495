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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nkitui.emulator.config import Options
    from nkitui.emulator.ranks import RankContext
    from nkitui.emulator.runtime import Run
    from nkitui.emulator.trace import Trace

# The current kernel launch, None outside a kernel.
current_run: ContextVar[Run | None] = ContextVar("nkitui_emulator_run", default=None)
# Open emulator.trace() blocks, innermost last (immutable: a push or pop makes a new tuple).
open_traces: ContextVar[tuple[Trace, ...]] = ContextVar("nkitui_emulator_traces", default=())
# emulator.options() layers above the process default, innermost last.
option_layers: ContextVar[tuple[Options, ...]] = ContextVar("nkitui_emulator_options", default=())
# The rank a multi-rank launch runs this code as, None in a world of one.
rank_context: ContextVar[RankContext | None] = ContextVar("nkitui_emulator_rank", default=None)
# (scheduler, program index) of an SPMD program taking turns for all-reduce. The scheduler is legacy/spmd.py's
# TurnTaking, typed Any here because the engine core may not import a front end (import-linter contract).
spmd_program: ContextVar[tuple[Any, int] | None] = ContextVar("nkitui_emulator_spmd_program", default=None)


# Who starts the emulator's threads: None is threading itself. A process that refuses threads to task
# code (nkitui.executor.confine.threads) sets its own starter, which starts them for the emulator only.
ThreadStarter = Callable[[Callable[..., Any], tuple[Any, ...], str, contextvars.Context], threading.Thread]
thread_starter: ThreadStarter | None = None


def start_thread(target: Callable[..., Any], args: tuple[Any, ...] = (), *, name: str) -> threading.Thread:
    """Start a daemon thread running `target(*args)` in a copy of the calling context (each thread
    gets its own copy: a context can be entered by one thread at a time)."""
    ctx = contextvars.copy_context()
    threads[:] = [t for t in threads if t.ident is None or t.is_alive()]  # the finished ones go
    if thread_starter is not None:
        started = thread_starter(target, args, name, ctx)
        threads.append(started)
        return started
    thread = threading.Thread(target=ctx.run, args=(target, *args), name=name, daemon=True)
    threads.append(thread)
    thread.start()
    return thread


# Threads the emulator started (devmem tells them from threads started by task code); pruned by devmem.
threads: list[threading.Thread] = []

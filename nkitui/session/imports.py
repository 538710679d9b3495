"""One lock around the imports that worker threads make.

The session's slow work runs in worker threads, and each imports the domain packages it needs when
it first needs them, so the app starts fast. Two threads importing modules of one package at the
same time can trip Python's import machinery (a package whose __init__ imports its submodules,
imported from two threads: `_DeadlockError: deadlock detected by _ModuleLock`), which failed the
backend probe or the speed of light at random. Every lazy import in a worker thread takes this lock,
so only one imports at a time; an import that is already done costs nothing under it.

    with WORKER_IMPORTS:
        from nkitui.executor.backends.detect import probe_isolated
"""

from __future__ import annotations

import threading

WORKER_IMPORTS = threading.RLock()

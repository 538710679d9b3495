"""One lock around the imports that the app's worker threads make.

Workers import the domain packages when they first need them, so start-up stays fast. Two threads
importing modules of one package at the same time can trip Python's import machinery (a package
whose __init__ imports its submodules, imported from two threads: `_DeadlockError: deadlock
detected by _ModuleLock`), which failed the backend probe or the speed of light at random. Every
worker takes this lock around its imports, so only one imports at a time; an import that is already
done costs nothing under it.

    with WORKER_IMPORTS:
        from nkitui.executor.backends.detect import probe_isolated
"""

from __future__ import annotations

import threading

WORKER_IMPORTS = threading.RLock()

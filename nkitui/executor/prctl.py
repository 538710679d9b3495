"""Two Linux process controls the executor needs before confinement proper (stdlib + ctypes only).

    die_with_parent(pid)   PR_SET_PDEATHSIG: SIGKILL this process when its parent dies (and exit now
                           if the parent is already gone), so no untrusted child outlives its evaluator
    not_dumpable()         PR_SET_DUMPABLE 0: /proc/<pid>/{fd,mem,environ} of this process become
                           root's, so a same-user process (an untrusted child) cannot open its pipes
                           or read its memory

Both return False where the kernel (or the platform) does not offer them; callers record that.
nkitui.executor.confine, where present, does the full confinement (seccomp, Landlock); these two
stay because they are needed in processes that are not confined (the evaluator) or before the
job is read.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4

_libc = None


def _prctl(option: int, arg: int) -> bool:
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        return _libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int) -> bool:
    """SIGKILL on the parent's death. Exits at once (status 3) when the parent already died, since
    the signal would then never come."""
    ok = _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if ok and os.getppid() != parent_pid:
        os._exit(3)
    return ok


def not_dumpable() -> bool:
    return _prctl(PR_SET_DUMPABLE, 0)

"""Defence in depth inside the worker: refuse writes outside the scratch folder, refuse starting
processes, and note attempts to read credentials.

The main protections are elsewhere: the kernel runs on a *copy* of the task in a scratch folder,
never learns the repository's path (not in the environment, the cwd or the job file), and gets an
environment scrubbed of credentials (env.py). This module adds a Python audit hook (PEP 578) that
raises PermissionError when Python code opens a file for writing, removes, renames, links or
chmods a path outside the allowed roots, or starts a process while that is not allowed.

Honest limits: audit hooks see Python-level operations only. A kernel that calls libc through
ctypes, or a C extension that writes files itself, is not stopped by this hook; nor is reading
files (a kernel can read anything the user can). Run untrusted tasks in a container or VM if that
matters. Every refusal and every credential lookup is recorded and reported as a finding.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

# audit event -> indices of the path arguments it modifies
_PATH_EVENTS: dict[str, tuple[int, ...]] = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.lchmod": (0,), "os.setxattr": (0,),
    "os.removexattr": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.rmtree": (0,),
    "shutil.move": (0, 1), "shutil.copymode": (1,), "shutil.copystat": (1,),
}
_PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.startfile", "pty.spawn",
})
_ALWAYS_WRITABLE = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty")


@dataclass
class Violation:
    action: str  # "write" | "process" | "credential"
    target: str  # path, command or variable name
    detail: str = ""
    file: str | None = None  # the innermost line of the task's own code on the stack, task-relative
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "target": self.target, "detail": self.detail, "file": self.file, "line": self.line}


@dataclass
class Guard:
    """State of the audit hook. `writable` are real paths under which writing is allowed."""

    writable: list[str] = field(default_factory=list)
    allow_processes: bool = False
    task_root: str = ""  # real path of the workspace copy: credential lookups are recorded from its code
    violations: list[Violation] = field(default_factory=list)
    max_recorded: int = 100

    def allow_writes_under(self, path: str) -> None:
        real = os.path.realpath(path)
        if real not in self.writable:
            self.writable.append(real)

    def record(self, v: Violation) -> None:
        if len(self.violations) < self.max_recorded:
            if v.file is None:
                v.file, v.line = _task_location(self.task_root)
            self.violations.append(v)

    def is_writable(self, path: Any) -> bool:
        if isinstance(path, int):  # an already-open descriptor
            return True
        try:
            p = os.fsdecode(path)
        except TypeError:
            return True
        real = os.path.realpath(p)
        if real in _ALWAYS_WRITABLE or real.startswith("/proc/self/fd/") or real.startswith("/dev/fd/"):
            return True
        return any(real == root or real.startswith(root + os.sep) for root in self.writable)

    def refuse_write(self, event: str, path: Any) -> None:
        shown = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
        self.record(Violation("write", shown, event))
        raise PermissionError(
            f"nkitui sandbox: {event} on {shown!r} refused: a kernel may only write inside its scratch "
            "folder (its current directory)"
        )

    def hook(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(flags, int) and flags & _WRITE_FLAGS) or (
                isinstance(mode, str) and any(c in mode for c in "wax+")
            )
            if writing and path is not None and not self.is_writable(path):
                self.refuse_write("open for writing", path)
            return
        indices = _PATH_EVENTS.get(event)
        if indices is not None:
            for i in indices:
                if i < len(args) and args[i] is not None and not self.is_writable(args[i]):
                    self.refuse_write(event, args[i])
            return
        if event in _PROCESS_EVENTS and not self.allow_processes:
            target = " ".join(str(a) for a in args[:2] if a not in (None, "", (), []))[:200]
            self.record(Violation("process", target, event))
            raise PermissionError(
                f"nkitui sandbox: {event} refused: kernels may not start processes on this backend"
            )


_installed: Guard | None = None


def install_guard(writable_roots: list[str], allow_processes: bool, task_root: str = "") -> Guard:
    """Install the audit hook (once per process; hooks cannot be removed) and watch os.environ."""
    global _installed
    if _installed is not None:
        return _installed
    guard = Guard(allow_processes=allow_processes, task_root=task_root)
    for root in writable_roots:
        guard.allow_writes_under(root)
    sys.addaudithook(guard.hook)
    _watch_environ(guard)
    _installed = guard
    return guard


def current_guard() -> Guard | None:
    return _installed


def _called_from_task(root: str, depth: int = 12) -> bool:
    """Is code from the task's files (the workspace copy) on the last `depth` frames of the stack?"""
    if not root:
        return False
    frame = sys._getframe(2)
    prefixes = (root + os.sep, os.path.realpath(root) + os.sep)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith(prefixes):
            return True
        frame = frame.f_back
    return False


def _task_location(root: str) -> tuple[str | None, int | None]:
    """(task-relative file, line) of the innermost frame of the task's own code on the stack."""
    if not root:
        return None, None
    prefixes = (root + os.sep, os.path.realpath(root) + os.sep)
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        for prefix in prefixes:
            if name.startswith(prefix):
                return name[len(prefix):], frame.f_lineno
        frame = frame.f_back
    return None, None


def _watch_environ(guard: Guard) -> None:
    """Record lookups of credential-like variables by task code (they were scrubbed, so the
    lookups find nothing). Lookups by nkitui or the SDK's own code are not recorded."""
    from nkitui.executor.env import is_denied

    base = type(os.environ)

    def note(key: object) -> None:
        if isinstance(key, str) and is_denied(key) and _called_from_task(guard.task_root):
            guard.record(Violation("credential", key, "environment lookup"))

    class WatchedEnviron(base):  # type: ignore[misc, valid-type]
        def __getitem__(self, key):  # noqa: ANN001
            note(key)
            return base.__getitem__(self, key)

        def __contains__(self, key):  # noqa: ANN001
            note(key)
            return base.__contains__(self, key)

    os.environ.__class__ = WatchedEnviron

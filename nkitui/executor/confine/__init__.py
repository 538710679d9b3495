"""OS confinement of every process that runs task code (kernels, references, `nkitui emu run`).

The parent (nkitui) and the child (the untrusted process) each do their half:

    parent                                            child, before any task code runs
    ──────                                            ──────────────────────────────────
    harden_parent(): not dumpable, so a same-user     enter(policy):
      process cannot read /proc/<nkitui>/environ,       parent-death SIGKILL re-checked (race with
      cwd, mem                                            a parent that died during the spawn)
    spawn(argv, policy) or Popen(**popen_options):     no_new_privs
      new session (its own process group),            Landlock: read the interpreter, its libraries,
      parent-death SIGKILL, no core files,               site-packages and the scratch copy; write
      environment without secrets, HOME and TMPDIR       only the scratch folder; no TCP; signals and
      inside the scratch folder                          abstract sockets stay inside (ABI 6)
    the reaper: kills the process group and removes   capabilities dropped (when run as root)
      the scratch folder if nkitui dies first         seccomp: no exec, no processes (threads stay),
    observe(pid): Seccomp/NoNewPrivs from /proc          no sockets, no ptrace, signals to itself only,
      (what the parent checks, not what the child        no io_uring/bpf/userfaultfd/keyctl/mount ...
      claims)                                          -> ConfinementReport (what is active, what is
                                                         degraded and why)

Every layer degrades with a reason instead of failing (a kernel without Landlock, a foreign
architecture); the report says which. Stdlib only (ctypes): the worker imports it before numpy.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

PARENT_ENV = "NKITUI_CONFINE_PARENT"  # the parent's pid, for enter()'s parent-death race check


@dataclass(frozen=True)
class ConfinementPolicy:
    scratch: Path  # the only writable tree; HOME and TMPDIR of the child are inside it
    readable: tuple[Path, ...] = ()  # extra read-only roots beyond the interpreter/site-packages/scratch
    network: bool = False
    processes: bool = False  # may the child exec and start processes (SDK backends: compiler, profiler)


@dataclass(frozen=True)
class ConfinementReport:
    active: tuple[str, ...]  # e.g. ("seccomp", "landlock", "no network", "new session")
    degraded: tuple[str, ...] = ()  # e.g. ("landlock unavailable on kernel 5.4",)
    details: tuple[str, ...] = field(default=(), compare=False)  # e.g. ("landlock ABI 7",)
    enter_ms: float | None = field(default=None, compare=False)

    def summary(self) -> str:
        """'sandbox: seccomp, landlock, no network, new session', 'degraded: landlock unavailable on
        kernel 5.4', or both joined with '; '."""
        parts = []
        if self.active:
            parts.append("sandbox: " + ", ".join(self.active))
        if self.degraded:
            parts.append("degraded: " + "; ".join(self.degraded))
        return "; ".join(parts) if parts else "sandbox: none"

    def to_dict(self) -> dict[str, Any]:
        return {"active": list(self.active), "degraded": list(self.degraded), "details": list(self.details),
                "enter_ms": self.enter_ms, "summary": self.summary()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ConfinementReport":
        def strings(key: str) -> tuple[str, ...]:
            value = d.get(key) or ()
            return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()

        if not isinstance(d, Mapping):  # a child's account of itself: anything else is no account
            d = {}
        ms = d.get("enter_ms")
        enter_ms: float | None = None
        if isinstance(ms, float) or (isinstance(ms, int) and not isinstance(ms, bool) and abs(ms) < 2**53):
            enter_ms = float(ms)
        return cls(strings("active"), strings("degraded"), strings("details"), enter_ms)


# -- parent side --------------------------------------------------------------------------------

_hardened = False


def harden_parent() -> None:
    """Once, at nkitui's start: make nkitui not dumpable, so no other process of the same user (a
    kernel that escaped every other layer, or anything else) can read /proc/<nkitui>/environ, cwd,
    fd or mem, or attach a debugger; no core file can hold its secrets either. Linux only; a no-op
    elsewhere. Children get their own dumpable flag back at exec."""
    global _hardened
    if _hardened or not sys.platform.startswith("linux"):
        return
    from nkitui.executor.confine import libc

    try:
        libc.prctl(libc.PR_SET_DUMPABLE, 0)
        _hardened = True
    except OSError:
        pass


def child_env(policy: ConfinementPolicy, *, extra: Mapping[str, str] | None = None,
              python_path: Sequence[str] | None = None, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the allowlist of env.py (no credentials), HOME and TMPDIR inside
    the scratch folder, no bytecode writes, and the parent's pid for enter()'s race check."""
    from nkitui.executor.env import scrubbed_env

    env = scrubbed_env(source, scratch=Path(policy.scratch), extra=extra, python_path=list(python_path or []))
    env[PARENT_ENV] = str(os.getpid())
    return env


def _preexec(parent_pid: int, prctl: Callable[..., int], setrlimit: Callable[[int, tuple[int, int]], None],
             rlimit_core: int) -> None:
    """In the forked child, before exec: die with the spawning thread's process, no core files.

    Runs between fork and exec in a copy of a process that has other threads (the spawner's callers,
    the runs' reader and waiter threads, pytest's): a lock one of them held at the fork stays held
    here for good. So it calls only what was resolved before the fork and imports nothing: an import
    takes the import machinery's locks (and dlopen's, for an extension module such as `resource`),
    and a child stuck here never execs, which leaves the parent's Popen waiting forever for the
    exec to be reported."""
    prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() != parent_pid:  # the parent died between fork and prctl
        os._exit(125)
    setrlimit(rlimit_core, (0, 0))


def popen_options(policy: ConfinementPolicy, *, extra_env: Mapping[str, str] | None = None,
                  python_path: Sequence[str] | None = None) -> dict[str, Any]:
    """Keyword arguments for subprocess.Popen that start a child ready for enter(): its own session
    (a process group that can always be killed whole), parent-death SIGKILL, no core files, the
    scrubbed environment. The parent-death signal belongs to the *thread* that forks: call Popen from
    a thread that lives as long as the run, or use spawn(), which forks on nkitui's spawner thread."""
    scratch = Path(policy.scratch)
    for sub in ("home", "tmp"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {
        "start_new_session": True,
        "close_fds": True,
        "env": child_env(policy, extra=extra_env, python_path=python_path),
    }
    if sys.platform.startswith("linux"):
        from nkitui.executor.confine import libc

        import resource

        _import_fork_handlers()
        prctl = libc.libc().prctl  # resolved before the fork: the child only calls what it is given
        pid, setrlimit, rlimit_core = os.getpid(), resource.setrlimit, resource.RLIMIT_CORE
        options["preexec_fn"] = lambda: _preexec(pid, prctl, setrlimit, rlimit_core)
    return options


SPAWN_TIMEOUT_S = 60.0  # a fork and exec takes milliseconds; seconds on a machine loaded many times over


def _import_fork_handlers() -> None:
    """Import the standard modules that register a lock to take before a fork and release after it
    (os.register_at_fork). A pre-exec step makes Python run those handlers; a module imported by
    another thread while the fork waits for the import lock registered its release after its
    acquire had been skipped, and the parent printed `Exception ignored in: <function _releaseLock>`
    on its stderr (the width test of `nkitui check` read it there). Imported here first, on the
    caller's thread, their handlers are in place (or waited for) before any fork."""
    import concurrent.futures.thread  # noqa: F401 - for its at-fork handlers only
    import logging  # noqa: F401 - for its at-fork handlers only


class _SpawnJob:
    __slots__ = ("fn", "what", "box", "done", "abandoned")

    def __init__(self, fn: Callable[[], Any], what: str) -> None:
        self.fn, self.what = fn, what
        self.box: list[tuple[bool, Any]] = []
        self.done = threading.Event()
        self.abandoned = False


class _Spawner:
    """One long-lived thread that forks every confined child, so that the children's parent-death
    signal fires when nkitui's process ends, not when the (perhaps short-lived) caller thread does.

    The caller waits SPAWN_TIMEOUT_S at most: a child that never reaches its exec (it inherited a
    lock some other thread held at the fork) leaves Popen waiting for it for good, and with it every
    caller. Past the deadline the caller gets a TimeoutError that names what did not start (an
    OSError: the runner reports it as a run that could not start), the stuck thread is left behind,
    a new one serves the next callers, and a child the stuck thread starts after all is killed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        import queue

        self._queue: queue.SimpleQueue[_SpawnJob] = queue.SimpleQueue()

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            try:
                result: tuple[bool, Any] = (True, job.fn())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                result = (False, exc)
            with self._lock:
                abandoned = job.abandoned
                if not abandoned:
                    job.box.append(result)
            job.done.set()
            if abandoned:  # its caller gave up waiting: nobody will watch or reap what it started
                _discard(result)
            elif threading.current_thread() is not self._thread:
                return  # replaced while it was stuck: the new thread serves the queue

    def call(self, fn: Callable[[], Any], what: str = "a child process", timeout: float = SPAWN_TIMEOUT_S) -> Any:
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="nkitui-spawner", daemon=True)
                self._thread.start()
        job = _SpawnJob(fn, what)
        self._queue.put(job)
        if not job.done.wait(timeout):
            with self._lock:
                if not job.box:
                    job.abandoned = True
                    self._thread = None  # the next call starts a fresh spawner thread
            if job.abandoned:
                raise TimeoutError(f"{what} did not start within {timeout:g} s: the spawner thread is stuck in "
                                   "fork or exec (the child never reached its exec)")
        ok, value = job.box[0]
        if not ok:
            raise value
        return value


def _discard(result: tuple[bool, Any]) -> None:
    """Kill and reap a child started for a caller that is gone (its own session: the group goes too)."""
    ok, proc = result
    pid = getattr(proc, "pid", None) if ok else None
    if not isinstance(pid, int):
        return
    try:
        os.killpg(pid, 9)
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except Exception:  # noqa: BLE001 - a child that will not die is the kernel's to report
        pass
    for stream in (getattr(proc, "stdin", None), getattr(proc, "stdout", None), getattr(proc, "stderr", None)):
        if stream is not None:  # nobody reads them: close the pipes rather than leak them
            try:
                stream.close()
            except OSError:
                pass


_spawner = _Spawner()


def spawn(argv: Sequence[str], policy: ConfinementPolicy, *, extra_env: Mapping[str, str] | None = None,
          python_path: Sequence[str] | None = None, **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start a confined child: Popen(argv, **popen_options(policy), **popen_kwargs) forked on the
    spawner thread, watched by the reaper (which kills its group and removes policy.scratch if
    nkitui dies first). Call release(pid) when the run is over and cleaned up."""
    import subprocess

    harden_parent()
    options = popen_options(policy, extra_env=extra_env, python_path=python_path)
    options.update(popen_kwargs)
    proc: subprocess.Popen[Any] = _spawner.call(lambda: subprocess.Popen(list(argv), **options),
                                                what=f"the confined child `{_describe(argv)}`")
    from nkitui.executor.confine import reaping

    reaping.watch(proc.pid, Path(policy.scratch))
    return proc


def _describe(argv: Sequence[str]) -> str:
    """`python -m nkitui.executor.worker` rather than the interpreter's full path alone."""
    args = [str(a) for a in argv]
    name = os.path.basename(args[0]) if args else "?"
    return f"{name} -m {args[args.index('-m') + 1]}" if "-m" in args[:-1] else name


def release(pid: int) -> None:
    """The run of `pid` ended and nkitui cleaned up after it: the reaper forgets it."""
    from nkitui.executor.confine import reaping

    reaping.release(pid)


SDK_PACKAGES = ("nki", "neuronxcc")
SDK_THREADS = ("no threads or signal handlers for task code (at Python level: threads allowed for the Neuron SDK's "
               "own code)")


def sdk_backend_possible(backend: str, python_path: Sequence[str] = (), extra_env: Mapping[str, str] | None = None) -> bool:
    """May the worker pick a backend that runs the Neuron SDK's own tools (and so needs processes)?
    `auto` does only when a package named nki or neuronxcc is findable where the worker will look
    (a directory lookup, nothing imported); without one it picks the emulator, which runs fully
    confined."""
    if backend == "emulator":
        return False
    if backend != "auto":
        return True
    from importlib.machinery import PathFinder

    env_path = (extra_env or {}).get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    paths = [*python_path, *(p for p in env_path.split(os.pathsep) if p), *(p for p in sys.path if p)]
    return any(PathFinder.find_spec(name, paths) is not None for name in SDK_PACKAGES)


def observe(pid: int) -> dict[str, Any]:
    """What the parent can see of a child's confinement in /proc, without trusting the child:
    {"seccomp": 2 (filter) | 1 | 0 | None, "no_new_privs": bool | None, "own_session": bool | None}."""
    out: dict[str, Any] = {"seccomp": None, "no_new_privs": None, "own_session": None}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "Seccomp":
                    out["seccomp"] = int(value.strip())
                elif key == "NoNewPrivs":
                    out["no_new_privs"] = value.strip() == "1"
    except (OSError, ValueError):
        pass
    try:
        out["own_session"] = os.getsid(pid) == pid
    except OSError:
        pass
    return out


def is_report_line(event: Any) -> bool:
    """Is this log event the worker's one-line confinement summary (ConfinementReport.summary())?"""
    text = getattr(event, "text", "")
    return getattr(event, "stream", "") == "worker" and isinstance(text, str) and text.startswith(_SUMMARY_PREFIXES)


_SUMMARY_PREFIXES = ("sandbox: ", "degraded: ")


def record(sandbox: Mapping[str, Any] | None, observed: Mapping[str, Any] | None,
           log_lines: Sequence[Any] = ()) -> dict[str, Any]:
    """The run result's `sandbox` entry, completed by the parent: the worker's own report
    (`confinement`, or rebuilt from its summary line in the log when it died before its result),
    what the parent saw in /proc (`observed`) and the `summary` the report shows. A worker that
    claims seccomp while /proc shows no filter is not believed: the summary says so."""
    out = dict(sandbox or {})
    claim = out.get("confinement")
    if not isinstance(claim, dict):
        line = next((e.text for e in log_lines if is_report_line(e)), None)
        claim = _parse_summary(line) if line else None
        if claim is not None:
            out["confinement"] = claim
    if observed is not None:
        out["observed"] = dict(observed)
    if not isinstance(claim, dict):
        out["summary"] = "sandbox: not reported (the worker ended before it was confined)"
        return out
    report = ConfinementReport.from_dict(claim)
    active, degraded = list(report.active), list(report.degraded)
    if observed is not None and "seccomp" in active and observed.get("seccomp") != 2:
        active.remove("seccomp")
        degraded.insert(0, f"the worker reported seccomp but /proc showed Seccomp: {observed.get('seccomp')}")
    out["summary"] = ConfinementReport(tuple(active), tuple(degraded)).summary()
    return out


def _parse_summary(line: str) -> dict[str, Any]:
    active: list[str] = []
    degraded: list[str] = []
    for part in line.split("; degraded: ") if line.startswith("sandbox: ") else ["", line]:
        if part.startswith("sandbox: "):
            active = [p for p in part.removeprefix("sandbox: ").split(", ") if p]
        elif part:
            degraded = [p for p in part.removeprefix("degraded: ").split("; ") if p]
    return ConfinementReport(tuple(active), tuple(degraded)).to_dict()


# -- child side ---------------------------------------------------------------------------------

def enter(policy: ConfinementPolicy) -> ConfinementReport:
    """In the child, before any task code: confine this process for good (irreversible). Call it
    while the process has one thread (Landlock binds the calling thread and what it starts later).
    Never raises for a missing kernel feature: the report lists it under `degraded`."""
    from nkitui.executor.confine.entering import enter_now

    return enter_now(policy)


def refuse_threads() -> tuple[str | None, str | None]:
    """In the child, once nkitui's own setup is done and before any task code: no new threads and no
    signal handlers or timers for task code (nkitui.executor.confine.threads). Returns (what to add to the report's active list,
    what to add to its degraded list). A child confined with processes allowed (the SDK backends run
    the Neuron SDK, whose runtime starts threads) keeps threads, and the report says so."""
    from nkitui.executor.confine import entering

    if entering.entered_policy is None:
        return None, "threads allowed: the process did not enter the confinement"
    if entering.entered_policy.processes:  # the SDK's runtime starts threads: refused to task code only
        from nkitui.executor.confine.threads import refuse_for_task_code
        from nkitui.executor.sandbox import current_guard

        guard = current_guard()
        why = refuse_for_task_code(guard.task_root if guard is not None else "")
        if why is not None:
            return None, why
        return SDK_THREADS, None
    from nkitui.executor.confine.threads import refuse_threads as refuse

    why = refuse()
    return ("no threads, no signal handlers", None) if why is None else (None, why)


def tighten(policy: ConfinementPolicy) -> ConfinementReport:
    """Stack a stricter confinement on a child that entered a looser one: seccomp filters and
    Landlock rulesets only ever add restrictions. Used when a worker started with processes allowed
    (an SDK package was findable) and then chose the emulator after all (e.g. the PyPI placeholder
    `nki` is installed): from here on it is confined as fully as any emulator worker."""
    report = enter(policy)
    return ConfinementReport(report.active, report.degraded,
                             (*report.details, "tightened once the backend was chosen (no SDK tools needed)"),
                             report.enter_ms)


__all__ = [
    "ConfinementPolicy", "ConfinementReport", "child_env", "enter", "harden_parent", "is_report_line", "observe",
    "popen_options", "record", "refuse_threads", "release", "sdk_backend_possible", "spawn", "tighten",
]

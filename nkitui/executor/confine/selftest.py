"""`nkitui sandbox check`: prove, on this host, what the confinement stops.

A confined child (spawned exactly as a worker is: confine.spawn, then confine.enter) attempts each
escape below and reports what happened; the parent sets up the targets (a folder outside the
scratch, a secret file, a TCP listener) and judges. A probe is `verified` when the escape was
refused, `FAILED` when it worked, and `unverified` (with the reason) when the layer that would stop
it is not available here.

    python -m nkitui.executor.confine.selftest --child SPEC.json     (the child's side)
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ctypes
    from collections.abc import Callable

# probe name -> (what it tries, the layers that stop it)
PROBES: dict[str, tuple[str, tuple[str, ...]]] = {
    "write-outside": ("create a file outside the scratch folder", ("landlock",)),
    "write-dirfd": ("create a file through os.open(name, dir_fd=...) of an outside folder", ("landlock",)),
    "read-outside": ("read a secret file outside the scratch folder (e.g. ~/.aws/credentials)", ("landlock",)),
    "proc-parent-environ": ("read /proc/<parent>/environ (nkitui's own environment)", ("landlock", "dumpable")),
    "proc-parent-cwd": ("list /proc/<parent>/cwd (the task repository)", ("landlock", "dumpable")),
    "proc-self-mem": ("read the process's own memory through /proc/self/mem (the server's request ids)", ("landlock",)),
    "proc-self-environ": ("read /proc/self/environ and /proc/self/task/<tid>/environ", ("landlock",)),
    "tcp-connect": ("connect to a TCP listener on 127.0.0.1", ("seccomp", "landlock-net")),
    "unix-socket": ("create a unix socket (docker, ssh-agent, D-Bus sockets)", ("seccomp",)),
    "fork": ("fork a process (os.fork)", ("seccomp",)),
    "spawn-new-session": ("start a process in a new session (_posixsubprocess.fork_exec)", ("seccomp",)),
    "ctypes-fork": ("fork through libc (ctypes)", ("seccomp",)),
    "signal-parent": ("send a signal to the parent (os.kill(os.getppid(), 0))", ("seccomp", "landlock-scope")),
    "ptrace-parent": ("attach to the parent with ptrace", ("seccomp",)),
    "io-uring": ("set up io_uring (file I/O the filter cannot see)", ("seccomp",)),
    "clear-pdeathsig": ("clear the parent-death signal", ("seccomp",)),
    "limits-other": ("read or change another process's limits (prlimit on the parent)", ("seccomp",)),
    "renice-others": ("renice the parent's process group (setpriority PRIO_PGRP)", ("seccomp",)),
    "undumpable": ("change its dumpable flag (hides its open files from the disk watch)", ("seccomp",)),
    "threads": ("start threads before nkitui's setup is done (must keep working for BLAS)", ()),
    "threads-after-setup": ("start a thread once nkitui's setup is done (pthread_create through ctypes)", ("seccomp",)),
    "signal-handler-after-setup": ("install a signal handler once nkitui's setup is done (a fresh _signal module)",
                                   ("seccomp",)),
    "exec": ("exec another program (execve /bin/true)", ("seccomp",)),
    "chmod-outside": ("change the mode of a file outside through a descriptor of its folder (fchmodat dir_fd)",
                      ("seccomp",)),
    "utime-outside": ("change the times of a file outside through a descriptor of its folder (utimensat dir_fd)",
                      ("seccomp",)),
    "chown-outside": ("change the owner of a file outside, even to itself (fchownat dir_fd)", ("seccomp",)),
    "xattr-outside": ("set an extended attribute on a file outside (setxattr)", ("seccomp",)),
}


@dataclass
class ProbeResult:
    name: str
    what: str
    outcome: str  # "verified" | "FAILED" | "unverified"
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "outcome": self.outcome, "detail": self.detail}


@dataclass
class SelfTest:
    report: dict[str, Any]  # the child's ConfinementReport.to_dict()
    observed: dict[str, Any]  # the parent's view of /proc/<child>/status
    probes: list[ProbeResult]
    dumpable: bool  # is the parent dumpable (False after harden_parent)
    seconds: float

    @property
    def protections(self) -> list[ProbeResult]:
        """The escape attempts (everything but the threads probe, which must work)."""
        return [p for p in self.probes if PROBES[p.name][1]]

    @property
    def verified(self) -> int:
        return sum(p.outcome == "verified" for p in self.protections)

    @property
    def failed(self) -> list[ProbeResult]:
        return [p for p in self.probes if p.outcome == "FAILED"]

    def to_dict(self) -> dict[str, Any]:
        return {"report": self.report, "observed": self.observed, "dumpable": self.dumpable,
                "probes": [p.to_dict() for p in self.probes], "verified": self.verified, "total": len(self.protections),
                "seconds": round(self.seconds, 3)}


# -- the child's side ------------------------------------------------------------------------------

_REFUSALS = (errno.EPERM, errno.EACCES, errno.ENOSYS)


def _attempt(fn: Callable[[], object]) -> tuple[str, str]:
    """("escaped" | "refused" | "error", detail). Only EPERM/EACCES/ENOSYS count as a refusal; any
    other failure means the probe itself went wrong, which proves nothing."""
    try:
        value = fn()
    except OSError as exc:
        state = "refused" if exc.errno in _REFUSALS else "error"
        name = errno.errorcode.get(exc.errno or 0, "")
        return state, f"{name}: {os.strerror(exc.errno or 0)}" if name else f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001
        return "error", f"{type(exc).__name__}: {exc}"
    return "escaped", f"worked ({value!r})"[:200]


def _child(spec_path: str) -> int:
    from nkitui.executor import confine

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    policy = confine.ConfinementPolicy(scratch=Path(spec["scratch"]))
    report = confine.enter(policy)
    out: dict[str, Any] = {"report": report.to_dict(), "probes": {}}
    ppid = os.getppid()
    outside = spec["outside"]

    def libc() -> ctypes.CDLL:
        import ctypes

        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        return lib

    def checked(rc: int) -> int:
        import ctypes

        if rc < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return rc

    def fork() -> int:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    def new_session() -> int:
        import subprocess  # _posixsubprocess.fork_exec with setsid underneath (no audit hook here)

        return subprocess.Popen(["/bin/sleep", "30"], start_new_session=True).pid

    def ctypes_fork() -> int:
        lib = libc()
        pid = checked(lib.fork())
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    def threads() -> int:
        import threading

        done = []
        ts = [threading.Thread(target=lambda: done.append(1)) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if len(done) != 4:
            raise RuntimeError("threads did not run")
        return len(done)

    def pthread() -> str:
        import ctypes

        lib = libc()
        start = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda arg: None)
        tid = ctypes.c_ulong()
        rc = lib.pthread_create(ctypes.byref(tid), None, start, None)
        if rc:
            raise OSError(rc, os.strerror(rc))
        lib.pthread_join(tid, None)
        return "started"

    def self_mem() -> int:
        with open("/proc/self/maps", encoding="ascii") as f:  # allowed: glibc and OpenBLAS read it
            start = int(f.readline().split("-")[0], 16)
        fd = os.open("mem", os.O_RDONLY, dir_fd=os.open("/proc/self", os.O_RDONLY | os.O_DIRECTORY))
        return len(os.pread(fd, 64, start))

    def self_environ() -> int:
        import threading

        tid = threading.get_native_id()
        for path in ("/proc/self/environ", "/proc/thread-self/environ", f"/proc/self/task/{tid}/environ"):
            try:
                return len(Path(path).read_bytes())
            except PermissionError:
                continue
        raise PermissionError(13, "every environ refused")

    def fresh_signal_handler() -> str:
        import importlib.util
        import signal

        spec = importlib.util.find_spec("_signal")  # past the Python-level refusal: the kernel's stands
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return repr(module.signal(signal.SIGALRM, lambda signum, frame: None))

    def tcp() -> str:
        with socket.create_connection(("127.0.0.1", int(spec["port"])), timeout=2):
            return "connected"

    def dirfd_write() -> int:
        dfd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)
        return os.open("dirfd-escape.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)

    def outside_dir() -> int:  # O_PATH: Landlock does not govern it, nor attribute changes through it
        return os.open(outside, os.O_PATH | os.O_DIRECTORY)

    def chmod_outside() -> str:
        os.chmod("victim", 0o644, dir_fd=outside_dir())  # its own mode: harmless if it escapes
        return "chmod-ed"

    def utime_outside() -> str:
        st = os.stat(Path(outside, "victim"))
        os.utime("victim", ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=outside_dir())  # the same times
        return "utime-d"

    def chown_outside() -> str:
        st = os.stat(Path(outside, "victim"))
        os.chown("victim", st.st_uid, st.st_gid, dir_fd=outside_dir())  # the same owner
        return "chown-ed"

    def xattr_outside() -> str:
        os.setxattr(Path(outside, "victim"), "user.nkitui-selftest", b"1")
        return "set"

    def io_uring() -> int:
        import ctypes

        params = (ctypes.c_char * 120)()
        return checked(libc().syscall(ctypes.c_long(425), ctypes.c_uint(1), params))

    def ptrace() -> int:
        import ctypes

        return checked(libc().ptrace(ctypes.c_long(16), ctypes.c_long(ppid), None, None))  # PTRACE_ATTACH

    def clear_pdeathsig() -> int:
        import ctypes

        lib = libc()
        return checked(lib.prctl(ctypes.c_int(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0),
                                 ctypes.c_ulong(0)))

    def limits_other() -> object:
        import resource

        return resource.prlimit(ppid, resource.RLIMIT_CORE)  # a read: harmless if it escapes

    def renice_others() -> str:
        group = os.getpgid(ppid)
        os.setpriority(os.PRIO_PGRP, group, os.getpriority(os.PRIO_PGRP, group))  # the same value: harmless
        return "reniced"

    def undumpable() -> int:
        import ctypes

        return checked(libc().prctl(ctypes.c_int(4), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                                    ctypes.c_ulong(0)))  # PR_SET_DUMPABLE 1: no change, still refused

    attempts = {
        "write-outside": lambda: Path(outside, "escape.txt").write_text("escaped"),
        "write-dirfd": dirfd_write,
        "read-outside": lambda: Path(spec["secret"]).read_text()[:20],
        "proc-parent-environ": lambda: len(Path(f"/proc/{ppid}/environ").read_bytes()),
        "proc-parent-cwd": lambda: os.listdir(f"/proc/{ppid}/cwd")[:3],
        "proc-self-mem": self_mem,
        "proc-self-environ": self_environ,
        "tcp-connect": tcp,
        "unix-socket": lambda: socket.socket(socket.AF_UNIX).fileno(),
        "fork": fork,
        "spawn-new-session": new_session,
        "ctypes-fork": ctypes_fork,
        "signal-parent": lambda: os.kill(ppid, 0),
        "ptrace-parent": ptrace,
        "io-uring": io_uring,
        "clear-pdeathsig": clear_pdeathsig,
        "limits-other": limits_other,
        "renice-others": renice_others,
        "undumpable": undumpable,
        "threads": threads,
        "chmod-outside": chmod_outside,
        "utime-outside": utime_outside,
        "chown-outside": chown_outside,
        "xattr-outside": xattr_outside,
    }
    for name, fn in attempts.items():
        state, detail = _attempt(fn)
        out["probes"][name] = {"state": state, "detail": detail}
    confine.refuse_threads()  # what the kernel and reference servers do before importing task code
    state, detail = _attempt(pthread)
    out["probes"]["threads-after-setup"] = {"state": state, "detail": detail}
    state, detail = _attempt(fresh_signal_handler)
    out["probes"]["signal-handler-after-setup"] = {"state": state, "detail": detail}
    # exec last: if it works, this process is gone and the parent sees no "exec" entry. First let the
    # parent look at /proc/<this process>/status while it is surely still confined and alive.
    Path(spec["result"]).write_text(json.dumps(out), encoding="utf-8")
    seen = Path(spec["scratch"], "observed")
    for _ in range(500):
        if seen.exists():
            break
        time.sleep(0.005)
    state, detail = _attempt(lambda: os.execv("/bin/true", ["/bin/true"]))
    out["probes"]["exec"] = {"state": state, "detail": detail}
    Path(spec["result"]).write_text(json.dumps(out), encoding="utf-8")
    return 0


# -- the parent's side -----------------------------------------------------------------------------

def _layer_available(layer: str, report: dict[str, Any], observed: dict[str, Any], dumpable: bool) -> str | None:
    """None when the layer is active; otherwise why it is not (for an `unverified` probe)."""
    active = report.get("active", [])
    details = " ".join(report.get("details", []))
    if layer == "seccomp":
        return None if "seccomp" in active and observed.get("seccomp") == 2 else "seccomp not active on this host"
    if layer == "landlock":
        return None if "landlock" in active else "landlock not active on this host"
    if layer == "landlock-net":
        abi = _abi(details)
        return None if abi >= 4 else "landlock TCP rules need ABI 4 (kernel 6.7+)"
    if layer == "landlock-scope":
        return None if _abi(details) >= 6 else "landlock signal scoping needs ABI 6 (kernel 6.12+)"
    if layer == "dumpable":
        return None if not dumpable else "the parent is dumpable (harden_parent not called)"
    return f"unknown layer {layer}"


def _abi(details: str) -> int:
    marker = "landlock ABI "
    if marker not in details:
        return 0
    digits = "".join(ch for ch in details.split(marker, 1)[1][:3] if ch.isdigit())
    return int(digits or 0)


def run_selftest(timeout_s: float = 30.0) -> SelfTest:
    """Spawn a confined child, let it try every escape, judge each."""
    from nkitui.executor import confine
    from nkitui.executor.confine import libc

    confine.harden_parent()
    t0 = time.perf_counter()
    package_parent = str(Path(__file__).resolve().parents[3])
    with tempfile.TemporaryDirectory(prefix="nkitui-selftest-") as base:
        scratch = Path(base, "scratch")
        outside = Path(base, "outside")
        for d in (scratch, outside):
            d.mkdir()
        secret = outside / "credentials"
        secret.write_text("[default]\naws_secret_access_key = selftest-secret\n", encoding="utf-8")
        (outside / "victim").write_text("a file outside the run\n", encoding="utf-8")
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        spec = {"scratch": str(scratch), "outside": str(outside), "secret": str(secret),
                "port": listener.getsockname()[1], "result": str(scratch / "result.json")}
        spec_path = scratch / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        import subprocess

        proc = confine.spawn([sys.executable, "-P", "-m", "nkitui.executor.confine.selftest", "--child", str(spec_path)],
                             confine.ConfinementPolicy(scratch=scratch), python_path=[package_parent],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=scratch)
        observed: dict[str, Any] = {}
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            if not observed and (scratch / "result.json").exists():
                observed = confine.observe(proc.pid)
                (scratch / "observed").touch()
            time.sleep(0.01)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        stderr = proc.communicate()[1].decode(errors="replace")
        confine.release(proc.pid)
        listener.close()
        try:
            data = json.loads((scratch / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise RuntimeError(f"the confined child did not report (exit {proc.returncode}): {stderr.strip()[-500:]}") from None
        escapes_seen = [p.name for p in outside.iterdir() if p.name not in ("credentials", "victim")]
    try:
        dumpable = libc.prctl(libc.PR_GET_DUMPABLE) != 0
    except OSError:
        dumpable = True
    report = data["report"]
    results: list[ProbeResult] = []
    for name, (what, layers) in PROBES.items():
        got = data["probes"].get(name)
        if got is None:  # only exec can be missing: it replaced the child
            got = {"state": "escaped", "detail": "worked (the child was replaced by /bin/true)"}
        state = got["state"]
        if name.startswith("write") and any(n.startswith(("escape", "dirfd")) for n in escapes_seen):
            state = "escaped"
        escaped = state == "escaped"
        if not layers:
            results.append(ProbeResult(name, what, "FAILED" if not escaped else "verified",
                                       "works under confinement" if escaped else f"broken by confinement: {got['detail']}"))
            continue
        missing = [why for why in (_layer_available(layer, report, observed, dumpable) for layer in layers) if why]
        if state == "error":
            results.append(ProbeResult(name, what, "unverified", f"the probe itself failed: {got['detail']}"))
        elif not escaped:
            results.append(ProbeResult(name, what, "verified", got["detail"]))
        elif len(missing) == len(layers):
            results.append(ProbeResult(name, what, "unverified", "; ".join(missing)))
        else:
            results.append(ProbeResult(name, what, "FAILED", got["detail"]))
    return SelfTest(report, observed, results, dumpable, time.perf_counter() - t0)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2]))
    print(json.dumps(run_selftest().to_dict(), indent=2))

"""The child's half of confinement: enter_now(policy), called through nkitui.executor.confine.enter.

Order matters: the parent-death signal first (and the race with a parent that already died), then
no_new_privs (which both Landlock and seccomp need), Landlock (its own calls must still be allowed),
capabilities (a root worker keeps none), and seccomp last.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

from nkitui.executor.confine import ConfinementPolicy, ConfinementReport, PARENT_ENV, libc

# Read-only system files and folders every Python process with numpy needs: shared libraries and
# their cache, time zones, CPU topology (OpenBLAS, os.cpu_count), random numbers.
SYSTEM_READ_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.conf.d", "/sys/devices/system/cpu")
# The process's own /proc entries that the C library, OpenBLAS and nkitui read (strace of a kernel and a
# reference process: glibc's pthread_getattr_np and nkitui.emulator.blas read maps; capabilities and the
# umask come from status), file by file: never the folder, so /proc/self/mem (the process's memory:
# the request ids nkitui's server keeps), environ, cwd, root, exe, pagemap, task/* stay refused.
PROC_SELF_FILES = ("status", "maps", "stat", "statm")
PROC_SELF_LIST = ("fd",)  # listed only (descriptors' names): opening through a magic link is judged on its target
SYSTEM_READ_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/dev/urandom", "/dev/random",
                     "/dev/zero", "/proc/cpuinfo", "/proc/meminfo", "/proc/sys/vm/overcommit_memory")
SYSTEM_RW_FILES = ("/dev/null", "/dev/full")
# With processes allowed (the simulator and neuron backends run the SDK's compiler, runtime and
# profiler, whose needs are not known file by file): the system's folders may be read (sdk_read_roots),
# writes still go only to the scratch folder, the Neuron devices and the SDK's compile cache.
PROCESS_WRITE_ROOTS = ("/var/tmp/neuron-compile-cache",)
PROCESS_DEVICE_GLOB = "/dev/neuron*"
FAKE_TOOL_LOG = "NKITUI_FAKE_TOOL_LOG"  # test-only: the fake SDK tools append their command lines there

entered_policy: ConfinementPolicy | None = None  # the last policy entered (refuse_threads reads it)

_CAPSET = {"x86_64": 126, "amd64": 126, "aarch64": 91, "arm64": 91}


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_roots(policy: ConfinementPolicy) -> list[str]:
    """Folders the child may read: the interpreter's installation, the virtual environment, the
    entries of sys.path (a source checkout on sys.path contributes its nkitui package only, not the
    whole repository), the policy's extra roots. Never '/', nor a folder that holds the scratch."""
    scratch = os.path.realpath(policy.scratch)
    import nkitui

    package = os.path.dirname(os.path.realpath(nkitui.__file__))
    roots: list[str] = []
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, package]
    candidates += [p for p in sys.path if p]
    candidates += list(SYSTEM_READ_DIRS)
    candidates += [str(p) for p in policy.readable]
    if policy.processes:  # the SDK's tools: the system's folders, and where its programs are installed
        candidates += sdk_read_roots() + sdk_tool_roots(os.environ.get("PATH", ""))
    for entry in candidates:
        real = os.path.realpath(entry)
        if not os.path.exists(real) or real == os.sep or _under(scratch, real):
            continue
        base = os.path.basename(real)
        if _under(package, real) and real != package and base not in ("site-packages", "dist-packages"):
            real = package  # an editable/source checkout: its nkitui package, not the repository around it
        if real not in roots:
            roots.append(real)
    return roots


# With processes allowed (the simulator and neuron backends run the Neuron SDK's compiler, runtime and
# profiler, whose needs are not known file by file) the system's folders may be read, never the ones that
# hold users' files and secrets; the Python installation and the scratch folder are granted as always.
PRIVATE_TOP_LEVEL = frozenset({"home", "root", "tmp", "run", "mnt", "media", "srv", "lost+found", "snap", "var",
                               "workspace", "work", "data"})
SDK_VAR_DIRS = ("/var/lib", "/var/cache", "/var/log")  # not /var/tmp, /var/run, /var/mail, /var/spool


def sdk_read_roots() -> list[str]:
    """Every top-level folder of / but the users' ones (PRIVATE_TOP_LEVEL), and the system parts of /var:
    /usr, /opt (the SDK: /opt/aws/neuron), /etc, /proc, /sys, /dev, /lib*, ... Folders a site mounts for
    its users' data under other names are not known here: they stay readable (the report says reads are
    limited to the system's folders, not what those are)."""
    roots: list[str] = []
    try:
        names = sorted(os.listdir(os.sep))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(os.sep, name)
        if name in PRIVATE_TOP_LEVEL or not os.path.isdir(path) or os.path.islink(path):
            continue
        roots.append(path)
    roots += [p for p in SDK_VAR_DIRS if os.path.isdir(p)]
    return roots


NEURON_TOOLS = ("neuron-ls", "neuron-profile", "neuron-explorer", "neuronx-cc", "neuron-top")


def sdk_tool_roots(path_env: str) -> list[str]:
    """Every folder on PATH (the programs the SDK runs), and for a folder holding a Neuron tool the
    installation around it: its parent (/opt/aws/neuron for /opt/aws/neuron/bin), and for a
    bin/<group>/ layout the folder above bin (tools that read their data files next to bin/)."""
    roots: list[str] = []
    for entry in (p for p in path_env.split(os.pathsep) if p):
        roots.append(entry)
        if not any(os.path.isfile(os.path.join(entry, tool)) for tool in NEURON_TOOLS):
            continue
        parent = os.path.dirname(os.path.realpath(entry))
        roots.append(parent)
        if os.path.basename(parent) == "bin":
            roots.append(os.path.dirname(parent))
    return roots


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _capabilities() -> int:
    """The union of the effective, permitted, inheritable and ambient sets (0: nothing to drop)."""
    total = 0
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
                    total |= int(value.strip(), 16)
    except (OSError, ValueError):
        return 0
    return total


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Drop every capability (a worker started as root keeps root's uid but none of its powers:
    no CAP_SYS_PTRACE to read undumpable /proc entries, no CAP_DAC_OVERRIDE). True if any were held."""
    if not _capabilities():
        return False
    for cap in range(64):
        try:
            libc.prctl(libc.PR_CAPBSET_DROP, cap)
        except OSError:
            break  # EINVAL past the last capability the kernel knows
    try:
        libc.prctl(libc.PR_CAP_AMBIENT, libc.PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    number = _CAPSET.get(os.uname().machine.lower())
    if number is None:
        raise OSError("capset: unknown architecture")
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    libc.syscall(number, ctypes.byref(header), ctypes.byref(data))
    return True


def _tell_guard(roots: list[str]) -> None:
    """The in-process guard (if installed) refuses the same reads, with the task's file:line."""
    from nkitui.executor.sandbox import current_guard

    guard = current_guard()
    if guard is not None:
        guard.restrict_reads(roots)


def enter_now(policy: ConfinementPolicy) -> ConfinementReport:
    global entered_policy
    t0 = time.perf_counter()
    entered_policy = policy
    sys.dont_write_bytecode = True  # __pycache__ writes would be refused; do not even try
    if not sys.platform.startswith("linux"):
        return ConfinementReport((), (f"no OS confinement on {sys.platform} (Linux only)",),
                                 enter_ms=(time.perf_counter() - t0) * 1000)
    active: list[str] = []
    degraded: list[str] = []
    details: list[str] = []
    extra: list[str] = []

    # 1. die with the parent; a parent that died during the spawn is noticed here
    try:
        libc.prctl(libc.PR_SET_PDEATHSIG, int(signal.SIGKILL))
        expected = os.environ.pop(PARENT_ENV, "")
        if expected.isdigit() and int(expected) != os.getppid():
            os._exit(125)
        extra.append("parent-death signal")
    except OSError as exc:
        degraded.append(f"no parent-death signal ({exc})")
    session = os.getsid(0) == os.getpid()
    if not session:
        degraded.append("not in its own session (start it with start_new_session=True)")

    # 2. no_new_privs: needed by both layers below, and no setuid program could regain privileges
    try:
        libc.prctl(libc.PR_SET_NO_NEW_PRIVS, 1)
    except OSError as exc:
        degraded.append(f"no_new_privs refused ({exc})")

    # 3. Landlock
    from nkitui.executor.confine import landlock

    landlock_net = False
    threads = _thread_count()
    scratch = os.path.realpath(policy.scratch)
    writable, rw_files = [scratch], list(SYSTEM_RW_FILES)
    if policy.processes:
        import glob

        writable += [p for p in PROCESS_WRITE_ROOTS if os.path.isdir(p)]
        rw_files += glob.glob(PROCESS_DEVICE_GLOB)
        tool_log = os.environ.get(FAKE_TOOL_LOG)
        if tool_log:
            writable.append(os.path.dirname(os.path.abspath(tool_log)))
    readable = read_roots(policy)
    own = f"/proc/{os.getpid()}"
    read_files = list(SYSTEM_READ_FILES) + [f"{own}/{name}" for name in PROC_SELF_FILES]
    try:
        applied = landlock.apply(readable=readable, writable=writable, read_files=read_files,
                                 rw_files=rw_files, executable=policy.processes,
                                 restrict_network=not policy.network,
                                 list_dirs=[f"{own}/{name}" for name in PROC_SELF_LIST])
        active.append("landlock")
        details.append(f"landlock ABI {applied.abi}" + ("" if applied.scoped else " (signals not scoped: ABI < 6)"))
        landlock_net = applied.network
        _tell_guard(readable + read_files)
        if policy.processes:
            details.append("reads: the system's folders (/usr, /opt, /etc, /proc, /sys, /dev ...), not the users' "
                           "(/home, /root, /tmp, /run, /mnt, /var/tmp ...): the backend runs the Neuron SDK's own tools")
        if threads > 1:
            degraded.append(f"landlock binds only the calling thread: {threads - 1} other thread(s) were already running")
    except landlock.LandlockUnavailable as exc:
        degraded.append(str(exc))
    except OSError as exc:
        degraded.append(f"landlock failed ({exc})")

    # 4. capabilities (a worker run as root)
    try:
        if drop_capabilities():
            extra.append("no capabilities")
    except OSError as exc:
        degraded.append(f"capabilities not dropped ({exc})")

    # 5. seccomp, last
    from nkitui.executor.confine import seccomp, syscalls

    seccomp_on = False
    try:
        seccomp.install(seccomp.FilterSpec(own_pid=os.getpid(), processes=policy.processes, network=policy.network))
        seccomp_on = True
    except syscalls.UnsupportedArchitecture as exc:
        degraded.append(f"seccomp unavailable: {exc}")
    except OSError as exc:
        degraded.append(f"seccomp unavailable on kernel {os.uname().release} ({exc.strerror or exc})")

    ordered = (["seccomp"] if seccomp_on else []) + active
    if not policy.network:
        if seccomp_on or landlock_net:
            ordered.append("no network")
        else:
            degraded.append("network not restricted (neither seccomp nor Landlock's TCP rules are available)")
    if session:
        ordered.append("new session")
    ordered += extra
    if policy.processes:
        details.append("processes allowed (the backend runs the SDK's tools)")
    return ConfinementReport(tuple(ordered), tuple(degraded), tuple(details), (time.perf_counter() - t0) * 1000)

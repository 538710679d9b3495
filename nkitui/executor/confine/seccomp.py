"""A seccomp filter written as a small classic-BPF program and installed with the kernel's own call.

No libseccomp: the program is assembled here (a few dozen instructions) and handed to
seccomp(SECCOMP_SET_MODE_FILTER, TSYNC) through ctypes, so a clean machine needs nothing extra.

What the filter does, in order:
  * a foreign architecture (or x86_64's x32 numbering) is refused: the process is killed for a
    foreign audit arch, x32 calls get EPERM;
  * the always-denied calls (ptrace, process_vm_*, io_uring_*, bpf, userfaultfd, perf_event_open,
    keyctl, mount and friends, unshare, setns, module loading, reboot, kexec ...) return EPERM;
  * a file's mode, owner, times and extended attributes (chmod, chown, utimensat, setxattr and their
    variants, chattr's ioctls) cannot be changed: Landlock does not govern them;
  * SysV shared memory, semaphores and message queues and POSIX message queues (state that outlives
    the process, outside any scratch folder) cannot be made or reached;
  * exec (execve, execveat) and new processes (fork, vfork, clone without CLONE_THREAD) return
    EPERM; clone3 returns ENOSYS, because its flags sit in memory the filter cannot read: glibc then
    falls back to clone(), whose flags the filter checks, so threads (CLONE_THREAD) keep working;
  * signals go only to the process itself (kill/tgkill/rt_sigqueueinfo/rt_tgsigqueueinfo with the
    process's own pid; tkill and pidfd_send_signal are refused);
  * sockets: socket() is refused for every family, AF_UNIX included (a named unix socket can reach
    the docker daemon, an ssh or gpg agent or the session bus, and Landlock does not mediate
    connect() on them); socketpair(AF_UNIX) stays, an unnamed pair cannot reach anything;
  * prctl cannot clear the parent-death signal (PR_SET_PDEATHSIG), change the memory map
    (PR_SET_MM), name a ptracer or make the process undumpable (PR_SET_DUMPABLE: the parent's disk
    watch reads /proc/<child>/fd); personality only reads (0xffffffff) or keeps PER_LINUX;
  * limits and priorities only of the process itself: prlimit64 with pid 0 or its own (a same-user
    process could otherwise lower nkitui's or the user's shell's limits), setpriority only
    PRIO_PROCESS of itself (PRIO_USER would renice every process of the user);
    ioctl(TIOCSTI/TIOCLINUX) cannot push keystrokes into a terminal.
Denied calls return EPERM (never kill) so Python raises a clean PermissionError that the in-process
guard can attribute to the task's file:line.
"""

from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass

from nkitui.executor.confine import libc, syscalls

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_MODE_FILTER = 2
SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_SYSCALL = {syscalls.AUDIT_ARCH_X86_64: 317, syscalls.AUDIT_ARCH_AARCH64: 277}

CLONE_THREAD = 0x00010000
# namespace flags: a "thread" may not also ask for new namespaces
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
AF_UNIX = 1
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_MM, PR_SET_PTRACER = 1, 4, 35, 0x59616D61
PRIO_PROCESS = 0
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR = 0x40086602, 0x401C5820  # chattr's two ioctls (attributes, as above)
PERSONALITY_QUERY, PER_LINUX = 0xFFFFFFFF, 0
FATAL_SIGNALS = (4, 6, 7, 8, 11)  # SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV: the same on x86_64 and aarch64
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902  # the ioctl spellings of F_SETOWN

ALWAYS_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "tkill", "kcmp", "move_pages", "migrate_pages",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "userfaultfd", "perf_event_open",
    "keyctl", "add_key", "request_key",
    "mount", "umount2", "unshare", "setns", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "name_to_handle_at", "open_by_handle_at",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
    "swapoff", "acct", "quotactl", "lookup_dcookie", "vhangup", "iopl", "ioperm", "modify_ldt", "uselib",
    # leaving the run's session or process group: a process the SDK backends may start (or task code
    # there) would outlive the run, since the parent kills the worker's process group
    "setsid", "setpgid",
)
PROCESS_CALLS = ("execve", "execveat", "fork", "vfork")
# A file's mode, owner, times and extended attributes: Landlock governs none of them, and a descriptor
# of an outside folder (O_PATH, which Landlock does not govern either) or of a readable outside file is
# enough to change them there (a red team chmod-ed and back-dated a file in site-packages). Kernels
# never need them; the SDK backends' tools may, inside their scratch folder, so they keep them.
ATTRIBUTE_CALLS = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
    "removexattrat", "file_setattr",
)

# Inter-process state that outlives the process: SysV shared memory, semaphores and message queues, and POSIX
# message queues live in the IPC namespace, not in any scratch folder, so a kernel process could leave a count
# there for the next seed's (fresh) process to read (red team round 9c, finding 1). Kernels never need them; the
# SDK backends' runtime might, so they keep them.
IPC_CALLS = (
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv",
    "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
)


@dataclass(frozen=True)
class FilterSpec:
    own_pid: int  # signals may go to this process only
    processes: bool = False  # allow exec and new processes (SDK backends that run compilers)
    network: bool = False  # allow socket()


class _Asm:
    """Classic BPF with symbolic jump targets; resolves them to the 8-bit relative offsets."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load_nr(self) -> None:
        self.code.append((_LD_W_ABS, 0, 0, 0))

    def load_arch(self) -> None:
        self.code.append((_LD_W_ABS, 0, 0, 4))

    def load_arg_low(self, index: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, 16 + 8 * index))  # little-endian: the low word comes first

    def jump(self, op: int, k: int, jt: object, jf: object) -> None:
        self.code.append((op, jt, jf, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def assemble(self) -> bytes:
        out = bytearray()
        for i, (op, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                if isinstance(target, str):
                    off = self.labels[target] - (i + 1)
                    if not 0 <= off <= 255:
                        raise ValueError(f"BPF jump to {target} out of range ({off})")
                    offsets.append(off)
                else:
                    offsets.append(int(target))  # type: ignore[call-overload]  # 0 = next instruction
            out += int(op).to_bytes(2, "little") + bytes(offsets) + int(k).to_bytes(4, "little")
        return bytes(out)


def build_filter(spec: FilterSpec, arch: int, table: dict[str, int]) -> bytes:
    """The BPF program (sock_filter array) for one architecture."""
    a = _Asm()
    a.load_arch()
    a.jump(_JEQ_K, arch, 0, "kill")
    a.load_nr()
    if arch == syscalls.AUDIT_ARCH_X86_64:
        a.jump(_JGE_K, syscalls.X32_SYSCALL_BIT, "eperm", 0)
    denied = list(ALWAYS_DENIED) + ([] if spec.processes else [*PROCESS_CALLS, *ATTRIBUTE_CALLS, *IPC_CALLS])
    for name in denied:
        if name in table:
            a.jump(_JEQ_K, table[name], "eperm", 0)
    special: list[tuple[str, str]] = [("prctl", "prctl"), ("personality", "personality"), ("ioctl", "ioctl"),
                                      ("prlimit64", "self_or_zero"), ("setpriority", "setpriority")]
    if not spec.processes:
        a.jump(_JEQ_K, table["clone3"], "enosys", 0)
        special += [("clone", "clone"), ("kill", "own_pid"), ("tgkill", "own_pid"),
                    ("rt_sigqueueinfo", "own_pid"), ("rt_tgsigqueueinfo", "own_pid")]
    if not spec.network:
        special += [("socket", "eperm"), ("socketpair", "socketpair")]
    for name, target in special:
        a.jump(_JEQ_K, table[name], target, 0)
    a.ret(SECCOMP_RET_ALLOW)

    a.label("prctl")
    a.load_arg_low(0)
    for option in (PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_MM, PR_SET_PTRACER):
        a.jump(_JEQ_K, option, "eperm", 0)
    a.ret(SECCOMP_RET_ALLOW)
    a.label("setpriority")  # (which, who): PRIO_PROCESS of itself only
    a.load_arg_low(0)
    a.jump(_JEQ_K, PRIO_PROCESS, 0, "eperm")
    a.load_arg_low(1)
    a.jump(_JEQ_K, 0, "allow", 0)
    a.jump(_JEQ_K, spec.own_pid & 0xFFFFFFFF, "allow", "eperm")
    a.label("self_or_zero")  # prlimit64(pid, ...): 0 is the caller
    a.load_arg_low(0)
    a.jump(_JEQ_K, 0, "allow", 0)
    a.jump(_JEQ_K, spec.own_pid & 0xFFFFFFFF, "allow", "eperm")
    a.label("personality")
    a.load_arg_low(0)
    a.jump(_JEQ_K, PERSONALITY_QUERY, "allow", 0)
    a.jump(_JEQ_K, PER_LINUX, "allow", "eperm")
    a.label("ioctl")
    a.load_arg_low(1)
    if not spec.processes:
        a.jump(_JEQ_K, FS_IOC_SETFLAGS, "eperm", 0)
        a.jump(_JEQ_K, FS_IOC_FSSETXATTR, "eperm", 0)
    a.jump(_JEQ_K, TIOCSTI, "eperm", 0)
    a.jump(_JEQ_K, TIOCLINUX, "eperm", "allow")
    if not spec.processes:
        a.label("clone")  # a thread (CLONE_THREAD) without new namespaces; anything else is a process
        a.load_arg_low(0)
        a.jump(_JSET_K, CLONE_THREAD, 0, "eperm")
        a.jump(_JSET_K, CLONE_NAMESPACES, "eperm", "allow")
        a.label("own_pid")
        a.load_arg_low(0)
        a.jump(_JEQ_K, spec.own_pid & 0xFFFFFFFF, "allow", "eperm")
    if not spec.network:
        a.label("socketpair")
        a.load_arg_low(0)
        a.jump(_JEQ_K, AF_UNIX, "allow", "eperm")
    return _with_verdicts(a)


def build_thread_filter(arch: int, table: dict[str, int]) -> bytes:
    """The second, per-thread program (threads.refuse_threads): no clone at all (a thread is a clone with
    CLONE_THREAD; processes are already refused by the first program) and clone3 answered ENOSYS, so
    pthread_create falls back to clone and fails with EPERM. And no signal handler that anything could
    fire while nkitui's code runs (a Python handler is handed the interrupted frame, nkitui's own, with
    no audit event): rt_sigaction only for the fatal signals faulthandler restores before it re-raises
    (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, which no timer delivers), no timer_create (a timer with
    any signal), no fcntl F_SETOWN/F_SETOWN_EX/F_SETSIG nor ioctl FIOSETOWN/SIOCSPGRP (I/O signals).
    Stacked on the first."""
    a = _Asm()
    a.load_arch()
    a.jump(_JEQ_K, arch, 0, "kill")
    a.load_nr()
    a.jump(_JEQ_K, table["clone3"], "enosys", 0)
    a.jump(_JEQ_K, table["clone"], "eperm", 0)
    a.jump(_JEQ_K, table["rt_sigaction"], "sigaction", 0)
    a.jump(_JEQ_K, table["timer_create"], "eperm", 0)
    a.jump(_JEQ_K, table["fcntl"], "fcntl", 0)
    a.jump(_JEQ_K, table["ioctl"], "ioctl", 0)
    a.ret(SECCOMP_RET_ALLOW)
    a.label("ioctl")
    a.load_arg_low(1)
    a.jump(_JEQ_K, FIOSETOWN, "eperm", 0)
    a.jump(_JEQ_K, SIOCSPGRP, "eperm", "allow")
    a.label("sigaction")
    a.load_arg_low(0)
    for signum in FATAL_SIGNALS:
        a.jump(_JEQ_K, signum, "allow", 0)
    a.ret(SECCOMP_RET_ERRNO | errno.EPERM)
    a.label("fcntl")
    a.load_arg_low(1)
    for command in (F_SETOWN, F_SETSIG, F_SETOWN_EX):
        a.jump(_JEQ_K, command, "eperm", 0)
    return _with_verdicts(a)


def _with_verdicts(a: _Asm) -> bytes:
    """The verdicts both programs jump to by label, then the assembled program."""
    a.label("allow")
    a.ret(SECCOMP_RET_ALLOW)
    a.label("eperm")
    a.ret(SECCOMP_RET_ERRNO | errno.EPERM)
    a.label("enosys")
    a.ret(SECCOMP_RET_ERRNO | errno.ENOSYS)
    a.label("kill")
    a.ret(SECCOMP_RET_KILL_PROCESS)
    return a.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(spec: FilterSpec) -> None:
    """Install the filter on every thread of this process (TSYNC). Needs no_new_privs (set by the
    caller) unless the process holds CAP_SYS_ADMIN. Raises OSError when the kernel refuses."""
    arch, table = syscalls.native()
    _load(build_filter(spec, arch, table), SECCOMP_FILTER_FLAG_TSYNC)


def install_thread_refusal() -> None:
    """Refuse new threads to the calling thread (and every thread it would start): no TSYNC, so a
    thread started before this call keeps its own filter. Raises OSError when the kernel refuses."""
    arch, table = syscalls.native()
    _load(build_thread_filter(arch, table), 0)


def _load(program: bytes, flags: int) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    lib = libc.libc()
    arch, _ = syscalls.native()
    rc = lib.syscall(ctypes.c_long(_SECCOMP_SYSCALL[arch]), ctypes.c_ulong(SECCOMP_SET_MODE_FILTER),
                     ctypes.c_ulong(flags), ctypes.byref(prog))
    if rc == 0:
        return
    err = ctypes.get_errno()
    if err == errno.ENOSYS:  # a kernel older than 3.17: the prctl form, this thread only (no TSYNC there)
        libc.prctl(libc.PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog))
        return
    if rc > 0:  # TSYNC: the id of a thread that could not be synchronised
        raise OSError(errno.EBUSY, f"seccomp: thread {rc} could not take the filter")
    raise OSError(err, f"seccomp: {errno.errorcode.get(err, err)}")

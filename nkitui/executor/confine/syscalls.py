"""System-call numbers the seccomp filter names, for the two architectures nkitui runs on.

Numbers differ between x86_64 (its own table) and aarch64 (the asm-generic table); a name missing
from an architecture (aarch64 has no fork, vfork, iopl ...) is simply absent. The tests check these
tables against the kernel headers when the machine has them (linux-libc-dev).
"""

from __future__ import annotations

import os

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers, refused outright

X86_64: dict[str, int] = {
    "rt_sigaction": 13, "fcntl": 72, "timer_create": 222, "ioctl": 16, "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59,
    "kill": 62, "ptrace": 101, "rt_sigqueueinfo": 129, "personality": 135, "uselib": 134,
    "vhangup": 153, "modify_ldt": 154, "pivot_root": 155, "prctl": 157, "chroot": 161, "acct": 163,
    "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172,
    "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179, "tkill": 200,
    "lookup_dcookie": 212, "tgkill": 234, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "migrate_pages": 256, "unshare": 272, "move_pages": 279, "rt_tgsigqueueinfo": 297,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323, "pidfd_send_signal": 424,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_open": 434,
    "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "setpriority": 141, "prlimit64": 302, "setpgid": 109, "setsid": 112,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280, "setxattr": 188, "lsetxattr": 189,
    "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67, "msgget": 68,
    "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240, "mq_unlink": 241,
    "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    **{"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469},  # one number everywhere
}

AARCH64: dict[str, int] = {
    "lookup_dcookie": 18, "ioctl": 29, "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51,
    "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97, "kexec_load": 104,
    "init_module": 105, "delete_module": 106, "ptrace": 117, "kill": 129, "tkill": 130, "tgkill": 131,
    "rt_sigaction": 134, "fcntl": 25, "timer_create": 107, "rt_sigqueueinfo": 138, "reboot": 142, "prctl": 167, "socket": 198, "socketpair": 199,
    "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "execve": 221, "swapon": 224,
    "swapoff": 225, "migrate_pages": 238, "move_pages": 239, "rt_tgsigqueueinfo": 240,
    "perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265, "setns": 268,
    "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "bpf": 280,
    "execveat": 281, "userfaultfd": 282, "kexec_file_load": 294, "pidfd_send_signal": 424,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_open": 434,
    "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "setpriority": 140, "prlimit64": 261, "setpgid": 154, "setsid": 157,
    "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55, "utimensat": 88, "setxattr": 5, "lsetxattr": 6,
    "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
    "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
    "mq_getsetattr": 185, "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191,
    "semtimedop": 192, "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197,
    **{"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469},
}

# Landlock's three calls have one number on every architecture.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446


class UnsupportedArchitecture(Exception):
    pass


def native() -> tuple[int, dict[str, int]]:
    """(AUDIT_ARCH_* value, syscall table) of this machine; UnsupportedArchitecture elsewhere."""
    machine = os.uname().machine.lower()  # not platform.machine(): importing platform costs ~20 ms
    if machine in ("x86_64", "amd64"):
        return AUDIT_ARCH_X86_64, X86_64
    if machine in ("aarch64", "arm64"):
        return AUDIT_ARCH_AARCH64, AARCH64
    raise UnsupportedArchitecture(f"no seccomp table for the {machine} architecture (nkitui knows x86_64 and aarch64)")

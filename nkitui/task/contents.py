"""What of a task folder a run may see: its regular files, nothing a link could smuggle in.

A kernel runs on a copy of its task (nkitui.executor.workspace). Only regular files inside the task
folder are copied; a link is followed only when it ends at a regular file inside the task folder.
Links that lead outside (`ln -s ~/.aws/credentials creds`, a link to /usr), to a folder, or to a
device, FIFO or socket (`ln -s /dev/zero data.bin`, which would fill the disk), and device nodes,
FIFOs or sockets in the folder itself, are refused: `nkitui task validate` lists each with its path
and the fix, and a run of such a task does not start.

    files, problems = scan(root)    # TaskFile per regular file (task-relative name, real path, size)
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nkitui.task.problems import Problem

# Never copied: version control, review records, caches, virtual environments.
IGNORED_NAMES = frozenset({".git", ".hg", ".svn", "reviews", "__pycache__", ".pytest_cache", ".mypy_cache",
                           ".venv", "venv", "node_modules", ".nkitui", ".DS_Store"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
# Never copied, and said so: where credentials live (a kernel's folder may be a project or home folder
# holding them; a copied `.aws/credentials` is readable by the kernel, which can hide it in its outputs).
CREDENTIAL_NAMES = frozenset({".aws", ".ssh", ".gnupg", ".netrc", ".git-credentials", ".docker", ".kube",
                              ".pgpass", ".pypirc", ".npmrc", ".env", ".azure", ".gcloud"})


def holds_credentials(name: str) -> bool:
    return name in CREDENTIAL_NAMES or name.startswith(".env.")
MAX_FILES = 20_000  # a task is a handful of files; more means the task folder is a whole repository


@dataclass(frozen=True)
class TaskFile:
    rel: str  # task-relative, "/"-separated
    path: Path  # the file to read (the link's target for a link inside the task)
    size: int
    mode: int  # permission bits


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def scan(root: Path, *, display: str | None = None, max_files: int = MAX_FILES) -> tuple[list[TaskFile], list[Problem]]:
    """Every regular file of the task folder `root` that a run would copy, and a Problem for every
    entry that is refused (errors) or skipped (warnings). Never follows a link to a folder, never
    opens a file."""
    real_root = os.path.realpath(root)
    shown = display if display is not None else str(root)
    files: list[TaskFile] = []
    problems: list[Problem] = []

    def where(rel: str) -> str:
        return os.path.join(shown, rel)

    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(real_root, rel_dir)), key=lambda e: e.name)
        except OSError as exc:
            problems.append(Problem(where(rel_dir) or shown, "", f"cannot list the folder: {exc.strerror or exc}",
                                    "make it readable or move it out of the task folder"))
            continue
        for entry in entries:
            name = entry.name
            if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if holds_credentials(name):
                problems.append(Problem(where(rel), "", "holds credentials; it is never copied into a run",
                                        f"move it out of the task folder (kernels never need {name})", "warning"))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
                continue
            if stat.S_ISREG(st.st_mode):
                files.append(TaskFile(rel, Path(entry.path), st.st_size, st.st_mode & 0o777))
            elif stat.S_ISLNK(st.st_mode):
                target_text = os.readlink(entry.path)
                target = os.path.realpath(entry.path)
                try:
                    tst = os.stat(target)
                except OSError:
                    problems.append(Problem(where(rel), "", f"is a broken link (to {target_text}); it is not copied",
                                            f"remove it (rm {rel}) or point it at a file inside the task", "warning"))
                    continue
                if not _under(target, real_root):
                    what = target if stat.S_ISREG(tst.st_mode) else f"{_kind(tst.st_mode)} ({target})"
                    problems.append(Problem(where(rel), "", f"is a link to {what}, outside the task folder; runs see "
                                            "only the task's own regular files",
                                            f"copy the file into the task instead (cp --remove-destination {target} {rel}) "
                                            "or remove the link" if stat.S_ISREG(tst.st_mode) else
                                            f"remove the link (rm {rel}); put the data the kernel needs into the task "
                                            "as a regular file, or generate it from the manifest's [[inputs]]"))
                elif not stat.S_ISREG(tst.st_mode):
                    problems.append(Problem(where(rel), "", f"is a link to {_kind(tst.st_mode)} ({target}); runs copy "
                                            "only regular files", f"replace the link with the files themselves, or remove it (rm {rel})"))
                else:
                    files.append(TaskFile(rel, Path(target), tst.st_size, tst.st_mode & 0o777))
            else:
                problems.append(Problem(where(rel), "", f"is {_kind(st.st_mode)}; runs copy only regular files",
                                        f"remove it from the task folder (rm {rel})"))
            if len(files) > max_files:
                problems.append(Problem(shown, "", f"the task folder holds more than {max_files:,} files",
                                        "keep only the task's sources, manifest and data in its folder"))
                return files, problems
    return files, problems

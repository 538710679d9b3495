"""The scratch folder of one run, made and removed by the parent.

    <scratch>/            tempfile.mkdtemp(prefix="nkitui-run-"), mode 0700
      job.json            what the worker should do (never the task repository's path)
      work/               a copy of the task's regular files: the kernel's working directory
      home/               HOME for the worker (so ~/.aws, ~/.ssh are not the user's)
      tmp/                TMPDIR for the worker

What is copied is what nkitui.task.contents.scan allows: regular files inside the task folder, and
links that end at a regular file inside it (copied as files). A link out of the task, to a folder
or to a device, and any device node, FIFO or socket refuse the copy with the list of offenders.
The byte cap is enforced while copying, on the bytes actually read (a file that grows while it is
copied, or a size that lies, still stops at the cap), and every file is opened without following
links and checked to be a regular file after opening.

The parent removes the whole folder after the worker has exited, whatever happened to it; if the
parent dies first, the reaper (nkitui.executor.confine) removes it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_COPY_MB = 2048
_CHUNK = 1 << 20


class WorkspaceError(Exception):
    """The task folder cannot be copied into a scratch folder (too big, unreadable)."""


@dataclass(frozen=True)
class Scratch:
    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def job_path(self) -> Path:
        return self.root / "job.json"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _copy_file(src: Path, dst: Path, mode: int, budget: int) -> int:
    """Copy one regular file, reading at most `budget` + 1 bytes; returns the bytes copied."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkspaceError(f"{src} is not a regular file (it changed while the task was copied)")
        os.set_blocking(fd, True)
        copied = 0
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, (mode & 0o755) | 0o600)
        try:
            while True:
                chunk = os.read(fd, min(_CHUNK, budget - copied + 1))
                if not chunk:
                    return copied
                copied += len(chunk)
                if copied > budget:
                    return copied
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
        finally:
            os.close(out)
    finally:
        os.close(fd)


def copy_task(source: Path, dest: Path, *, max_bytes: int, max_files: int | None = None) -> int:
    """Copy the task folder's regular files into `dest` (which must not exist); returns the bytes
    copied. WorkspaceError lists every refused entry, or says the cap was reached."""
    from nkitui.task.contents import scan

    files, problems = scan(source) if max_files is None else scan(source, max_files=max_files)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        listed = "; ".join(f"{p.file} {p.message} (fix: {p.fix})" for p in errors[:10])
        more = f" and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise WorkspaceError(f"the task folder {source} cannot be copied for a run: {listed}{more}")
    limit_mb = max_bytes // (1024 * 1024)
    too_big = (f"the task folder {source} holds more than {limit_mb} MB of files; move large data "
               "(checkpoints, profiles) out of it or list only what the task needs")
    if sum(f.size for f in files) > max_bytes:
        raise WorkspaceError(too_big)
    dest.mkdir(mode=0o700)
    total = 0
    for f in files:
        target = dest / f.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            total += _copy_file(f.path, target, f.mode, max_bytes - total)
        except OSError as exc:
            raise WorkspaceError(f"could not copy {f.rel} of the task folder {source}: {exc.strerror or exc}") from exc
        if total > max_bytes:
            raise WorkspaceError(too_big)
    return total


def make_scratch(source: Path | None, *, max_copy_mb: int = DEFAULT_MAX_COPY_MB, max_files: int | None = None,
                 prefix: str = "nkitui-run-") -> Scratch:
    """Create a scratch folder and copy `source` (a task folder) into its work/ subfolder."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    scratch = Scratch(root)
    try:
        for sub in (scratch.home, scratch.tmp):
            sub.mkdir()
        if source is None:
            scratch.work.mkdir()
            return scratch
        source = source.resolve()
        if not source.is_dir():
            raise WorkspaceError(f"{source} is not a folder")
        copy_task(source, scratch.work, max_bytes=max_copy_mb * 1024 * 1024, max_files=max_files)
        return scratch
    except BaseException:
        scratch.remove()
        raise

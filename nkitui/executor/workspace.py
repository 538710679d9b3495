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

import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nkitui.executor.confine import reaping, removal

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
        remove_tree(self.root)
        reaping.drop(self.root)


def remove_tree(root: Path) -> None:
    """Remove a scratch folder whatever the child did to it (any depth, any modes; links never followed)."""
    removal.remove_tree(root)


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
    reaping.start()
    root = Path(tempfile.mkdtemp(prefix=prefix))
    reaping.hold(root)  # removed by the reaper if this process dies before a child is watched in it
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


# -- reading and writing in a child's scratch folder, from the parent -----------------------------
# The child owns everything beneath its scratch folder's root and may replace any folder there with a
# link (to the task repository, to HOME, to /proc/self of whoever follows it). The parent, which is not
# confined, therefore never follows a name there: each component is opened with O_NOFOLLOW from the
# root down, a FIFO is never waited on, and a file is read only if it is a regular file, bounded.

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    parts = [p for p in str(rel).split(os.sep) if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise OSError(errno.EXDEV, f"{rel} leaves its folder")
    return parts


def open_dir_beneath(root: Path, rel: str | os.PathLike[str], *, create: bool = False) -> int:
    """A descriptor of the folder root/rel, reached without following any link (ELOOP/ENOTDIR when a
    component is a link or not a folder); with `create`, missing folders are made (0700) on the way."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in _parts(rel):
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_beneath(root: Path, rel: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The bytes of the regular file root/rel, reached without following any link and without waiting
    on a FIFO; OSError (EFBIG) when it holds more than `max_bytes`."""
    parts = _parts(rel)
    if not parts:
        raise OSError(errno.EISDIR, f"{rel} names a folder")
    folder = open_dir_beneath(root, os.sep.join(parts[:-1]))
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    finally:
        os.close(folder)
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{rel} is not a regular file")
        if st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"{rel} is larger than {max_bytes} bytes")
        # read(n) allocates n bytes at once: ask for what the file holds (+1 to notice growth), then
        # bounded chunks if it grew while being read
        chunks = [f.read(st.st_size + 1)]
        total = len(chunks[0])
        while total > st.st_size and total <= max_bytes:
            chunk = f.read(min(1 << 24, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > max_bytes:
        raise OSError(errno.EFBIG, f"{rel} is larger than {max_bytes} bytes")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def remove_beneath(root: Path, rel: str | os.PathLike[str]) -> None:
    """Remove the folder root/rel and everything in it, never following a link on the way there or
    inside it (removal.remove_tree with a descriptor of the parent folder). Quiet when it is gone already."""
    parts = _parts(rel)
    if not parts:
        return
    try:
        parent = open_dir_beneath(root, os.sep.join(parts[:-1]))
    except OSError:
        return
    try:
        removal.remove_tree(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)


def write_beneath(root: Path, rel: str | os.PathLike[str], data: bytes) -> None:
    """Write root/rel (folders made on the way), never following a link: neither a folder the child
    replaced with one, nor a link it left in the file's place."""
    parts = _parts(rel)
    if not parts:
        raise OSError(errno.EISDIR, f"{rel} names a folder")
    folder = open_dir_beneath(root, os.sep.join(parts[:-1]), create=True)
    try:
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600, dir_fd=folder)
    finally:
        os.close(folder)
    with open(fd, "wb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{rel} is not a regular file")
        f.write(data)

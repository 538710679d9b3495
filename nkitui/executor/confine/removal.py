"""Remove a folder a hostile child has filled, whatever it did to it: any depth, any modes, any links.

shutil.rmtree (Python 3.11) recurses once per level: a kernel that nests folders a few thousand deep
(`while True: os.mkdir("d"); os.chdir("d")`, stopped by the disk watch only after a poll) makes it raise
RecursionError, and the thread that removes the scratch folder dies with the folder still there. Here
the tree is flattened instead: every folder found inside a folder is moved up into the top folder under
a fresh name, so no walk ever goes deeper than one level and at most two descriptors are open at a time.

Links are never followed (each name is looked at with lstat and opened with O_NOFOLLOW relative to a
descriptor of its folder), and a folder the child made unreadable or read-only (chmod 0 / 0o500) is
given back to its owner before it is entered, through a descriptor of that very folder (never a path a
link could replace). Called once the child and its process group are gone.

Standard library only: the reaper (reaper.py, started with `python -I -S`, nothing of nkitui on its
path) loads this file by its path.
"""

from __future__ import annotations

import errno
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_IDLE_PASSES = 3  # passes in a row that removed nothing: something outside nkitui's control holds on


def remove_tree(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> bool:
    """Remove `path` (relative to `dir_fd` when given) and everything under it. A link or a file at
    `path` is removed itself, never what it points to. True when it is gone (or was never there);
    False when something could not be removed (an error that retrying would not fix)."""
    name = os.fspath(path)
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return _unlink(name, dir_fd)
    top = _open_folder(name, dir_fd)
    if top is None:
        return False
    try:
        _empty(top)
    finally:
        os.close(top)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _empty(top: int) -> None:
    """Empty the folder open as `top`: files go at once, each sub-folder is emptied one level at a time
    (its own sub-folders are moved up into `top`), then removed."""
    counter = 0
    idle = 0
    while idle < _MAX_IDLE_PASSES:
        try:
            entries = _list(top)
        except OSError:
            return
        if not entries:
            return
        progress = False
        for name, is_dir in entries:
            if not is_dir:
                progress |= _unlink(name, top)
                continue
            folder = _open_folder(name, top)
            if folder is None:
                continue
            try:
                for inner, inner_is_dir in _list(folder):
                    if not inner_is_dir:
                        progress |= _unlink(inner, folder)
                        continue
                    counter, moved = _move_up(inner, folder, top, counter)
                    progress |= moved
            except OSError:
                pass
            finally:
                os.close(folder)
            try:
                os.rmdir(name, dir_fd=top)
                progress = True
            except OSError:
                pass
        idle = 0 if progress else idle + 1


def _list(fd: int) -> list[tuple[str, bool]]:
    """(name, is a folder) of each entry of the folder open as `fd`, links never followed (the
    directory entry's own type where the filesystem gives it, else lstat)."""
    with os.scandir(fd) as it:
        return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in it]


def _move_up(name: str, folder: int, top: int, counter: int) -> tuple[int, bool]:
    """Move the sub-folder `name` of `folder` into `top` under a name not taken there; returns the
    counter for the next fresh name and whether it moved."""
    unlocked = False
    while True:
        counter += 1
        fresh = f".nkitui-rm-{counter}"
        try:
            os.lstat(fresh, dir_fd=top)
            continue  # taken (the child may have used such names itself)
        except FileNotFoundError:
            pass
        try:
            os.rename(name, fresh, src_dir_fd=folder, dst_dir_fd=top)
            return counter, True
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                continue
            if exc.errno in (errno.EACCES, errno.EPERM) and not unlocked:
                # moving a folder writes its own ".." entry: it needs write rights on itself too
                unlocked = True
                _give_back(folder)
                try:
                    _chmod_folder(name, folder)
                except OSError:
                    pass
                continue
            return counter, False  # another filesystem (EXDEV), no rights, or gone: the next pass looks again


def _open_folder(name: str, dir_fd: int | None) -> int | None:
    """A descriptor of the folder `name`, its owner's rights taken back first when the child removed them."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        try:
            _chmod_folder(name, dir_fd)
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
    except OSError:
        return None
    _give_back(fd)
    return fd


def _chmod_folder(name: str, dir_fd: int | None) -> None:
    """Owner rights on the folder `name` that cannot be opened for reading. Through an O_PATH descriptor
    (which needs no rights on the folder, and with O_NOFOLLOW | O_DIRECTORY is the folder itself, never
    a link put in its place), so the chmod lands on that folder whatever is renamed meanwhile."""
    path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
    finally:
        os.close(path_fd)


def _give_back(fd: int) -> None:
    """Owner rights on an open folder, so that its entries can be removed (a chmod 0o500 by the child)."""
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o700 != 0o700:
            os.fchmod(fd, 0o700)
    except OSError:
        pass


def _unlink(name: str, dir_fd: int | None) -> bool:
    try:
        os.unlink(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False

"""Arrays between the evaluator and its untrusted children: plain .npy files, never pickles.

    meta = save_array(folder / "a.npy", array)      # {"file": "a.npy", "dtype": "bfloat16", "shape": [4, 8]}
    array = load_array(folder, meta, max_elements=n)  # checks the header before reading any data

numpy's .npy cannot name the ml_dtypes types (bf16, fp8): they travel as unsigned integers of their
width and are viewed back by name. The reader trusts nothing in `meta`: the file must be a plain
.npy of numbers, its header must agree with the claimed dtype and shape, and its size must stay
under `max_elements` (so a hostile child cannot make the evaluator read a 10 GB file).

`meta["sha256"]` is the digest of the bytes the writer produced (in memory, before they reached the
file): the reader hashes the bytes it parses. A thread of task code that rewrites an output file
after nkitui's server saved it (a race against the evaluator's read) is caught by the mismatch; the
evaluator requires the digest of everything an untrusted child sends (`require_digest`).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

PLAIN_KINDS = "biufc"  # bool, int, uint, float, complex: numbers only (no objects, strings, records)


class ArrayTransferError(Exception):
    """An array that cannot be passed (e.g. an object array), or a file that is not what it claims."""


NARROW_NAMES = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


@cache
def _narrow_types() -> dict[str, np.dtype]:
    # imported only when a narrow array is met: ml_dtypes costs ~0.6 s of CPU to import
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - ml_dtypes is a core dependency
        return {}
    return {n: np.dtype(getattr(ml_dtypes, n)) for n in NARROW_NAMES if hasattr(ml_dtypes, n)}


def dtype_label(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind == "V":  # the ml_dtypes types are opaque to numpy
        for name, narrow in _narrow_types().items():
            if dtype == narrow:
                return name
    return dtype.name


def save_array(path: Path, array: Any, *, digest: bool = True, exclusive: bool = False) -> dict[str, Any]:
    """Write `array` as a plain .npy (the bytes np.save writes for its C-ordered copy) and describe
    it. The header and the data are hashed and written as they are, without an in-memory copy of
    the whole file. `digest=False` leaves the sha256 out: for arrays the evaluator sends to a child,
    whose check of them would guard nothing (task code in that child can change its inputs anyway).
    `exclusive` (the evaluator writing into a child's scratch folder): the file must be new, and a link or
    FIFO of that name is never written through (FileExistsError)."""
    arr = np.asarray(array)
    label = dtype_label(arr.dtype)
    contiguous = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)  # (keeps a 0-d array 0-d)
    if label in NARROW_NAMES and arr.dtype.kind == "V":
        raw = contiguous.view(f"u{arr.dtype.itemsize}")
    elif arr.dtype.kind in PLAIN_KINDS:
        raw = contiguous
    else:
        raise ArrayTransferError(f"an array of dtype {arr.dtype} cannot be passed: only arrays of numbers can")
    head = io.BytesIO()
    fields = np.lib.format.header_data_from_array_1_0(raw)
    try:
        np.lib.format.write_array_header_1_0(head, fields)
    except ValueError:  # a header past 64 KiB (a very long shape): the version np.save would choose
        head = io.BytesIO()
        np.lib.format.write_array_header_2_0(head, fields)
    header = head.getvalue()
    data = raw.reshape(-1).view(np.uint8).data  # the bytes in place (raw is C-contiguous)
    meta: dict[str, Any] = {"file": path.name, "dtype": label, "shape": [int(n) for n in arr.shape]}
    if digest:
        hasher = hashlib.sha256(header)
        hasher.update(data)
        meta["sha256"] = hasher.hexdigest()
    if exclusive:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        out = open(os.open(path, flags, 0o600), "wb")
    else:
        out = open(path, "wb")
    with out as f:
        f.write(header)
        f.write(data)
    return meta


def _header(f: Any, name: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ArrayTransferError(f"{name}: unknown .npy version {version}")
    return tuple(int(n) for n in shape), bool(fortran), np.dtype(dtype)


_MAX_HEADER = 1 << 16
MAX_DIMS = 32  # numpy 1.x's limit (2.x allows 64): no task's tensor comes near it


def _read_bounded(path: Path, max_elements: int) -> memoryview:
    """The file's bytes, read once into a writable buffer (what is checked is what is parsed, and
    the array is a view of it: no second copy), refused past the largest .npy `max_elements`
    numbers can make."""
    limit = max_elements * 16 + _MAX_HEADER
    # no link followed, no FIFO waited on: the name is checked and opened in one step
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ArrayTransferError(f"{path.name} is not a regular file")
        # one byte more than the file claims (or than the limit allows): a file that grows while it
        # is read shows as longer than it was, and past the limit it is refused
        buffer = bytearray(min(st.st_size, limit) + 1)
        view = memoryview(buffer)
        got = 0
        while got < len(buffer):
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
        if got == len(buffer) and got <= limit:  # it grew while it was read: read the rest, bounded
            rest = f.read(limit + 1 - got)
            view.release()
            buffer += rest
            got += len(rest)
            view = memoryview(buffer)
    if got > limit:
        raise ArrayTransferError(f"{path.name} is larger than {max_elements} elements can be")
    return view[:got]


def load_array(folder: Path, meta: Any, *, max_elements: int, require_digest: bool = False,
               anchor: Path | None = None) -> np.ndarray:
    """The array `meta` describes, read from `folder` (the file name may not leave it). With
    `require_digest` the description must carry the writer's sha256 and the bytes must match it. With
    `anchor` (the root of the child's scratch folder, `folder` beneath it) no component from the anchor
    down may be a link: a child that replaced a folder of its scratch with a link to /proc/self or
    HOME cannot make the reader follow it."""
    if not isinstance(meta, dict) or not isinstance(meta.get("file"), str) or not isinstance(meta.get("dtype"), str):
        raise ArrayTransferError("the array description is not {file, dtype, shape}")
    name = meta["file"]
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise ArrayTransferError(f"array file name {name!r} leaves its folder")
    path = folder / name
    if anchor is None and (not path.is_file() or path.is_symlink()):
        raise ArrayTransferError(f"{name} is missing or not a regular file")
    digest = meta.get("sha256")
    if require_digest and not isinstance(digest, str):
        raise ArrayTransferError(f"{name} comes without the digest of its bytes")
    try:
        if anchor is not None:
            from nkitui.executor.workspace import read_beneath

            try:
                data: Any = read_beneath(anchor, path.relative_to(anchor), max_bytes=max_elements * 16 + _MAX_HEADER)
            except OSError as exc:
                raise ArrayTransferError(f"{name} is missing, not a regular file, too large or reached through a "
                                         f"link ({exc.strerror or exc})") from None
        else:
            data = _read_bounded(path, max_elements)
        head = io.BytesIO(data[:_MAX_HEADER])
        shape, fortran, stored = _header(head, name)
    except (OSError, ValueError) as exc:
        raise ArrayTransferError(f"{name} is not a readable .npy file: {exc}") from None
    if isinstance(digest, str) and hashlib.sha256(data).hexdigest() != digest:
        raise ArrayTransferError(f"{name} was changed after it was written (its bytes do not match the digest "
                                 "the writer sent): task code rewrote the file")
    # numpy's header reader takes any tuple of Python ints: negative sizes (frombuffer's count=-1 means
    # "all of it"), more dimensions than numpy allows, sizes whose product overflows numpy's index type
    if len(shape) > MAX_DIMS or any(type(n) is not int or n < 0 for n in shape):
        raise ArrayTransferError(f"{name} has an impossible shape {str(shape)[:120]}")
    count = 1
    for n in shape:
        count *= n
    if count > max_elements:
        raise ArrayTransferError(f"{name} holds {count} elements, more than the {max_elements} allowed here")
    label = meta["dtype"]
    narrow = _narrow_types().get(label) if label in NARROW_NAMES else None
    if narrow is not None:
        if stored != np.dtype(f"u{narrow.itemsize}"):
            raise ArrayTransferError(f"{name} claims {label} but stores {stored}")
    elif stored.kind not in PLAIN_KINDS or stored.name != label:
        raise ArrayTransferError(f"{name} claims {label} but stores {stored}")
    offset = head.tell()
    if len(data) - offset < count * stored.itemsize:
        raise ArrayTransferError(f"{name} could not be read: it holds fewer bytes than its header's "
                                 f"{count} elements of {stored}")
    # a view of the bytes read (writable: they are a bytearray), shaped as np.load would shape them
    try:
        arr: np.ndarray = np.frombuffer(data, dtype=stored, count=count, offset=offset)
        arr = arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
    except (ValueError, TypeError) as exc:  # e.g. a zero-size array with dimensions past numpy's index range
        raise ArrayTransferError(f"{name} cannot be an array: {str(exc)[:200]}") from None
    if not arr.flags.aligned:  # a header of odd length (not nkitui's writer): an aligned copy
        arr = arr.copy()
    if narrow is not None:
        arr = arr.view(narrow)
    return arr

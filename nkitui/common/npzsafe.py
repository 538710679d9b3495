"""Reading .npz/.npy files that someone else wrote, without trusting them.

`numpy.load` is safe from pickles with allow_pickle=False, but not from a zip bomb (a small member
that inflates to gigabytes), a header that claims a huge array, thousands of members, or a zip
whose directory lies about sizes. This reader checks all of that *before* decompressing, and while
reading counts the bytes it actually gets:

    arrays = load_npz(path, max_bytes=2 << 30)    # {name: ndarray}; NpzError says what and how to fix

Refused: pickles and object arrays (never loaded), structured dtypes, members that are not .npy,
headers over 10,000 bytes, an uncompressed total over `max_bytes`, compression ratios above 1000:1
for members over 16 MB, shapes whose byte count disagrees with the member's stored size.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MAX_HEADER = 10_000
MAX_MEMBERS = 1024
MAX_RATIO = 1000
RATIO_FLOOR = 16 << 20  # small members may compress as well as they like (zeros)
_CHUNK = 1 << 20
_ALLOWED_KINDS = "biufcV"  # bool, ints, floats, complex, raw bytes (bfloat16/fp8 saved by numpy)


class NpzError(ValueError):
    """The file cannot be read safely; the message names it and says how to fix it."""


def _kind_of(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except FileNotFoundError:
        raise NpzError(f"{path} does not exist") from None
    except OSError as exc:
        raise NpzError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    return "other"


def _read_exactly(f: Any, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        chunk = f.read(min(_CHUNK, n - got))
        if not chunk:
            break
        view[got:got + len(chunk)] = chunk
        got += len(chunk)
    if got != n:
        raise NpzError(f"holds {got} bytes of data where its header promises {n}")
    return buf


def read_npy(f: Any, where: str, budget: int, stored_size: int | None = None) -> np.ndarray:
    """One .npy stream: header checked (size, dtype, shape) before any data is read."""
    import numpy as np
    from numpy.lib import format as npf

    try:
        version = npf.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npf.read_array_header_1_0(f, max_header_size=MAX_HEADER)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npf.read_array_header_2_0(f, max_header_size=MAX_HEADER)
        else:
            raise NpzError(f"{where}: unsupported .npy format version {version}")
    except NpzError:
        raise
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise NpzError(f"{where}: not a readable .npy array ({exc})") from None
    if dtype.hasobject:
        raise NpzError(f"{where}: holds Python objects (dtype {dtype}); nkitui never unpickles data — save numeric "
                       "arrays (float32, int32, ...) instead")
    if dtype.fields is not None or dtype.kind not in _ALLOWED_KINDS or dtype.subdtype is not None:
        raise NpzError(f"{where}: dtype {dtype} is not a tensor element type; save plain numeric arrays")
    if len(shape) > 32 or any(type(d) is not int or d < 0 for d in shape):  # (True,) is no size; numpy 1.x: 32 dims
        raise NpzError(f"{where}: bad shape {str(shape)[:120]}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > budget:
        raise NpzError(f"{where}: {shape} {dtype} is {nbytes:,} bytes, over the limit of {budget:,} bytes left for "
                       "the inputs")
    if stored_size is not None:
        header_len = f.tell() if hasattr(f, "tell") else None
        if header_len is not None and stored_size != header_len + nbytes:
            raise NpzError(f"{where}: its header claims {nbytes:,} bytes of data but the archive stores "
                           f"{max(0, stored_size - header_len):,}; the file is corrupt or forged")
    data = _read_exactly(f, nbytes)
    if f.read(1):
        raise NpzError(f"{where}: has data past the end of its array; the file is corrupt or forged")
    try:
        arr = np.frombuffer(data, dtype=dtype)
        return arr.reshape(shape, order="F" if fortran else "C")
    except (ValueError, TypeError) as exc:  # a zero-size array whose dimensions overflow numpy's index type
        raise NpzError(f"{where}: not a readable .npy array ({str(exc)[:200]})") from None


def load_npy(path: Path, *, max_bytes: int) -> np.ndarray:
    kind = _kind_of(Path(path))
    if kind != "npy":
        raise NpzError(f"{path} is not a .npy array")
    with open(path, "rb") as f:
        return read_npy(f, str(path), max_bytes)


def load_npz(path: Path, *, max_bytes: int = 2 << 30) -> dict[str, Any]:
    """Every array of the .npz archive at `path`, by name (the file's order)."""
    path = Path(path)
    kind = _kind_of(path)
    if kind == "npy":
        raise NpzError(f"{path} holds a single array; save inputs with numpy.savez(path, a=..., b=...)")
    if kind == "pickle":
        raise NpzError(f"{path} is a Python pickle; nkitui never loads pickles (they can run code) — save the "
                       "arrays with numpy.savez(path, a=..., b=...)")
    if kind != "zip":
        raise NpzError(f"{path} is not an .npz archive (no zip signature); save inputs with numpy.savez")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise NpzError(f"{path} is not a readable .npz archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise NpzError(f"{path} has {len(infos):,} members; at most {MAX_MEMBERS} arrays are accepted")
        total = sum(i.file_size for i in infos)
        if total > max_bytes:
            raise NpzError(f"{path} unpacks to {total:,} bytes, over the limit of {max_bytes:,}; pass smaller inputs")
        arrays: dict[str, Any] = {}
        budget = max_bytes
        for info in infos:
            where = f"{path} member {info.filename!r}"
            if info.is_dir() or not info.filename.endswith(".npy"):
                raise NpzError(f"{where} is not an .npy array; an .npz holds only arrays (numpy.savez)")
            if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(1, info.compress_size):
                raise NpzError(f"{where} inflates {info.compress_size:,} bytes into {info.file_size:,} "
                               f"(over {MAX_RATIO}:1): refused as a zip bomb")
            name = info.filename[: -len(".npy")]
            if name in arrays:
                raise NpzError(f"{where}: the name {name!r} appears twice")
            try:
                with zf.open(info) as f:
                    arr = read_npy(f, where, budget, stored_size=info.file_size)
            except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
                raise NpzError(f"{where} cannot be read ({exc})") from None
            budget -= arr.nbytes
            arrays[name] = arr
        return arrays

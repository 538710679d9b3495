"""Run numpy's BLAS single-threaded while a kernel is emulated.

Emulated matmuls are at most 128x128x512: too small for BLAS threads to pay off, and on a busy
machine the threads' spin-waiting makes each one 10-20x slower. This finds the OpenBLAS library
numpy loaded (Linux: /proc/self/maps) and calls its set_num_threads through ctypes, restoring the
previous count afterwards. Without a recognised BLAS it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator

_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
# (set_num_threads, get_num_threads) of the BLAS numpy loaded
_BlasApi = tuple[Callable[[int], object], Callable[[], int]]
_api: _BlasApi | None = None
_probed = False


def _find() -> _BlasApi | None:
    global _api, _probed
    if _probed:
        return _api
    _probed = True
    import numpy  # noqa: F401  (make sure numpy's BLAS is loaded)

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "blas" in line.lower() and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if not path.startswith("/"):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _SYMBOLS:
            setter = getattr(lib, set_name, None)
            getter = getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                _api = (setter, getter)
                return _api
    return None


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    api = _find()
    if api is None:
        yield
        return
    setter, getter = api
    before = getter()
    if before == 1:
        yield
        return
    setter(1)
    try:
        yield
    finally:
        setter(before)

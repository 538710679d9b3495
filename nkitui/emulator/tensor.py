"""Tensors: views into a Storage, shared by both front ends.

A view is either

* a *range view* (`dims`): for each storage dimension d an entry (start, step, length, rax),
  meaning the indices start + step*k for k < length, laid along result axis `rax` (-1: a fixed
  index, the dimension is dropped). Result axes that no storage dimension maps to have size 1 (they come
  from index-grid broadcasting or from NKI's keep-the-partition-dim rule). Range views become
  numpy views (no copy), so reads and writes are plain slicing.
* a *gather view* (`gather_indices`): one integer index array per storage dimension, broadcastable to
  the view's shape. Used for index expressions that are not a plain affine range per dimension
  (e.g. `i_p * 4 + i_f` in one subscript, diagonals, indirect indices).

Views are created lazily and may point out of bounds until used: the bounds check (C13) runs when
an instruction touches the view, after a mask has narrowed it (partial last tiles).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, Self

import numpy as np
import numpy.typing as npt

from nkitui.emulator import devmem, replaylog, state
from nkitui.emulator import dtypes as dt
from nkitui.emulator.errors import IndexingError, OutOfBoundsError
from nkitui.emulator.memory import Storage
from nkitui.emulator.trace import Access


DimEntry = tuple[int, int, int, int]  # (start, step, length, result axis) of one storage dimension
Dims = tuple[DimEntry, ...]  # a range view's entries, one per storage dimension
Gather = tuple[np.ndarray, ...]  # a gather view's integer index arrays, one per storage dimension
Bounds = tuple[tuple[int, int], ...]  # inclusive (lowest, highest) index per storage dimension
Spec = tuple[Any, ...]  # per result axis: ("i", index) | ("r", start, step, length, new result axis)


class DynSlice:
    """`nl.ds(start, size)`: a slice of `size` elements starting at `start`."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start: Any, size: Any, step: int = 1) -> None:  # ints, checked where they are used
        self.start = start
        self.size = size
        self.step = step

    def __repr__(self) -> str:
        return f"ds({self.start}, {self.size})"


def _as_int(v: object, what: str) -> int:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    raise IndexingError(f"{what} must be an integer, got {type(v).__name__} {v!r}")


_FULL = slice(None)
_WHOLE: dict[tuple[int, ...], Dims] = {}
_WHOLE_BOUNDS: dict[tuple[int, ...], Bounds] = {}
_new_tuple = tuple.__new__
_ROW_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}  # HBM shape -> row stride of each leading dim


# Folders of task code (set by the kernel's untrusted process before the task's code is imported;
# empty elsewhere). The value-level methods below (array, read_f32, write) are the emulator's own
# machinery, not NKI: called by task code they would read device data to the host and write host
# results into HBM with the device's provenance, so in that process they refuse such callers.
TASK_ROOTS: tuple[str, ...] = ()

_REFUSAL = ("tensor.{}() is nkitui's emulator machinery, not part of the nki namespace: move data with "
            "nl.load/nl.store or nisa.dma_copy and compute with nki instructions")
# globals dicts (by id) of nkitui's modules that called array()/read_f32() (found on first call)
_TRUSTED_GLOBALS: set[int] = set()
_key = devmem.key_of  # identity without id()'s audit event


def _refuse_task_caller(what: str) -> None:
    """Refuse a caller that is not nkitui's own code. The caller is told apart by its module's globals
    dict (the very dict of a module nkitui imported under its name), not by its file: reading f_code
    raises an audit event, and in the kernel process every audit event runs the introspection guard."""
    g = sys._getframe(2).f_globals
    if _key(g) in _TRUSTED_GLOBALS:
        return
    name = g.get("__name__")
    if type(name) is str and name.startswith("nkitui.") and getattr(sys.modules.get(name), "__dict__", None) is g:
        _TRUSTED_GLOBALS.add(_key(g))
        return
    raise IndexingError(_REFUSAL.format(what))


class Tensor:
    """A view of a storage (HBM tensor or SBUF/PSUM tile)."""

    __slots__ = ("storage", "dims", "shape", "gather_indices", "_array_view", "_access_box", "_in_bounds",
                 "_index_bounds", "_producer", "_tile_checked", "__weakref__")

    dims: Dims  # None on a gather view, where nothing reads it (gather_indices is set instead)

    def __init__(self, storage: Storage, dims: Dims | None, shape: tuple[int, ...],
                 gather_indices: Gather | None = None) -> None:
        self.storage = storage  # the allocation this view looks into
        self.dims = dims  # type: ignore[assignment]  # range view: (start, step, length, result axis) per storage dimension; None on a gather view
        self.shape = shape
        self.gather_indices = gather_indices  # gather view: an index array per storage dimension (else None)
        self._array_view: np.ndarray | None = None  # the numpy view of the storage's cells, made on first use
        self._access_box: Access | None = None  # the trace's Access box, made on first use
        self._in_bounds = False  # passed the bounds check (C13)
        self._index_bounds: Bounds | None = None  # (lowest, highest) index per storage dimension
        self._producer: int | None = None  # trace seq of the instruction that created this fresh tile
        self._tile_checked = False  # passed the on-chip tile checks (views are immutable, so once is enough)

    @classmethod
    def whole(cls, st: Storage) -> Self:
        shape = st.shape
        ent = _WHOLE.get(shape)
        if ent is None:
            ent = _WHOLE[shape] = tuple((0, 1, n, i) for i, n in enumerate(shape))
        t = cls(st, ent, shape)
        t._in_bounds = True
        t._array_view = st.data
        t._index_bounds = _WHOLE_BOUNDS.get(shape)
        if t._index_bounds is None:
            t._index_bounds = _WHOLE_BOUNDS[shape] = tuple((0, n - 1) for n in shape)
        return t

    def _new(self, dims: Dims | None, shape: tuple[int, ...], gather_indices: Gather | None = None) -> Self:
        return type(self)(self.storage, dims, shape, gather_indices)

    # -- basic properties ----------------------------------------------------------------------
    @property
    def dtype(self) -> object:  # the public dtype object (nl.float32, a numpy type in legacy kernels)
        return self.storage.dtype.public

    @property
    def dt(self) -> dt.DType:
        return self.storage.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def memory(self) -> str:
        return self.storage.memory

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def free_size(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def itemsize(self) -> int:
        return self.storage.dtype.itemsize

    @property
    def is_whole(self) -> bool:
        return self.gather_indices is None and self.shape == self.storage.shape and all(
            e[0] == 0 and e[1] == 1 and e[3] == i for i, e in enumerate(self.dims))

    def partition_axis(self) -> int:
        """Result axis holding the storage's partition dimension (-1: fixed or not on-chip)."""
        if self.storage.partition_dim < 0:
            return -1
        if self.gather_indices is not None:
            return 0
        return self.dims[self.storage.partition_dim][3]

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> NoReturn:
        raise TypeError("NKI tensors are not iterable; index them with slices or nl.arange grids")

    def __bool__(self) -> bool:
        raise IndexingError("the truth value of a tensor is ambiguous (use &, |, ~ on predicates, "
                            "or 'is not None')")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.storage.memory} {self.shape} {self.storage.dtype.name} of {self.storage!r}>"

    # -- indexing ------------------------------------------------------------------------------
    def basic_index(self, key: Any) -> Self:  # an index, or a tuple of them
        """Ints, slices, nl.ds and Ellipsis (NumPy basic indexing with NKI's on-chip rules)."""
        if type(key) is not tuple:
            key = (key,)
        if self.gather_indices is None and len(key) <= len(self.shape):
            view = self._basic_fast(key)
            if view is not None:
                return view
        nd = len(self.shape)
        if any(k is Ellipsis for k in key):
            i = next(i for i, k in enumerate(key) if k is Ellipsis)
            fill = nd - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
        if len(key) > nd:
            raise IndexingError(f"too many indices ({len(key)}) for a tensor of shape {self.shape}")
        key = key + (slice(None),) * (nd - len(key))
        on_chip = self.storage.partition_dim >= 0
        pr = self.partition_axis()
        specs: list[Spec] = []
        out = 0
        dropped_free: list[int] = []
        for r, (k, n) in enumerate(zip(key, self.shape)):
            if isinstance(k, slice):
                start, stop, step = k.start, k.stop, k.step
                step = 1 if step is None else _as_int(step, "slice step")
                if step == 0:
                    raise IndexingError("slice step cannot be zero")
                if step > 0:
                    a = 0 if start is None else _as_int(start, "slice start")
                    b = n if stop is None else _as_int(stop, "slice stop")
                    a = a + n if a < 0 else a
                    b = b + n if b < 0 else b
                    length = max(0, -(-(b - a) // step))
                else:
                    a = n - 1 if start is None else _as_int(start, "slice start")
                    a = a + n if a < 0 else a
                    if stop is None:
                        length = a // (-step) + 1
                    else:
                        b = _as_int(stop, "slice stop")
                        b = b + n if b < 0 else b
                        length = max(0, -(-(a - b) // (-step)))
                specs.append(("r", a, step, length, out))
                out += 1
            elif isinstance(k, DynSlice):
                specs.append(("r", _as_int(k.start, "nl.ds start"), k.step, _as_int(k.size, "nl.ds size"), out))
                out += 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                i = int(k)
                if i < 0:
                    i += n
                if on_chip and r == pr:  # NKI keeps the partition dim (size 1)
                    specs.append(("r", i, 1, 1, out))
                    out += 1
                else:
                    specs.append(("i", i))
                    if on_chip and r > pr:
                        dropped_free.append(len(specs) - 1)
            else:
                raise IndexingError(f"unsupported index {k!r} of type {type(k).__name__}: use ints, slices, nl.ds, "
                                    "or (legacy) nl.arange / nl.mgrid grids")
        if on_chip and out < 2 and dropped_free:
            # an on-chip tensor stays at least 2-D: keep the last free dim indexed by an int as size 1
            j = dropped_free[-1]
            specs[j] = ("r", specs[j][1], 1, 1, None)
            # renumber result axes in order
            nxt = 0
            fixed: list[Spec] = []
            for s in specs:
                if s[0] == "r":
                    fixed.append(("r", s[1], s[2], s[3], nxt))
                    nxt += 1
                else:
                    fixed.append(s)
            specs = fixed
            out = nxt
        shape = [0] * out
        for s in specs:
            if s[0] == "r":
                shape[s[4]] = s[3]
        return self.compose(specs, tuple(shape))

    def _basic_fast(self, key: tuple[Any, ...]) -> Self | None:
        """The common case of basic indexing (unit-step slices, nl.ds, non-negative ints off the
        partition dim) straight to a new range view; None hands over to the general path."""
        ent = self.dims
        shape = self.shape
        axis_dim: Sequence[int]  # the storage dimension of each result axis (-1: none)
        if ent is _WHOLE.get(shape):  # a whole tensor (every kernel argument): result axis r is dimension r
            axis_dim = range(len(shape))
        else:
            axis_dim = [-1] * len(shape)
            for d, e in enumerate(ent):
                if e[3] >= 0:
                    axis_dim[e[3]] = d
        pax = self.storage.partition_dim
        pr = ent[pax][3] if pax >= 0 else -2
        new_ent = list(ent)
        out_shape: list[int] = []
        dropped = False
        nkey = len(key)
        for r in range(len(shape)):
            d = axis_dim[r]
            if d < 0:
                return None
            k: Any = key[r] if r < nkey else _FULL
            tk = type(k)
            n = shape[r]
            if tk is slice:
                if k.step is not None and k.step != 1:
                    return None
                a, b = k.start, k.stop
                if a is None:
                    a = 0
                elif type(a) is not int:
                    return None
                elif a < 0:
                    a += n
                if b is None:
                    b = n
                elif type(b) is not int:
                    return None
                elif b < 0:
                    b += n
                length = b - a if b > a else 0
            elif tk is DynSlice:
                a, length = k.start, k.size
                if type(a) is not int or type(length) is not int or k.step != 1:
                    return None
            elif tk is int:
                if r == pr or k < 0:
                    return None  # the keep-the-partition-dim rule lives in the general path
                e = ent[d]
                new_ent[d] = (e[0] + e[1] * k, 0, 1, -1)
                dropped = True
                continue
            else:
                return None
            e = ent[d]
            new_ent[d] = (e[0] + e[1] * a, e[1], length, len(out_shape))
            out_shape.append(length)
        if dropped and pax >= 0 and len(out_shape) < 2:
            return None
        return type(self)(self.storage, tuple(new_ent), tuple(out_shape))  # (self._new, without its call)

    def compose(self, specs: Sequence[Spec], shape: tuple[int, ...]) -> Self:
        """Apply per-result-axis specs ("i", k) | ("r", start, step, length, new_axis)."""
        if self.gather_indices is None:
            rmap: dict[int, int] = {}
            for sd, e in enumerate(self.dims):
                if e[3] >= 0:
                    rmap[e[3]] = sd
            ent = list(self.dims)
            for r, s in enumerate(specs):
                d = rmap.get(r)
                if d is None:  # a unit result axis with no storage dim behind it
                    ok = (s[0] == "i" and s[1] == 0) or (s[0] == "r" and s[1] == 0 and s[3] <= 1)
                    if not ok:
                        raise OutOfBoundsError(f"index {s[1]} out of range for a dimension of size 1 of "
                                               f"'{self.storage.name or 'tensor'}' (view shape {self.shape})")
                    continue
                start, step, _, _ = ent[d]
                if s[0] == "i":
                    ent[d] = (start + step * s[1], 0, 1, -1)
                else:
                    ent[d] = (start + step * s[1], step * s[2], s[3], s[4])
            return self._new(tuple(ent), shape)
        # gather view: index the per-dimension index arrays
        parts: list[Any] = []
        for s in specs:
            parts.append(s[1] if s[0] == "i" else slice(s[1], s[1] + s[2] * s[3] if s[1] + s[2] * s[3] >= 0 else None, s[2]))
        key = tuple(parts)
        fancy = tuple(np.broadcast_to(a, self.shape)[key].reshape(shape) for a in self.gather_indices)
        return self._new(None, shape, fancy)

    def index_arrays(self) -> tuple[np.ndarray, ...]:
        """Per storage dim, the integer index of every element of this view (broadcastable)."""
        if self.gather_indices is not None:
            return self.gather_indices
        nd = len(self.shape)
        out: list[np.ndarray] = []
        for start, step, length, rax in self.dims:
            if rax < 0:
                out.append(np.array(start).reshape((1,) * nd))
            else:
                shp = [1] * nd
                shp[rax] = length
                out.append((start + step * np.arange(length)).reshape(shp))
        return tuple(out)

    def gather_index(self, grids: Sequence[Any], shape: tuple[int, ...]) -> Self:  # ints or integer arrays
        """Advanced indexing: `grids[r]` is an int or an integer array (broadcastable to `shape`)
        giving, for every output element, the index along result axis r of this view."""
        base = self.index_arrays()
        full = tuple(np.broadcast_to(a, self.shape) if a.ndim == len(self.shape) else a for a in base)
        key = tuple(grids)
        fancy: list[np.ndarray] = []
        for a in full:
            a = np.broadcast_to(a, self.shape)
            fancy.append(np.broadcast_to(a[key], shape))
        # out-of-range grid values would make numpy raise IndexError here; convert it for the user
        return self._new(None, shape, tuple(fancy))

    def narrow(self, box: Sequence[tuple[int, int]]) -> Self:
        """Restrict each result axis r to [lo, hi) (mask fast path / partial tiles)."""
        if self.gather_indices is not None:
            sl = tuple(slice(lo, hi) for lo, hi in box)
            fancy = tuple(np.broadcast_to(a, self.shape)[sl] for a in self.gather_indices)
            shape = tuple(hi - lo for lo, hi in box)
            return self._new(None, shape, fancy)
        ent = list(self.dims)
        for d, (start, step, _length, rax) in enumerate(ent):
            if rax >= 0:
                lo, hi = box[rax]
                ent[d] = (start + step * lo, step, hi - lo, rax)
        shape = tuple(hi - lo for lo, hi in box)
        return self._new(tuple(ent), shape)

    # -- bounds and trace accesses -------------------------------------------------------------
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """Inclusive (lo, hi) index range touched in each storage dim (empty view: hi < lo)."""
        b = self._index_bounds
        if b is not None:
            return b
        if self.gather_indices is not None:
            if self.size == 0:
                b = tuple((0, -1) for _ in self.storage.shape)
            else:
                b = tuple((int(a.min()), int(a.max())) for a in self.gather_indices)
        else:
            out = []
            for start, step, length, _rax in self.dims:
                if length <= 0:
                    out.append((0, -1))
                else:
                    last = start + step * (length - 1)
                    out.append((start, last) if step >= 0 else (last, start))  # (min, max) without two calls
            b = tuple(out)
        self._index_bounds = b
        return b

    def check_bounds(self, what: str = "") -> None:
        if self._in_bounds:
            return
        shape = self.storage.shape
        bounds = self.bounds()
        for (lo, hi), n in zip(bounds, shape):
            if hi >= lo and (lo < 0 or hi >= n):
                break  # out of bounds: the loop below names the dimension
        else:
            self._in_bounds = True
            return
        for d, ((lo, hi), n) in enumerate(zip(bounds, shape)):
            if hi < lo:
                continue
            if lo < 0 or hi >= n:
                name = self.storage.name or self.storage.memory + " tensor"
                raise OutOfBoundsError(
                    f"out-of-bound access{' in ' + what if what else ''} for tensor '{name}' on dimension {d}: "
                    f"index range [{lo}, {hi}] exceeds dimension size {n}")
        self._in_bounds = True

    def access(self) -> Access:
        a = self._access_box
        if a is not None:
            return a
        st = self.storage
        if st.partition_dim < 0:
            a = self._access_box = self._hbm_access()
            return a
        if self.gather_indices is None:
            if st.partition_dim == 0 and self.dims is _WHOLE.get(self.shape):
                # tuple.__new__ skips the NamedTuple's Python-level __new__ (3x faster; one per fresh tile)
                a = self._access_box = _new_tuple(Access, (st.id, st.memory, 0, self.shape[0], 0, st.bytes_per_partition))
                return a
            pax = st.partition_dim
            strides = st.strides()[0]
            lo = hi = p0 = 0
            p1 = 1
            for d, (start, step, length, _rax) in enumerate(self.dims):
                if length <= 0:
                    a = self._access_box = Access(st.id, st.memory, 0, 0, 0, 0)
                    return a
                last = start + step * (length - 1)
                lo_d, hi_d = (start, last) if step >= 0 else (last, start)
                if d == pax:
                    p0, p1 = lo_d, hi_d + 1
                else:
                    lo += lo_d * strides[d]
                    hi += hi_d * strides[d]
            isz = st.dtype.itemsize
            a = self._access_box = Access(st.id, st.memory, p0, p1, lo * isz, (hi + 1) * isz)
            return a
        b = self.bounds()
        if any(hi < lo for lo, hi in b):
            a = Access(st.id, st.memory, 0, 0, 0, 0)
        else:
            pax = st.partition_dim
            lo = hi = 0
            for d, ((l, h), s) in enumerate(zip(b, st.strides()[0])):
                if d != pax:
                    lo += l * s
                    hi += h * s
            isz = st.dtype.itemsize
            a = Access(st.id, st.memory, b[pax][0], b[pax][1] + 1, lo * isz, (hi + 1) * isz)
        self._access_box = a
        return a

    def _hbm_access(self) -> Access:
        """HBM box (trace contract): rows = the leading dimensions flattened (p0, p1), bytes inside
        a row = the last dimension (b0, b1); a rank-1 tensor is one row."""
        st = self.storage
        shape = st.shape
        isz = st.dtype.itemsize
        if not shape:
            return Access(st.id, "hbm", 0, 1, 0, isz)
        b = self.bounds()
        for lo, hi in b:
            if hi < lo:
                return Access(st.id, "hbm", 0, 0, 0, 0)
        rows = _ROW_STRIDES.get(shape)
        if rows is None:
            rs = [0] * (len(shape) - 1)
            acc = 1
            for d in range(len(shape) - 2, -1, -1):
                rs[d] = acc
                acc *= shape[d]
            rows = _ROW_STRIDES[shape] = tuple(rs)
        r0 = r1 = 0
        for (lo, hi), s in zip(b, rows):
            r0 += lo * s
            r1 += hi * s
        c0, c1 = b[-1]
        # tuple.__new__ skips the NamedTuple's Python-level __new__ (one per HBM operand of a traced DMA)
        return _new_tuple(Access, (st.id, "hbm", r0, r1 + 1, c0 * isz, (c1 + 1) * isz))

    def contiguous_elems(self) -> int:
        """Elements in the innermost contiguous run of this view (per partition on-chip)."""
        if self.gather_indices is not None:
            return 1
        st = self.storage
        run = 1
        for d in range(len(self.dims) - 1, -1, -1):
            if d == st.partition_dim:
                break
            start, step, length, rax = self.dims[d]
            if length > 1 and step != 1:
                break
            run *= length
            if rax < 0 or length != st.shape[d]:
                break
        return run

    def inner_contiguous(self) -> bool:
        """Is the innermost free dimension read with stride 1 (VectorE performance modes)?"""
        if self.gather_indices is not None:
            return False
        for _start, step, length, _rax in reversed(self.dims):
            if length > 1:
                return step == 1
        return True

    # -- data ----------------------------------------------------------------------------------
    def _key(self) -> tuple[int | slice, ...]:
        key: list[int | slice] = []
        for start, step, length, rax in self.dims:
            if rax < 0:
                key.append(start)
            else:
                stop = start + step * length
                key.append(slice(start, stop if stop >= 0 else None, step))
        return tuple(key)

    def _apply(self, base: np.ndarray) -> np.ndarray:
        """This view's elements of `base` (an array shaped like the storage)."""
        if self.gather_indices is not None:
            g: np.ndarray = base[self.gather_indices]
            return g
        a: np.ndarray = base[self._key() + (Ellipsis,)] if not self.shape else base[self._key()]  # 0-d: a view, not a scalar
        raxes = [e[3] for e in self.dims if e[3] >= 0]
        if any(raxes[i] > raxes[i + 1] for i in range(len(raxes) - 1)):
            order = sorted(range(len(raxes)), key=raxes.__getitem__)
            a = a.transpose(order)
        if a.shape != self.shape:
            a = a.reshape(self.shape)
        return a

    def array(self) -> np.ndarray:
        """The view's cells in storage dtype (a numpy view for range views, a copy for gathers)."""
        if TASK_ROOTS:
            _refuse_task_caller("array")
        if replaylog._rec is not None:  # a host read of device values: the replay notes data dependence
            replaylog.host_read(self)
        if self.gather_indices is not None:
            return self.storage.data[self.gather_indices]
        return self._cells()

    def _cells(self) -> np.ndarray:
        """The numpy view of a range view's cells (made once, then cached)."""
        a = self._array_view
        if a is None:
            a = self._array_view = self._apply(self.storage.data)
        elif devmem._on and not devmem.owns(a):  # the cached view was replaced from the host
            a = self._array_view = self._apply(self.storage.data)
        return a

    def read_f32(self) -> np.ndarray:
        """The view's values as float32 (do not modify the result in place).

        No caller check here (the engines call it about once per instruction operand, and the check
        costs an audit event in the kernel's process): the name is a high integrity finding in task
        code, and what it reads cannot go back into device memory but through instructions (devmem)."""
        st = self.storage
        if st.data.dtype == np.float32:
            a = self._array_view
            if a is not None and not devmem._on:  # the cached view (_cells' common case, without the call)
                return a
            return st.data[self.gather_indices] if self.gather_indices is not None else self._cells()
        if st._f32_version == st.version:
            return self._apply(st.f32())
        if self.gather_indices is None and (self.size * 4 >= st.data.size or st._misses >= 2):
            return self._apply(st.f32())
        st._misses += 1
        cells = st.data[self.gather_indices] if self.gather_indices is not None else self._cells()
        return dt.to_f32(cells)

    def write(self, values: npt.ArrayLike, where: np.ndarray | None = None, by: object = None) -> None:
        """Store computed values (fp32 or native ints) with rounding to the storage dtype.

        `by`: the current launch's Run, passed by the instructions' write path (engine.common.write);
        in the kernel's process a write without it (task code calling `tile.write(...)`) is refused."""
        if TASK_ROOTS and (by is None or by is not state.current_run.get()):
            raise IndexingError(_REFUSAL.format("write"))
        st = self.storage
        data = st.data
        if type(values) is not np.ndarray:
            values = np.asarray(values, dtype=np.float32)
        if values.dtype != data.dtype:
            if data.dtype.kind in "iub":  # integer destinations: truncate toward zero, saturate
                values = dt.convert(values, data.dtype)
            # float destinations: numpy / ml_dtypes casts round to nearest even in copyto
        if st.lossy:
            values = dt.round_tf32(values)
        if devmem._on:  # the device memory is read-only but for this write (devmem)
            region = devmem.region(data)  # `data` is device memory (Storage.data checked it)
            devmem.unprotect(region)
            try:
                self._store(data, values, where)
            finally:
                devmem.protect(region)
        elif self.gather_indices is None and where is None and self._array_view is not None:
            # the common case: an item assignment is np.copyto(..., casting="unsafe") (the same cast and
            # broadcast, bit for bit: tests/emulator/test_hot_path_checks.py) without copyto's Python-level
            # dispatcher, which took a tenth of a tiny instruction's time
            self._array_view[...] = values
        else:
            self._store(data, values, where)
        st.version += 1
        st._misses = 0
        if st.init is not True and st.memory == "psum":
            self._mark_init(where)
        if st.mm_zone is not None:  # a non-matmul write ends a PSUM accumulation zone
            self.set_zone(False)

    def _store(self, data: np.ndarray, values: np.ndarray, where: np.ndarray | None) -> None:
        if self.gather_indices is not None:
            if where is None:
                data[self.gather_indices] = np.broadcast_to(values, self.shape)
            else:
                m = np.broadcast_to(where, self.shape)
                data[tuple(np.broadcast_to(a, self.shape)[m] for a in self.gather_indices)] = \
                    np.broadcast_to(values, self.shape)[m]
        elif where is None:
            np.copyto(self._cells(), values, casting="unsafe")
        else:
            np.copyto(self._cells(), values, casting="unsafe", where=where)

    def _mark_init(self, where: np.ndarray | None) -> None:
        """Remember which PSUM cells have been written (see `unwritten`)."""
        st = self.storage
        if st.init is None:
            if where is None and self.is_whole:
                st.init = True
                return
            st.init = np.zeros(st.shape, dtype=bool)
        if self.gather_indices is not None:
            idx = self.gather_indices if where is None else tuple(
                np.broadcast_to(a, self.shape)[np.broadcast_to(where, self.shape)] for a in self.gather_indices)
            st.init[idx] = True  # type: ignore[index]  # not True: write() calls this only then
        else:
            cells = self._apply(st.init)  # type: ignore[arg-type]  # not True: write() calls this only then
            if where is None:
                cells[...] = True
            else:
                cells[np.broadcast_to(where, cells.shape)] = True

    def unwritten(self) -> np.ndarray | None:
        """For a PSUM view: True where no instruction has written the cell yet (None: all written)."""
        init = self.storage.init
        if init is True:
            return None
        if init is None:
            return np.ones(self.shape, dtype=bool)
        return ~np.broadcast_to(self._apply(init), self.shape)

    def set_zone(self, value: bool) -> None:
        z = self.storage.mm_zone
        if self.gather_indices is not None:
            z[self.gather_indices] = value  # type: ignore[index]  # called only on a tile with a zone
        else:
            self._apply(z)[...] = value  # type: ignore[arg-type]  # called only on a tile with a zone

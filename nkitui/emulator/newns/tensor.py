"""`NkiTensor`: the `nki` namespace's tensor, a strided view of one allocation.

A view is a geometry over its *root* storage (`Geo`): dtype, shape, and for every axis a byte
stride; on-chip tensors (SBUF/PSUM) start at partition `p0` and step one partition along axis 0,
the other axes address bytes inside each partition (`byte_offset` + sum of index * stride); HBM tensors
address flat bytes. Slicing, `reshape`, `permute`, `broadcast`, `view(dtype)` and `.ap()` only
compute a new geometry (no data is copied), as in NKI.

For the engine a non-trivial view is the *whole* of an `AliasStorage`: a Storage whose cells are a
numpy view of the root's memory with the view's shape and strides, sharing the root's version
counter (so fp32 caches stay coherent) and its PSUM accumulation zones. Trace accesses are
computed from the geometry, so they name the root allocation and its real byte ranges.
Indirect views (`.ap(vector_offset=...)`, `.indirect()`) are the engine's gather views.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, SupportsInt, TypeAlias, cast

import numpy as np
from numpy.typing import NDArray

from nkitui.emulator import dtypes as _dt
from nkitui.emulator.api_types import Dims
from nkitui.emulator.errors import IndexingError, OutOfBoundsError, PartitionDimError, UnsupportedError
from nkitui.emulator.memory import Storage
from nkitui.emulator.mx_dtypes import PackedDType
from nkitui.emulator.newns import buffers
from nkitui.emulator.newns import dtypes as ndt
from nkitui.emulator.newns.registers import IntLike, VirtualRegister, scalar_value
from nkitui.emulator.tensor import DynSlice, Tensor
from nkitui.emulator.trace import Access

IndexArray: TypeAlias = NDArray[np.int64]
# a pattern: [[step, count], ...] in elements, outermost axis first
Pattern: TypeAlias = Sequence[tuple[int, int]]


# -------------------------------------------------------------------------------------------------
# Storages that share memory with another one


class AliasStorage(Storage):
    """The cells of a view of `root` (a numpy view of the root's memory). Same id as the root;
    the version counter and PSUM zones are the root's."""

    __slots__ = ("root", "geometry", "_own_version", "_own_zone")

    def __init__(self, root: Storage, geo: "Geo", data: NDArray[Any] | None) -> None:
        self.root: Storage | None = None
        self._own_zone: NDArray[np.bool_] | None = None
        Storage.__init__(self, root.name, root.memory, geo.shape, geo.dtype, data,
                         0 if root.memory != "hbm" else -1, root.kind)
        self.id = root.id
        self.geometry = geo
        self.loop_depth = root.loop_depth
        self.lossy = root.lossy if geo.dtype is root.dtype else False
        self.span = root.span  # a view's instructions extend the root tile's live range
        self.root = root

    @property
    def version(self) -> int:
        r = self.root
        return self._own_version if r is None else r.version

    @version.setter
    def version(self, v: int) -> None:
        r = self.root
        if r is None:
            self._own_version = v
        else:
            r.version = v

    @property
    def mm_zone(self) -> NDArray[np.bool_] | None:
        r = self.root
        if r is None or self.geometry.dtype is not r.dtype:
            return self._own_zone
        z = r.mm_zone
        return None if z is None else self.geometry.zone_view(z)

    @mm_zone.setter
    def mm_zone(self, value: NDArray[np.bool_] | None) -> None:
        r = self.root
        if r is None or self.geometry.dtype is not r.dtype:
            self._own_zone = value
        elif r.mm_zone is None and value is not None:
            r.mm_zone = np.zeros(r.shape, dtype=bool)


class SpaceCell:
    """A version counter shared by every tensor placed in one address space (explicit
    `address=` allocations may overlap, so a write to one may change another)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class PlacedStorage(Storage):
    """A tensor allocated at an explicit address (`nl.ndarray(..., address=(p, byte))`): its cells
    are a view of the core's SBUF or PSUM byte space, so overlapping allocations alias."""

    __slots__ = ("cell", "space", "base", "pstride", "_own_version")

    def __init__(self, name: str, memory: str, shape: tuple[int, ...], dtype: _dt.DType, space: NDArray[np.uint8],
                 cell: SpaceCell, partition: int, byte: int) -> None:
        self.cell: SpaceCell | None = None
        P = shape[0]
        nbytes = (math.prod(shape) // P if P else 0) * dtype.itemsize
        rows = space[partition:partition + P, byte:byte + nbytes]
        data = rows.view(dtype.np).reshape(shape)
        Storage.__init__(self, name, memory, tuple(shape), dtype, data, 0, "")
        self.space = space.reshape(-1)
        self.pstride = space.shape[1]
        self.base = partition * self.pstride + byte
        self.cell = cell

    @property
    def version(self) -> int:
        c = self.cell
        return self._own_version if c is None else c.value

    @version.setter
    def version(self, v: int) -> None:
        c = self.cell
        if c is None:
            self._own_version = v
        else:
            c.value = v + 1 if v <= c.value else v  # any write moves the shared counter forward


def _physical(root: Storage) -> tuple[NDArray[np.uint8], int, int, int]:
    """(flat uint8 buffer, byte offset of element 0, partition stride in bytes, scale) of a root;
    scale is storage bytes per device byte (2 or 4 when precise=False keeps bf16/fp8 as fp32)."""
    if isinstance(root, PlacedStorage):
        return root.space, root.base, root.pstride, 1
    data = root.data
    assert data is not None  # callers check shape-only mode first
    scale = data.itemsize // root.dtype.itemsize if root.dtype.itemsize else 1
    flat = data.reshape(-1).view(np.uint8)
    return flat, 0, root.bytes_per_partition * scale, scale


# -------------------------------------------------------------------------------------------------
# Geometry


@dataclass(frozen=True, slots=True)
class Geo:
    root: Storage
    dtype: _dt.DType
    shape: tuple[int, ...]
    p0: int  # on-chip: first partition
    byte_offset: int  # bytes: inside a partition (on-chip) / flat (HBM)
    byte_strides: tuple[int, ...]  # byte stride per axis (on-chip axis 0 steps partitions: entry unused)

    @property
    def onchip(self) -> bool:
        return self.root.memory != "hbm"

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @staticmethod
    def whole(st: Storage) -> "Geo":
        shape = st.shape
        isz = st.dtype.itemsize
        bstr = [0] * len(shape)
        acc = isz
        first = 1 if st.memory != "hbm" else 0
        for i in range(len(shape) - 1, first - 1, -1):
            bstr[i] = acc
            acc *= shape[i]
        return Geo(st, st.dtype, tuple(shape), 0, 0, tuple(bstr))

    def is_root_whole(self) -> bool:
        r = self.root
        return (self.dtype is r.dtype and self.shape == r.shape and self.p0 == 0 and self.byte_offset == 0
                and self.byte_strides == Geo.whole(r).byte_strides)

    def extent(self) -> tuple[int, int] | None:
        """Inclusive (lo, hi) byte range of the free axes (flat for HBM); None if empty."""
        if any(n == 0 for n in self.shape):
            return None
        lo = hi = self.byte_offset
        for i, (n, s) in enumerate(zip(self.shape, self.byte_strides)):
            if i == 0 and self.onchip:
                continue
            span = (n - 1) * s
            if span < 0:
                lo += span
            else:
                hi += span
        return lo, hi + self.itemsize - 1

    def check(self) -> None:
        r = self.root
        ext = self.extent()
        if ext is None:
            return
        name = r.name or f"{r.memory} tensor {r.shape}"
        if self.onchip:
            P = r.shape[0]
            if self.p0 < 0 or self.p0 + self.shape[0] > P:
                raise OutOfBoundsError(f"out-of-bound access for tensor '{name}' on the partition dimension: "
                                       f"partitions [{self.p0}, {self.p0 + self.shape[0] - 1}] exceed its {P} "
                                       "partitions")
            limit = r.bytes_per_partition
            where = "bytes per partition"
        else:
            limit = math.prod(r.shape) * r.dtype.itemsize
            where = "bytes"
        lo, hi = ext
        if lo < 0 or hi >= limit:
            isz = self.itemsize
            raise OutOfBoundsError(f"out-of-bound access for tensor '{name}': elements [{lo // isz}, {hi // isz}] "
                                   f"({self.dtype.name}) exceed its {limit // isz} elements ({limit} {where}); "
                                   f"view shape {self.shape}")

    def build(self) -> NDArray[Any] | None:
        """The view's cells: a numpy view of the root's memory (None in shape-only mode)."""
        r = self.root
        if r.data is None:
            return None
        flat, base, pstride, scale = _physical(r)
        if self.dtype is r.dtype:
            npdt = r.data.dtype
        elif scale != 1:
            raise UnsupportedError(f"reinterpreting a {r.dtype.name} tensor as {self.dtype.name} needs the "
                                   "precise mode (NKI_PRECISE_FP=1): with precise=False low-precision floats are "
                                   "kept as float32 cells")
        else:
            npdt = self.dtype.np
        onchip = self.onchip
        off = base + (self.p0 * pstride if onchip else 0) + self.byte_offset * scale
        strides = tuple(pstride if (onchip and i == 0) else b * scale for i, b in enumerate(self.byte_strides))
        return np.ndarray(self.shape, dtype=npdt, buffer=flat, offset=off, strides=strides)

    def zone_view(self, zone: np.ndarray) -> np.ndarray:
        """The view's part of the root's per-element PSUM zone array."""
        r = self.root
        isz = self.itemsize
        F = r.bytes_per_partition // isz
        flat = zone.reshape(-1)
        off = self.p0 * F + self.byte_offset // isz
        strides = tuple(F if i == 0 else b // isz for i, b in enumerate(self.byte_strides))
        return np.ndarray(self.shape, dtype=bool, buffer=flat.view(np.uint8), offset=off, strides=strides)

    def access(self) -> Access:
        r = self.root
        ext = self.extent()
        if ext is None:
            return Access(r.id, r.memory, 0, 0, 0, 0)
        lo, hi = ext
        if self.onchip:
            return Access(r.id, r.memory, self.p0, self.p0 + self.shape[0], lo, hi + 1)
        return self._hbm_access(lo, hi)

    def _hbm_access(self, lo: int, hi: int) -> Access:
        """HBM box (trace contract): rows of the root (its leading dims flattened) in p0/p1, bytes
        inside a row in b0/b1. Axes whose byte stride is a whole number of rows move between rows;
        the others must stay inside one row, else the box covers whole rows."""
        r = self.root
        rb = (r.shape[-1] if r.shape else 1) * r.dtype.itemsize
        if rb <= 0:
            return Access(r.id, "hbm", 0, 1, lo, hi + 1)
        row_lo, row_hi = lo // rb, hi // rb
        if row_lo == row_hi:
            return Access(r.id, "hbm", row_lo, row_lo + 1, lo - row_lo * rb, hi - row_lo * rb + 1)
        row_a = row_b = self.byte_offset // rb
        col_a = col_b = self.byte_offset - row_a * rb
        for n, s in zip(self.shape, self.byte_strides):
            if n <= 1:
                continue
            span = (n - 1) * s
            if s % rb == 0:
                if span < 0:
                    row_a += span // rb
                else:
                    row_b += span // rb
            elif span < 0:
                col_a += span
            else:
                col_b += span
        col_b += self.itemsize - 1
        if col_a >= 0 and col_b < rb:
            return Access(r.id, "hbm", row_a, row_b + 1, col_a, col_b + 1)
        return Access(r.id, "hbm", row_lo, row_hi + 1, 0, rb)

    def free_axes(self) -> range:
        return range(1 if self.onchip else 0, len(self.shape))

    def contiguous_run(self) -> int:
        """Elements in the innermost contiguous run (per partition on-chip)."""
        run, expect = 1, self.itemsize
        for i in reversed(self.free_axes()):
            n, s = self.shape[i], self.byte_strides[i]
            if n == 1:
                continue
            if s != expect:
                break
            run *= n
            expect *= n
        return run

    def is_contiguous(self) -> bool:
        expect = self.itemsize
        for i in reversed(self.free_axes()):
            n, s = self.shape[i], self.byte_strides[i]
            if n == 1:
                continue
            if s != expect:
                return False
            expect *= n
        return True


# -------------------------------------------------------------------------------------------------


def _int_of(v: object, what: str) -> int:
    if isinstance(v, VirtualRegister):
        return v.value
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    raise IndexingError(f"{what} must be an integer (or a register), got {type(v).__name__} {v!r}")


def _dim(dim: object, nd: int, what: str) -> int:
    d = _int_of(dim, what)
    if d < 0:
        d += nd
    if not 0 <= d < nd:
        raise IndexingError(f"{what} {d} is out of range for a {nd}-D tensor")
    return d


class NKIObject:
    """`nl.NKIObject`: the base class of kernel configuration objects and dataclasses. As in the
    SDK's stub (`NKIObject.__init__(self, **kwargs)`), building one with keywords sets each as an
    attribute (nki-library writes `Configs(...)` on plain subclasses); a `@dataclass` subclass with
    fields has dataclass's `__init__`, one without fields (attention_cte's `SectionParams`, whose
    defaults are bare class attributes) keeps the keyword `__init__`."""

    __slots__ = ()

    def __init__(self, **kwargs: object) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __init_subclass__(cls, **kwargs: object) -> None:
        # @dataclass on a class without fields would add an __init__() that refuses keywords; it leaves an
        # __init__ the class itself defines alone, so such a class gets the keyword one here
        super().__init_subclass__(**kwargs)
        if ("__init__" not in cls.__dict__ and not inspect.get_annotations(cls)
                and not getattr(cls, "__dataclass_fields__", None)):
            cls.__init__ = NKIObject.__init__  # type: ignore[method-assign]  # the keyword __init__, on a class without one


class NkiTensor(Tensor, NKIObject):
    """A tensor of the `nki` namespace (`nl.ndarray`, kernel arguments, and their views)."""

    __slots__ = ("geometry",)

    def __init__(self, storage: Storage, dims: Dims, shape: tuple[int, ...],
                 gather_indices: tuple[IndexArray, ...] | None = None) -> None:
        super().__init__(storage, dims, shape, gather_indices)
        self.geometry: Geo | None = None

    # -- geometry ------------------------------------------------------------------------------
    def _geometry(self) -> Geo:
        g = self.geometry
        if g is not None:
            return g
        if self.gather_indices is not None or isinstance(self.storage, AliasStorage) or not self.is_whole:
            raise IndexingError("this tensor is an indirect (gather/scatter) view: pass it to an instruction "
                                "directly; views of views are not available for indirect accesses")
        g = self.geometry = Geo.whole(self.storage)
        return g

    @classmethod
    def of(cls, geo: Geo) -> "NkiTensor":
        """The tensor for a geometry (checked against the root's bounds)."""
        geo.check()
        root = geo.root
        if geo.is_root_whole():
            t = cls.whole(root)
        else:
            t = cls.whole(AliasStorage(root, geo, geo.build()))
        t.geometry = geo
        return t

    def _with(self, shape: Iterable[int], bstr: Iterable[int], p0: int | None = None, foff: int | None = None,
              dtype: _dt.DType | None = None) -> "NkiTensor":
        g = self._geometry()
        return NkiTensor.of(Geo(g.root, dtype or g.dtype, tuple(shape), g.p0 if p0 is None else p0,
                                g.byte_offset if foff is None else foff, tuple(bstr)))

    # -- engine hooks (trace accesses and contiguity from the geometry) -------------------------
    def access(self) -> Access:
        a = self._access_box
        if a is None:
            g = self.geometry
            a = self._access_box = g.access() if g is not None else super().access()
        return a

    def contiguous_elems(self) -> int:
        g = self.geometry
        return g.contiguous_run() if g is not None else super().contiguous_elems()

    def inner_contiguous(self) -> bool:
        g = self.geometry
        if g is None:
            return super().inner_contiguous()
        for i in reversed(g.free_axes()):
            if g.shape[i] > 1:
                return g.byte_strides[i] == g.itemsize
        return True

    # -- public attributes ---------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype[Any] | PackedDType:
        return ndt.public(self.storage.dtype)

    @property
    def buffer(self) -> buffers.MemoryRegion:
        st = self.storage
        return buffers.of_storage(st.root if isinstance(st, AliasStorage) and st.root is not None else st)

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def itemsize(self) -> int:
        return self.storage.dtype.itemsize

    @property
    def address(self) -> tuple[int, int] | None:
        root = self._geometry().root
        if isinstance(root, PlacedStorage):
            return (root.base // root.pstride, root.base % root.pstride)
        return None

    @property
    def strides(self) -> tuple[int, ...]:
        g = self._geometry()
        F = g.root.bytes_per_partition // g.itemsize if g.onchip else 0
        return tuple(F if (g.onchip and i == 0) else b // g.itemsize for i, b in enumerate(g.byte_strides))

    @property
    def offset(self) -> int:
        g = self._geometry()
        if g.onchip:
            return g.p0 * (g.root.bytes_per_partition // g.itemsize) + g.byte_offset // g.itemsize
        return g.byte_offset // g.itemsize

    @property
    def pattern(self) -> list[list[int]]:
        return self.get_pattern()

    def get_pattern(self) -> list[list[int]]:
        """The view's access pattern as [[stride, count], ...] (elements, outermost first)."""
        return [[s, n] for s, n in zip(self.strides, self.shape)]

    def is_contiguous(self) -> bool:
        """Free axes laid out row-major without gaps (the partition stride is ignored)."""
        return self._geometry().is_contiguous()

    def is_indirect(self) -> bool:
        return self.gather_indices is not None

    def __bool__(self) -> bool:
        """NKI 0.3+ runs the kernel's Python as written: a tensor is an object, so `if t:` holds
        (library code writes `if params.expert_index:` for "the optional tensor was given"). A
        value-dependent branch needs a run-time construct (nl.while_loop, registers)."""
        return True

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key: object) -> "NkiTensor":
        g = self._geometry()
        if not isinstance(key, tuple):
            key = (key,)
        nd = len(g.shape)
        if any(k is Ellipsis for k in key):
            i = next(i for i, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (nd - (len(key) - 1)) + key[i + 1:]
        if len(key) > nd:
            raise IndexingError(f"too many indices ({len(key)}) for a tensor of shape {g.shape}")
        key = key + (slice(None),) * (nd - len(key))
        onchip = g.onchip
        shape: list[int] = []
        bstr: list[int] = []
        p0, foff = g.p0, g.byte_offset
        dropped: list[int] = []  # (position in the output, size-1 axis spec) for ints on free axes
        for axis, (k, n, s) in enumerate(zip(key, g.shape, g.byte_strides)):
            part = onchip and axis == 0
            if isinstance(k, slice):
                start, length, step = _slice(k, n, axis, self)
            elif isinstance(k, DynSlice):
                start, length, step = _int_of(k.start, "nl.ds start"), _int_of(k.size, "nl.ds size"), k.step
                if start < 0 or start + length > n:
                    raise OutOfBoundsError(f"out-of-bound access for tensor '{self.storage.name or 'tensor'}' on "
                                           f"dimension {axis}: nl.ds({start}, {length}) exceeds dimension size {n}")
            else:
                i = _int_of(k, f"index on dimension {axis}")
                if i < 0:
                    i += n
                if not 0 <= i < n:
                    raise OutOfBoundsError(f"out-of-bound access for tensor '{self.storage.name or 'tensor'}' on "
                                           f"dimension {axis}: index {i} exceeds dimension size {n}")
                if part:  # an int on the partition dim keeps it, with size 1
                    p0 += i
                    shape.append(1)
                    bstr.append(0)
                else:
                    foff += i * s
                    if onchip:
                        dropped.append(len(shape))
                continue
            if part:
                if step != 1 and length > 1:
                    raise PartitionDimError("partition-dimension access must be contiguous: a slice step "
                                            f"{step} on the partition dimension is not supported")
                p0 += start
                shape.append(length)
                bstr.append(0)
            else:
                foff += start * s
                shape.append(length)
                bstr.append(s * step)
        if onchip and len(shape) < 2:
            # an on-chip tensor stays at least 2-D: the last free dim indexed by an int stays as size 1
            shape.append(1)
            bstr.append(g.itemsize)
        return self._with(shape, bstr, p0, foff)

    def __setitem__(self, key: object, value: object) -> None:
        raise IndexingError("tensor assignment (t[...] = ...) is not part of the nki namespace: write results "
                            "with an instruction, e.g. nisa.tensor_copy(dst=t[...], src=x) or "
                            "nisa.memset(dst=t[...], value=0)")

    # -- view methods --------------------------------------------------------------------------
    def slice(self, dim: IntLike, start: IntLike, end: IntLike, step: int = 1) -> "NkiTensor":
        g = self._geometry()
        d = _dim(dim, len(g.shape), "slice dim")
        key: list[object] = [slice(None)] * len(g.shape)
        key[d] = slice(_int_of(start, "slice start"), min(_int_of(end, "slice end"), g.shape[d]), step)
        return self[tuple(key)]

    def select(self, dim: IntLike, index: object) -> "NkiTensor":
        """Index one dimension with an int, a register or a (1, 1) tensor (its run-time value)."""
        g = self._geometry()
        d = _dim(dim, len(g.shape), "select dim")
        key: list[object] = [slice(None)] * len(g.shape)
        key[d] = scalar_value(index, "select index")
        return self[tuple(key)]

    def reshape(self, *dims: SupportsInt | Sequence[SupportsInt]) -> "NkiTensor":
        given = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        g = self._geometry()
        sizes = [int(cast(SupportsInt, s)) for s in given]  # reshape(a, b) or reshape((a, b))
        total = math.prod(g.shape)
        if sizes.count(-1) == 1:
            known = math.prod(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = total // known if known else 0
        shape = tuple(sizes)
        if math.prod(shape) != total:
            raise IndexingError(f"cannot reshape a tensor of shape {g.shape} ({total} elements) into {shape}")
        if not g.is_contiguous():
            raise IndexingError(f"reshape needs a contiguous view; the view of shape {g.shape} has strides "
                                f"{self.strides} (copy it to a new tile first)")
        if g.onchip:
            if shape[0] != g.shape[0]:
                raise PartitionDimError(f"reshape must keep the partition dimension: {g.shape} -> {shape}")
            return self._with(shape, _row_major(shape, g.itemsize, onchip=True))
        return self._with(shape, _row_major(shape, g.itemsize, onchip=False))

    def reshape_dim(self, dim: IntLike, shape: Iterable[SupportsInt]) -> "NkiTensor":
        g = self._geometry()
        d = _dim(dim, len(g.shape), "reshape_dim dim")
        if g.onchip and d == 0:
            raise PartitionDimError("reshape_dim cannot split the partition dimension")
        sizes = tuple(int(s) for s in shape)
        if math.prod(sizes) != g.shape[d]:
            raise IndexingError(f"reshape_dim: {sizes} does not hold the {g.shape[d]} elements of dimension {d}")
        s = g.byte_strides[d]
        sub = []
        acc = s
        for n in reversed(sizes):
            sub.append(acc)
            acc *= n
        sub.reverse()
        return self._with(g.shape[:d] + sizes + g.shape[d + 1:], g.byte_strides[:d] + tuple(sub) + g.byte_strides[d + 1:])

    def flatten_dims(self, start: IntLike, end: IntLike) -> "NkiTensor":
        g = self._geometry()
        a, b = _dim(start, len(g.shape), "flatten start"), _dim(end, len(g.shape), "flatten end")
        if a > b:
            a, b = b, a
        if g.onchip and a == 0 and b > 0:
            raise PartitionDimError("flatten_dims cannot merge the partition dimension with free dimensions")
        for i in range(a, b):
            if g.shape[i + 1] != 1 and g.shape[i] != 1 and g.byte_strides[i] != g.byte_strides[i + 1] * g.shape[i + 1]:
                raise IndexingError(f"flatten_dims({a}, {b}): dimensions {i} and {i + 1} are not contiguous "
                                    f"(strides {self.strides})")
        inner = [i for i in range(a, b + 1) if g.shape[i] != 1]
        s = g.byte_strides[inner[-1]] if inner else g.itemsize
        n = math.prod(g.shape[a:b + 1])
        return self._with(g.shape[:a] + (n,) + g.shape[b + 1:], g.byte_strides[:a] + (s,) + g.byte_strides[b + 1:])

    def permute(self, *given: IntLike | Sequence[IntLike]) -> "NkiTensor":
        order = given[0] if len(given) == 1 and isinstance(given[0], (tuple, list)) else given  # (a, b) or a, b
        g = self._geometry()
        dims = tuple(_dim(d, len(g.shape), "permute dim") for d in order)
        if sorted(dims) != list(range(len(g.shape))):
            raise IndexingError(f"permute{dims} is not a permutation of the {len(g.shape)} dimensions")
        if g.onchip and dims[0] != 0:
            raise PartitionDimError(f"permute{dims} must keep the partition dimension first (dims[0] == 0)")
        return self._with(tuple(g.shape[d] for d in dims), tuple(g.byte_strides[d] for d in dims))

    def broadcast(self, dim: IntLike, size: SupportsInt) -> "NkiTensor":
        g = self._geometry()
        d = _dim(dim, len(g.shape), "broadcast dim")
        if g.onchip and d == 0:
            raise PartitionDimError("broadcast cannot broadcast the partition dimension (use nl.broadcast_to, "
                                    "which runs on the Tensor Engine)")
        if g.shape[d] != 1:
            raise IndexingError(f"broadcast: dimension {d} has size {g.shape[d]}, only size-1 dimensions broadcast")
        shape = list(g.shape)
        bstr = list(g.byte_strides)
        shape[d] = int(size)
        bstr[d] = 0
        return self._with(shape, bstr)

    def expand_dim(self, dim: IntLike) -> "NkiTensor":
        g = self._geometry()
        d = _int_of(dim, "expand_dim dim")
        nd = len(g.shape) + 1
        if d < 0:
            d += nd
        if not 0 <= d < nd or (g.onchip and d == 0):
            raise IndexingError(f"expand_dim({dim}): position out of range"
                                + (" (the partition dimension stays first)" if g.onchip else ""))
        return self._with(g.shape[:d] + (1,) + g.shape[d:], g.byte_strides[:d] + (g.itemsize,) + g.byte_strides[d:])

    def squeeze_dim(self, dim: IntLike) -> "NkiTensor":
        g = self._geometry()
        d = _dim(dim, len(g.shape), "squeeze_dim dim")
        if g.onchip and d == 0:
            raise PartitionDimError("squeeze_dim cannot remove the partition dimension")
        if g.shape[d] != 1:
            raise IndexingError(f"squeeze_dim({d}): dimension has size {g.shape[d]}, not 1")
        if g.onchip and len(g.shape) <= 2:
            raise PartitionDimError("an on-chip tensor keeps at least 2 dimensions")
        return self._with(g.shape[:d] + g.shape[d + 1:], g.byte_strides[:d] + g.byte_strides[d + 1:])

    def view(self, dtype: object) -> "NkiTensor":
        """Reinterpret the bytes as another dtype; the last dimension scales with the element size."""
        g = self._geometry()
        d = ndt.resolve(dtype)
        if d is g.dtype:
            return self
        old, new = g.itemsize, d.itemsize
        last = len(g.shape) - 1
        if g.shape[last] != 1 and g.byte_strides[last] != old:
            raise IndexingError(f"view({d.name}) needs a contiguous last dimension (stride 1), got strides "
                                f"{self.strides}")
        nbytes = g.shape[last] * old
        if nbytes % new or g.byte_offset % new:
            raise IndexingError(f"cannot view a last dimension of {g.shape[last]} x {old} B at byte {g.byte_offset} as "
                                f"{d.name} ({new} B elements)")
        shape = g.shape[:last] + (nbytes // new,)
        return self._with(shape, g.byte_strides[:last] + (new,), dtype=d)

    reinterpret_cast = view

    def ap(self, pattern: Sequence[Sequence[IntLike]] | None = None, offset: IntLike = 0, scalar_offset: object = None,
           vector_offset: object = None, indirect_dim: IntLike = 0, dtype: object = None) -> "NkiTensor":
        """A hardware access pattern over the tensor's raw storage (the current view's position is
        ignored): `pattern` is [[step, count], ...] in elements, outermost first; on-chip tensors
        start with [elements per partition, partitions].

        `scalar_offset` (an int, a register or a (1, 1) tensor) moves the start by its value times
        the stride of the *tensor's* dimension `indirect_dim` ("a location in number of elements on
        the indirect dimension"); `vector_offset` (a (P, 1) index tile) replaces the pattern's
        iteration over that axis by the indices, each scaled by the same stride (nki-library's
        attention_block_tkg: "the DMA engine scales token_indices[b] by d_head, the stride of
        indirect_dim=0"). A pattern that leaves the tensor is only an error when an instruction
        uses it (kernels build views that an `if` then skips, and `dma_copy(oob_mode=skip)` drops
        the elements outside)."""
        g = self._geometry()
        root = g.root
        d = ndt.resolve(dtype) if dtype is not None else g.dtype
        isz = d.itemsize
        if pattern is None:
            raise IndexingError(".ap() needs pattern=[[step, count], ...]")
        pat = [(int(_int_of(p[0], "pattern step")), int(_int_of(p[1], "pattern count"))) for p in pattern]
        if not pat:
            raise IndexingError(".ap() needs at least one [step, count] pair")
        if scalar_offset is not None and vector_offset is not None:
            raise IndexingError(".ap(): scalar_offset and vector_offset are mutually exclusive")
        start = _int_of(offset, "ap offset")
        stride = 0
        if scalar_offset is not None or vector_offset is not None:
            k = _dim(indirect_dim, len(g.shape), "indirect_dim (a dimension of the tensor)")
            stride = self._stride_in(k, d)
        if scalar_offset is not None:
            start += scalar_value(scalar_offset, "scalar_offset") * stride
        shape = tuple(n for _, n in pat)
        if vector_offset is not None:
            axis = min(_int_of(indirect_dim, "indirect_dim"), len(pat) - 1)
            return _indirect_view(self, root, d, pat, start, vector_offset, axis, stride)
        if root.memory != "hbm":
            F = root.bytes_per_partition // isz
            step0, P = pat[0]
            if P > 1 and step0 != F:
                raise PartitionDimError(f".ap(): the first [step, count] pair addresses partitions and must step "
                                        f"one partition ({F} elements of {d.name} per partition), got step {step0}; "
                                        "partition access must be contiguous")
            p0, f0 = divmod(start, F) if F else (0, 0)
            geo = Geo(root, d, shape, p0, f0 * isz, (0,) + tuple(s * isz for s, _ in pat[1:]))
        else:
            geo = Geo(root, d, shape, 0, start * isz, tuple(s * isz for s, _ in pat))
        try:
            return NkiTensor.of(geo)
        except OutOfBoundsError:
            if d is not root.dtype:
                raise
            return _pattern_gather_view(root, pat, start)

    def _stride_in(self, k: int, d: _dt.DType) -> int:
        """The stride of the view's dimension k, in elements of dtype d."""
        g = self._geometry()
        elems = self.strides[k]
        nbytes = elems * g.itemsize
        if nbytes % d.itemsize:
            raise IndexingError(f".ap(dtype={d.name}): the stride of dimension {k} ({nbytes} bytes) is not a whole "
                                "number of elements")
        return nbytes // d.itemsize

    def vector_select(self, index: object, dim: IntLike = 0) -> "NkiTensor":
        """Rows of dimension `dim` chosen at run time by an index tile (one index per output row):
        a gather/scatter view for DMA (the HBM form of `.ap(vector_offset=...)`)."""
        return _select_rows(self, index, dim, "vector_select")

    def indirect(self, index: object, num_elem: IntLike | None = None, dim: IntLike = 0) -> "NkiTensor":
        """Tensor Indirection (NeuronCore-v4): output partition p reads partition index[p] of this
        view (the first `num_elem` free elements, default all)."""
        from nkitui.emulator.errors import EngineOpError
        from nkitui.emulator.runtime import current

        run = current()
        if run.target.nc_version < 4:
            raise EngineOpError(f"tensor indirection (.indirect) needs NeuronCore-v4 (trn3); target is "
                                f"{run.target.name}")
        if _int_of(dim, "indirect dim") != 0:
            raise UnsupportedError(".indirect() selects partitions (dim=0) only")
        g = self._geometry()
        if not g.onchip or not g.is_contiguous():
            raise IndexingError(".indirect() needs an on-chip view with contiguous free dimensions")
        idx = _index_values(index).reshape(-1)
        F = math.prod(g.shape[1:])
        n = F if num_elem is None else _int_of(num_elem, "num_elem")
        if not 0 < n <= F:
            raise IndexingError(f".indirect(num_elem={n}): the view has {F} elements per partition")
        part = (g.p0 + idx).reshape(-1, 1)
        flat = np.broadcast_to(g.byte_offset // g.itemsize + np.arange(n, dtype=np.int64), (idx.size, n))
        return _gather_view_onchip(g.root, np.broadcast_to(part, (idx.size, n)), flat, (idx.size, n))

    def rearrange(self, pattern: str, **sizes: int) -> "NkiTensor":
        """einops-style view: `"p (a b) -> p a b"`, `"p a b -> p b a"`, `"p a b -> p (a b)"`."""
        left, _, right = pattern.partition("->")
        lhs, rhs = _parse_axes(left), _parse_axes(right)
        g = self._geometry()
        if len(lhs) != len(g.shape):
            raise IndexingError(f"rearrange '{pattern}': the left side names {len(lhs)} dimensions, the tensor has "
                                f"{len(g.shape)}")
        t = self
        # split grouped input dims
        names: list[str] = []
        pos = 0
        for grp, n in zip(lhs, g.shape):
            if len(grp) > 1:
                known = math.prod(sizes[a] for a in grp if a in sizes)
                missing = [a for a in grp if a not in sizes]
                if len(missing) > 1:
                    raise IndexingError(f"rearrange: give the sizes of {missing[1:]} as keyword arguments")
                dims = tuple(sizes[a] if a in sizes else n // known for a in grp)
                t = t.reshape_dim(pos, dims)
            names.extend(grp)
            pos += len(grp)
        flat_rhs = [a for grp in rhs for a in grp]
        if sorted(flat_rhs) != sorted(names):
            raise IndexingError(f"rearrange '{pattern}': both sides must name the same axes")
        t = t.permute(tuple(names.index(a) for a in flat_rhs))
        pos = 0
        for grp in rhs:
            if len(grp) > 1:
                t = t.flatten_dims(pos, pos + len(grp) - 1)
            pos += 1
        return t

    def __repr__(self) -> str:
        return f"<NkiTensor {self.storage.memory} {self.shape} {self.storage.dtype.name} '{self.storage.name}'>"


def _parse_axes(side: str) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    group: list[str] | None = None
    for tok in side.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            group = []
        elif tok == ")":
            if group is None:
                raise IndexingError(f"rearrange: ')' without '(' in '{side.strip()}'")
            out.append(tuple(group))
            group = None
        elif group is not None:
            group.append(tok)
        else:
            out.append((tok,))
    if group is not None:
        raise IndexingError(f"rearrange: '(' without ')' in '{side.strip()}'")
    return out


def _slice(k: slice, n: int, axis: int, t: Tensor) -> tuple[int, int, int]:
    step = 1 if k.step is None else _int_of(k.step, "slice step")
    if step == 0:
        raise IndexingError("slice step cannot be zero")
    name = t.storage.name or "tensor"
    if step > 0:
        a = 0 if k.start is None else _int_of(k.start, "slice start")
        b = n if k.stop is None else _int_of(k.stop, "slice stop")
        a = a + n if a < 0 else a
        b = b + n if b < 0 else b
        length = max(0, -(-(b - a) // step))
        if length and (a < 0 or a + (length - 1) * step >= n):
            raise OutOfBoundsError(f"out-of-bound access for tensor '{name}' on dimension {axis}: index range "
                                   f"[{a}, {b - 1}] exceeds dimension size {n}")
        return a, length, step
    a = n - 1 if k.start is None else _int_of(k.start, "slice start")
    a = a + n if a < 0 else a
    if k.stop is None:
        length = a // (-step) + 1
    else:
        b = _int_of(k.stop, "slice stop")
        b = b + n if b < 0 else b
        length = max(0, -(-(a - b) // (-step)))
    if length and (a >= n or a + (length - 1) * step < 0):
        raise OutOfBoundsError(f"out-of-bound access for tensor '{name}' on dimension {axis}: start {a} with "
                               f"step {step} leaves dimension size {n}")
    return a, length, step


def _row_major(shape: Sequence[int], isz: int, onchip: bool) -> tuple[int, ...]:
    bstr = [0] * len(shape)
    acc = isz
    for i in range(len(shape) - 1, 0 if onchip else -1, -1):
        bstr[i] = acc
        acc *= shape[i]
    return tuple(bstr)


def _index_values(index: object) -> IndexArray:
    from nkitui.emulator.runtime import current

    if isinstance(index, Tensor):
        if not current().execute or index.storage.data is None:
            return np.zeros(index.shape, dtype=np.int64)
        return np.asarray(index.array()).astype(np.int64)
    return np.asarray(index, dtype=np.int64)  # an index list or array of the kernel's


def _indirect_view(t: NkiTensor, root: Storage, d: _dt.DType, pat: Pattern, offset: int, vector_offset: object,
                   k: int, stride: int) -> NkiTensor:
    """.ap(vector_offset=idx, indirect_dim=...): axis k of the pattern runs over the indices, each
    times `stride` (the tensor's stride of the indirect dimension; the pattern's own step on that
    axis is not used), the other axes follow the pattern. Elements outside the tensor stay out of
    range, so oob_mode=skip can drop them and oob_mode=error reports them."""
    if d is not root.dtype:
        raise UnsupportedError(".ap(vector_offset=...) with a dtype reinterpretation is not supported")
    idx = _index_values(vector_offset).reshape(-1)
    shape = tuple(n for _, n in pat)
    if idx.size < shape[k]:
        raise IndexingError(f".ap(vector_offset=...): {idx.size} indices for an indirect dimension of {shape[k]}")
    steps = [(s if axis != k else stride, n) for axis, (s, n) in enumerate(pat)]
    grids = {k: idx[:shape[k]]}
    if root.memory != "hbm":
        return _pattern_gather_view(root, steps, offset, grids)
    return _gather_view(root, _flat_indices(steps, offset, grids), shape)


def _flat_indices(pat: Pattern, offset: int, grids: Mapping[int, IndexArray] | None = None) -> IndexArray:
    """Element offsets (row-major over the root) of every element of a pattern; `grids` replaces
    the iteration of some axes by given values (vector offsets)."""
    shape = tuple(n for _, n in pat)
    flat = np.full(shape, offset, dtype=np.int64)
    for axis, (step, n) in enumerate(pat):
        grid = grids[axis] if grids and axis in grids else np.arange(n, dtype=np.int64)
        shp = [1] * len(shape)
        shp[axis] = n
        flat = flat + (np.asarray(grid, dtype=np.int64) * step).reshape(shp)
    return flat


def _pattern_gather_view(root: Storage, pat: Pattern, offset: int,
                         grids: Mapping[int, IndexArray] | None = None) -> NkiTensor:
    """The elements of a pattern as a gather view of `root` (used when a pattern leaves the
    tensor, and for on-chip vector offsets): out-of-range elements stay out of range, so the
    instruction that uses the view reports them (or a DMA with oob_mode=skip drops them)."""
    shape = tuple(n for _, n in pat)
    if root.memory == "hbm":
        return _gather_view(root, _flat_indices(pat, offset, grids), shape)
    F = math.prod(root.shape[1:])
    flat = _flat_indices(pat, offset, grids)  # partition * F + element inside the partition
    part = np.floor_divide(flat, F) if F else flat
    free = flat - part * F if F else np.zeros_like(flat)
    return _gather_view_onchip(root, part, free, shape)


def _gather_view(root: Storage, flat: IndexArray, shape: Sequence[int]) -> NkiTensor:
    """A gather view of `root` from flat (row-major) element indices."""
    inner = math.prod(root.shape[1:]) if len(root.shape) > 1 else 1
    first = np.floor_divide(flat, inner) if inner else flat
    rest = np.mod(flat, inner) if inner else np.zeros_like(flat)
    idx = [first]
    if len(root.shape) > 1:
        idx.extend(np.unravel_index(rest.reshape(-1), root.shape[1:]))
        idx = [idx[0]] + [a.reshape(flat.shape) for a in idx[1:]]
    return NkiTensor(root, None, tuple(shape), tuple(np.asarray(a, dtype=np.int64) for a in idx))


def _gather_view_onchip(root: Storage, part: IndexArray, free: IndexArray, shape: Sequence[int]) -> NkiTensor:
    """A gather view of an on-chip root: partition indices and flat free-element indices (a free
    index outside the partition stays out of range on the first free dimension)."""
    idx = [np.asarray(part, dtype=np.int64)]
    free = np.asarray(free, dtype=np.int64)
    if len(root.shape) > 1:
        inner = math.prod(root.shape[2:])
        first = np.floor_divide(free, inner) if inner else free
        rest = np.mod(free, inner) if inner else np.zeros_like(free)
        idx.append(first.reshape(free.shape))
        if len(root.shape) > 2:
            idx.extend(a.reshape(free.shape) for a in np.unravel_index(rest.reshape(-1), root.shape[2:]))
    return NkiTensor(root, None, tuple(shape), tuple(np.broadcast_to(a, tuple(shape)) for a in idx))


def _select_rows(t: NkiTensor, index: object, dim: IntLike, api: str) -> NkiTensor:
    g = t._geometry()
    d = _dim(dim, len(g.shape), f"{api} dim")
    if not g.is_root_whole():
        raise IndexingError(f"{api} works on a whole tensor (take views after selecting rows)")
    idx = _index_values(index).reshape(-1)
    root = g.root
    shape = g.shape[:d] + (idx.size,) + g.shape[d + 1:]
    grids = []
    for axis, n in enumerate(shape):
        shp = [1] * len(shape)
        shp[axis] = n
        grids.append((idx if axis == d else np.arange(n, dtype=np.int64)).reshape(shp))
    return NkiTensor(root, None, shape, tuple(np.broadcast_to(a, shape) for a in grids))

# The names a kernel reads off its tensors' types are the NKI module's (`nki.language.NkiTensor`, as
# `nl.NkiTensor` is), not the emulator's: `"nkitui" in str(type(a))` must not tell a kernel where it is judged
# (red team A, finding 4). nkitui's own code tests types by identity and isinstance, never by these names; the
# static HACK-ENV-PROBE rule fails such probes, and docs/executor.md says what no disguise can hide.
NkiTensor.__module__ = "nki.language"
NKIObject.__module__ = "nki.language"

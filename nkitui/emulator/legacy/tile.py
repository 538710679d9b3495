"""The legacy front end's tensor: NumPy-like indexing with arange/mgrid grids, operators, `+=`.

* `t[i_p, i_f]` with index grids, ints, slices or `nl.ds` (see indexing.py);
* `t[...] = value` copies a tile into the view (or memsets a scalar). When the value is the fresh,
  unnamed result of the previous instruction, that instruction is retargeted to write the view
  directly (as the compiler does) instead of adding a copy;
* `psum += nisa.nc_matmul(...)` / `nl.matmul(...)` accumulates into the PSUM tile in fp32: the
  matmul is recorded as one accumulating instruction into `psum`, like on the hardware;
* arithmetic operators map to the `nl` functions (`a + b` is `nl.add(a, b)`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Self, SupportsInt, cast

import numpy as np

from nkitui.emulator.api_types import Dims, Operand
from nkitui.emulator.errors import IndexingError
from nkitui.emulator.legacy.indexing import AffineExpr, Grid, GridExpr, IndexExpr, MaskPlan
from nkitui.emulator.memory import Storage
from nkitui.emulator.runtime import current
from nkitui.emulator.tensor import DynSlice, Tensor
from nkitui.emulator.trace import Instruction

if TYPE_CHECKING:  # the legacy language module (operators dispatch to it), set when it is imported: it imports this
    from nkitui.emulator.legacy import language as _nl
else:
    _nl = None
_TEMP_REFS = 0  # sys.getrefcount of an unnamed temporary inside __setitem__ (calibrated below)


_ADVANCED = (IndexExpr, Tensor)


class LegacyTensor(Tensor):
    # _mm: the nc_matmul Instruction behind a fresh matmul result (or True);
    # _gaxes: for views made with index grids, the grid axis (position from the end) of each dim
    # _written: for a fresh result tile that a mask wrote only partly, that MaskPlan
    __slots__ = ("_matmul_instruction", "_grid_axes", "_written")

    def __init__(self, storage: Storage, dims: Dims, shape: tuple[int, ...],
                 gather_indices: tuple[Grid, ...] | None = None) -> None:
        # Tensor.__init__'s fields, set here rather than by calling it: a Python call fewer per legacy tile and
        # view (every legacy instruction makes one); tests/emulator/test_hot_path_checks.py compares the two
        self.storage = storage
        self.dims = dims  # type: ignore[assignment]  # as Tensor.__init__: None on a gather view
        self.shape = shape
        self.gather_indices = gather_indices
        self._array_view = None
        self._access_box = None
        self._in_bounds = False
        self._index_bounds = None
        self._producer = None
        self._tile_checked = False
        self._matmul_instruction: Instruction | bool | None = None
        self._grid_axes: tuple[int, ...] | None = None
        self._written: MaskPlan | None = None

    __hash__ = object.__hash__

    @property
    def buffer(self) -> str:
        return self.storage.memory

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key: object) -> LegacyTensor:
        if type(key) is not tuple:
            key = (key,)
        for k in key:
            if isinstance(k, _ADVANCED):
                break
        else:
            return self.basic_index(key)
        if any(isinstance(k, (slice, DynSlice)) or k is Ellipsis for k in key):
            raise IndexingError("err_unsupported_mixing_basic_advanced_tensor_indexing: do not mix slices with "
                                "nl.arange / nl.mgrid indices in one subscript; use arange grids for every "
                                "dimension (or slices for every dimension)")
        if len(key) != len(self.shape):
            raise IndexingError(f"an index-grid subscript needs one index per dimension: got {len(key)} for a "
                                f"tensor of shape {self.shape}")
        return _advanced_index(self, key)

    # -- assignment ----------------------------------------------------------------------------
    def __setitem__(self, key: object, value: object) -> None:
        temp = sys.getrefcount(value) <= _TEMP_REFS
        dst = self[key]
        if isinstance(value, Tensor):
            if value.storage is dst.storage and value.gather_indices is None and dst.gather_indices is None and value.dims == dst.dims:
                return  # `t[k] += x` writes back the view it already updated in place
            _nl._assign(dst, value, temp)
        else:
            _nl._assign_scalar(dst, value)

    def __iadd__(self, other: Operand) -> Self:  # type: ignore[misc]  # in place: tiles and scalars, not index grids
        _nl._inplace(self, other, "add")
        return self

    def __isub__(self, other: Operand) -> Self:  # type: ignore[misc]  # in place: tiles and scalars, not index grids
        _nl._inplace(self, other, "subtract")
        return self

    def __imul__(self, other: Operand) -> Self:  # type: ignore[misc]  # in place: tiles and scalars, not index grids
        _nl._inplace(self, other, "multiply")
        return self

    def __itruediv__(self, other: Operand) -> Self:
        _nl._inplace(self, other, "divide")
        return self

    # -- operators -----------------------------------------------------------------------------
    # With an index expression, an index tile forms a dynamic index (`t[i_p, idx_tile[0, j] + i_f]`).
    def __add__(self, o: Operand | IndexExpr) -> LegacyTensor | GridExpr:
        if isinstance(o, IndexExpr):
            return GridExpr(_index_values(self) + o.grid())
        return _nl.add(self, o)

    def __radd__(self, o: Operand | IndexExpr) -> LegacyTensor | GridExpr:
        if isinstance(o, IndexExpr):
            return GridExpr(o.grid() + _index_values(self))
        return _nl.add(o, self)

    def __sub__(self, o: Operand | IndexExpr) -> LegacyTensor | GridExpr:
        if isinstance(o, IndexExpr):
            return GridExpr(_index_values(self) - o.grid())
        return _nl.subtract(self, o)

    def __rsub__(self, o: Operand | IndexExpr) -> LegacyTensor | GridExpr:
        if isinstance(o, IndexExpr):
            return GridExpr(o.grid() - _index_values(self))
        return _nl.subtract(o, self)

    def __mul__(self, o: Operand | IndexExpr) -> LegacyTensor | GridExpr:
        if isinstance(o, IndexExpr):
            return GridExpr(_index_values(self) * o.grid())
        return _nl.multiply(self, o)

    def __rmul__(self, o: Operand | IndexExpr) -> LegacyTensor | GridExpr:
        if isinstance(o, IndexExpr):
            return GridExpr(o.grid() * _index_values(self))
        return _nl.multiply(o, self)

    def __truediv__(self, o: Operand) -> LegacyTensor:
        return _nl.divide(self, o)

    def __rtruediv__(self, o: Operand) -> LegacyTensor:
        return _nl.divide(o, self)

    def __pow__(self, o: Operand) -> LegacyTensor:
        return _nl.power(self, o)

    def __neg__(self) -> LegacyTensor:
        return _nl.negative(self)

    def __abs__(self) -> LegacyTensor:
        return _nl.abs(self)

    def __lt__(self, o: Operand) -> LegacyTensor:
        return _nl.less(self, o)

    def __le__(self, o: Operand) -> LegacyTensor:
        return _nl.less_equal(self, o)

    def __gt__(self, o: Operand) -> LegacyTensor:
        return _nl.greater(self, o)

    def __ge__(self, o: Operand) -> LegacyTensor:
        return _nl.greater_equal(self, o)

    def __eq__(self, o: Operand) -> LegacyTensor:  # type: ignore[override]  # element-wise, as numpy's ==
        return _nl.equal(self, o)

    def __ne__(self, o: Operand) -> LegacyTensor:  # type: ignore[override]  # element-wise, as numpy's !=
        return _nl.not_equal(self, o)

    def __and__(self, o: Operand) -> LegacyTensor:
        return _nl.bitwise_and(self, o)

    def __or__(self, o: Operand) -> LegacyTensor:
        return _nl.bitwise_or(self, o)

    def __xor__(self, o: Operand) -> LegacyTensor:
        return _nl.bitwise_xor(self, o)

    def __lshift__(self, o: Operand) -> LegacyTensor:
        return _nl.left_shift(self, o)

    def __rshift__(self, o: Operand) -> LegacyTensor:
        return _nl.right_shift(self, o)

    def __invert__(self) -> LegacyTensor:
        return _nl.invert(self)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: object, **kwargs: object) -> object:
        # np.exp(tile), np.add(a, b): run the matching nl function on the emulator
        fn = getattr(_nl, ufunc.__name__, None) if method == "__call__" else None
        if fn is None or kwargs.get("out") is not None:
            return NotImplemented
        return fn(*inputs, **{k: v for k, v in kwargs.items() if k in ("dtype",)})

    # -- reshaping -----------------------------------------------------------------------------
    def reshape(self, *dims: SupportsInt | Sequence[SupportsInt], **kwargs: object) -> Self:
        """A reshaped view of a whole tensor (same storage, row-major order); `t.reshape((a, b))`,
        `t.reshape(a, b)` or `t.reshape(shape=(a, b))`."""
        given: tuple[object, ...] = dims
        if "shape" in kwargs:
            if given:
                raise TypeError("reshape() got the shape both positionally and as shape=")
            given = (kwargs.pop("shape"),)
        if kwargs:
            raise TypeError(f"reshape() got unexpected keyword arguments {sorted(kwargs)}")
        if len(given) == 1 and isinstance(given[0], (tuple, list)):
            given = tuple(given[0])
        shape = tuple(int(cast(SupportsInt, s)) for s in given)  # a kernel's sizes (int() says if not)
        if not self.is_whole:
            raise IndexingError("reshape is supported on whole tensors only (not on views)")
        st = self.storage
        n = int(np.prod(shape))
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape = tuple(st.data.size // known if s == -1 else s for s in shape) if st.data is not None else \
                tuple(int(np.prod(st.shape)) // known if s == -1 else s for s in shape)
            n = int(np.prod(shape))
        if n != int(np.prod(st.shape)):
            raise IndexingError(f"cannot reshape a tensor of shape {st.shape} into {shape}")
        from nkitui.emulator.memory import Storage
        alias = Storage(st.name, st.memory, shape, st.dtype, None if st.data is None else st.data.reshape(shape),
                        pax=0 if st.partition_dim >= 0 else -1, kind=st.kind)
        alias.id = st.id  # same allocation as far as the trace is concerned
        run = current()
        if st.id in run.input_ids:
            run.input_ids.add(alias.id)
        return type(self).whole(alias)

    def view(self, dtype: object) -> Self:
        """Reinterpret a whole tensor's bytes as another dtype (the last dim scales with the size)."""
        from nkitui.emulator import dtypes as dt
        from nkitui.emulator.memory import Storage

        d = dt.dtype_of(dtype)
        st = self.storage
        if not self.is_whole:
            raise IndexingError("view(dtype) is supported on whole tensors only (not on views)")
        old, new = st.dtype.itemsize, d.itemsize
        last = st.shape[-1] * old
        if last % new:
            raise IndexingError(f"cannot view a last dimension of {st.shape[-1]} x {old} B as {d.name}")
        shape = st.shape[:-1] + (last // new,)
        data = None if st.data is None else st.data.view(d.np).reshape(shape)
        alias = Storage(st.name, st.memory, shape, d, data, pax=st.partition_dim if st.partition_dim >= 0 else 0, kind=st.kind)
        alias.id = st.id
        return type(self).whole(alias)

    def broadcast_to(self, shape: Sequence[SupportsInt]) -> Tensor:
        return _nl.broadcast_to(self, shape=shape)

    @property
    def tensor(self) -> Self:
        return self


def _index_axes(k: object, nd: int) -> list[int]:
    """Grid axes (positions from the end) an index refers to, in grid order."""
    if isinstance(k, AffineExpr):
        return sorted({pfe for pfe, _, _ in k.terms}, reverse=True)
    if isinstance(k, (IndexExpr, Tensor)):
        shape = k.grid().shape if isinstance(k, IndexExpr) else k.shape
        return [len(shape) - 1 - i for i, n in enumerate(shape) if n > 1]
    return []


def _advanced_index(base: LegacyTensor, key: tuple[object, ...]) -> LegacyTensor:
    """Index with nl.arange / nl.mgrid grids (and ints, and index tiles for indirect access).

    The first indexed subscript's grid axes give the partition dimension; the other grid axes
    follow in grid order, as in NumPy's advanced indexing (so `t[i_p, i_f1 * F2 + i_f2]` is a 3-D
    tile over the (p, f1, f2) grid, and so is `t[i_p, i_f2, i_f1]`). Grids broadcast like NumPy
    (right-aligned); each dimension remembers its grid axis so that masks built from the same
    grids line up with it.
    """
    shapes = []
    for k in key:
        if isinstance(k, AffineExpr):
            if k.nd == 1 and k.terms:
                raise IndexingError("err_1d_arange_not_supported: index with nl.arange(n)[:, None] (partition) "
                                    "or nl.arange(n)[None, :] (free), not a 1-D nl.arange")
            shapes.append(k.shape)
        elif isinstance(k, IndexExpr):
            shapes.append(k.grid().shape)
        elif isinstance(k, Tensor):
            shapes.append(k.shape)
    try:
        gshape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise IndexingError(f"index grids of shapes {shapes} do not broadcast together") from None
    G = len(gshape)
    lead: list[int] = []  # the partition dimension: the first indexed subscript's grid axes
    for k in key:
        lead = _index_axes(k, G)
        if lead:
            break
    # the other dimensions follow the grid, as NumPy advanced indexing orders a broadcast result
    # (`t[w.p, 2 * i + w.y, 2 * w.x + w.z]` over an mgrid (p, x, y, z) is a (p, x, y, z) tile)
    rest = sorted({pfe for k in key for pfe in _index_axes(k, G)} - set(lead), reverse=True)
    dims: list[int] = lead + rest
    if len(dims) < 2:  # a tile keeps two dimensions: add unit grid axes in grid order
        spare = [p for p in range(G - 1, -1, -1) if p not in dims]
        while len(dims) < 2 and spare:
            p = spare.pop(0)
            dims.append(p)
            dims.sort(reverse=True)
    out_shape = tuple(gshape[G - 1 - p] for p in dims)
    if len(out_shape) < 2:
        out_shape = out_shape + (1,) * (2 - len(out_shape))
    # fast path: every index an int or a one-axis affine range on its own grid axis
    specs: list[tuple[str, int] | tuple[str, int, int, int, int]] = []
    seen = set()
    fast = True
    for k in key:
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            specs.append(("i", int(k)))
        elif isinstance(k, AffineExpr) and len(k.terms) <= 1:
            if not k.terms:
                specs.append(("i", k.offset))
                continue
            pfe, size, coeff = k.terms[0]
            if coeff == 0 or pfe in seen:
                fast = False
                break
            seen.add(pfe)
            specs.append(("r", k.offset, coeff, size, dims.index(pfe)))
        else:
            fast = False
            break
    if fast:
        view = base.compose(specs, out_shape)
    else:
        # gather view: each index as an integer grid laid out in the tile's dimension order
        order = [G - 1 - p for p in dims] + [a for a in range(G) if (G - 1 - a) not in dims]
        grids: list[Grid | int] = []
        for k in key:
            if isinstance(k, IndexExpr):
                g = k.grid()
            elif isinstance(k, Tensor):
                g = _index_values(k)
            else:
                grids.append(int(cast(SupportsInt, k)))  # an int subscript (the others are grids)
                continue
            g = np.broadcast_to(g.reshape((1,) * (G - g.ndim) + g.shape), gshape)
            grids.append(np.transpose(g, order).reshape(out_shape))
        view = _gather(base, grids, out_shape)
    view._grid_axes = tuple(dims) + (-1,) * (len(out_shape) - len(dims))
    return view


def _gather(base: LegacyTensor, grids: Sequence[Grid | int], out_shape: tuple[int, ...]) -> LegacyTensor:
    """A gather view: `grids[r]` gives, per output element, the index along base dim r."""
    idx = base.index_arrays()
    shape = base.shape
    clipped = [np.clip(g, 0, n - 1) if isinstance(g, np.ndarray) else min(max(g, 0), n - 1)
               for g, n in zip(grids, shape)]
    key = tuple(clipped)
    fancy = [np.broadcast_to(np.broadcast_to(a, shape)[key], out_shape) for a in idx]
    if base.gather_indices is None:
        # indices outside the view: extend linearly (range views) so bounds checks see them
        for r, (g, c) in enumerate(zip(grids, clipped)):
            delta = np.asarray(g) - np.asarray(c)
            if np.any(delta):
                for d, e in enumerate(base.dims):
                    if e[3] == r:
                        fancy[d] = np.broadcast_to(fancy[d] + delta * e[1], out_shape)
    return type(base)(base.storage, None, tuple(out_shape), tuple(fancy))


def _index_values(t: Tensor) -> np.ndarray:
    """Values of an index tile used for indirect (dynamic) indexing."""
    run = current()
    if not run.execute or t.storage.data is None:
        return np.zeros(t.shape, dtype=np.int64)  # shape-only mode: indices are unknown
    return np.asarray(t.array()).astype(np.int64)


def _calibrate() -> int:
    class Probe:
        seen = 0

        def __setitem__(self, key: object, value: object) -> None:
            Probe.seen = sys.getrefcount(value)

    p = Probe()
    p[0] = object()
    return Probe.seen


_TEMP_REFS = _calibrate()

# The module a kernel reads off its tensors' type is the legacy NKI language module, not the emulator's
# (red team A, finding 4: see nkitui.emulator.newns.tensor for the new namespace).
LegacyTensor.__module__ = "neuronxcc.nki.language"

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

import numpy as np

from nkitui.emulator.errors import IndexingError
from nkitui.emulator.legacy.indexing import AffineExpr, GridExpr, IndexExpr
from nkitui.emulator.runtime import current
from nkitui.emulator.tensor import DynSlice, Tensor

_nl = None  # the legacy language module, set when it is imported (operators dispatch to it)
_TEMP_REFS = 0  # sys.getrefcount of an unnamed temporary inside __setitem__ (calibrated below)


def _advanced(k) -> bool:
    return isinstance(k, (IndexExpr, Tensor))


class LegacyTensor(Tensor):
    __slots__ = ("_mm",)  # the nc_matmul Instruction behind a fresh matmul result (or True)

    def __init__(self, st, ent, shape, fancy=None) -> None:
        super().__init__(st, ent, shape, fancy)
        self._mm = None

    __hash__ = object.__hash__

    @property
    def buffer(self) -> str:
        return self.st.memory

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if not any(_advanced(k) for k in key):
            return self.basic_index(key)
        if any(isinstance(k, (slice, DynSlice)) or k is Ellipsis for k in key):
            raise IndexingError("err_unsupported_mixing_basic_advanced_tensor_indexing: do not mix slices with "
                                "nl.arange / nl.mgrid indices in one subscript; use arange grids for every "
                                "dimension (or slices for every dimension)")
        if len(key) != len(self.shape):
            raise IndexingError(f"an index-grid subscript needs one index per dimension: got {len(key)} for a "
                                f"tensor of shape {self.shape}")
        for k in key:
            if isinstance(k, AffineExpr) and k.nd == 1 and k.terms:
                raise IndexingError("err_1d_arange_not_supported: index with nl.arange(n)[:, None] (partition) "
                                    "or nl.arange(n)[None, :] (free), not a 1-D nl.arange")
        shapes = []
        for k in key:
            if isinstance(k, AffineExpr):
                shapes.append(k.shape)
            elif isinstance(k, IndexExpr):
                shapes.append(k.grid().shape)
            elif isinstance(k, Tensor):
                shapes.append(k.shape)
        try:
            gshape = np.broadcast_shapes(*shapes)
        except ValueError:
            raise IndexingError(f"index grids of shapes {shapes} do not broadcast together") from None
        G = len(gshape)
        # fast path: every dim an int or a one-axis affine range on its own grid axis
        specs = []
        used = set()
        fast = True
        for k in key:
            if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                specs.append(("i", int(k)))
            elif isinstance(k, AffineExpr) and len(k.terms) <= 1:
                if not k.terms:
                    specs.append(("i", k.offset))
                    continue
                pfe, size, coeff = k.terms[0]
                ax = G - 1 - pfe
                if coeff == 0 or ax in used or size != gshape[ax]:
                    fast = False
                    break
                used.add(ax)
                specs.append(("r", k.offset, coeff, size, ax))
            else:
                fast = False
                break
        if fast:
            return self.compose(specs, gshape)
        grids = []
        for k in key:
            if isinstance(k, IndexExpr):
                grids.append(k.grid())
            elif isinstance(k, Tensor):
                grids.append(_index_values(k))
            else:
                grids.append(int(k))
        view = self.gather_index_safe(grids, gshape)
        return view

    def gather_index_safe(self, grids, gshape):
        # out-of-range indices are only an error if an instruction touches them (masks, oob_mode):
        # clip for the gather of index arrays, then rebuild from the raw index values
        base = self.index_arrays()
        shape = self.shape
        fancy = []
        clipped = []
        for r, (g, n) in enumerate(zip(grids, shape)):
            clipped.append(np.clip(g, 0, n - 1) if isinstance(g, np.ndarray) else min(max(g, 0), n - 1))
        key = tuple(clipped)
        for d, a in enumerate(base):
            a = np.broadcast_to(a, shape)
            vals = a[key]
            fancy.append(np.broadcast_to(vals, gshape))
        # re-apply the unclipped offsets so that bounds checks see the real indices
        for r, (g, c) in enumerate(zip(grids, clipped)):
            if isinstance(g, np.ndarray) and not np.array_equal(g, c) or (not isinstance(g, np.ndarray) and g != c):
                d = self._storage_dim(r)
                if d is not None:
                    step = self.ent[d][1] if self.fancy is None else 1
                    fancy[d] = np.broadcast_to(fancy[d] + (np.asarray(g) - np.asarray(c)) * step, gshape)
        return type(self)(self.st, None, tuple(gshape), tuple(fancy))

    def _storage_dim(self, r: int):
        if self.fancy is not None:
            return None
        for d, e in enumerate(self.ent):
            if e[3] == r:
                return d
        return None

    # -- assignment ----------------------------------------------------------------------------
    def __setitem__(self, key, value) -> None:
        temp = sys.getrefcount(value) <= _TEMP_REFS
        dst = self[key]
        if isinstance(value, Tensor):
            if value.st is dst.st and value.fancy is None and dst.fancy is None and value.ent == dst.ent:
                return  # `t[k] += x` writes back the view it already updated in place
            _nl._assign(dst, value, temp)
        else:
            _nl._assign_scalar(dst, value)

    def __iadd__(self, other):
        _nl._inplace(self, other, "add")
        return self

    def __isub__(self, other):
        _nl._inplace(self, other, "subtract")
        return self

    def __imul__(self, other):
        _nl._inplace(self, other, "multiply")
        return self

    def __itruediv__(self, other):
        _nl._inplace(self, other, "divide")
        return self

    # -- operators -----------------------------------------------------------------------------
    def __add__(self, o):
        return _nl.add(self, o)

    def __radd__(self, o):
        return _nl.add(o, self)

    def __sub__(self, o):
        return _nl.subtract(self, o)

    def __rsub__(self, o):
        return _nl.subtract(o, self)

    def __mul__(self, o):
        return _nl.multiply(self, o)

    def __rmul__(self, o):
        return _nl.multiply(o, self)

    def __truediv__(self, o):
        return _nl.divide(self, o)

    def __rtruediv__(self, o):
        return _nl.divide(o, self)

    def __pow__(self, o):
        return _nl.power(self, o)

    def __neg__(self):
        return _nl.negative(self)

    def __abs__(self):
        return _nl.abs(self)

    def __lt__(self, o):
        return _nl.less(self, o)

    def __le__(self, o):
        return _nl.less_equal(self, o)

    def __gt__(self, o):
        return _nl.greater(self, o)

    def __ge__(self, o):
        return _nl.greater_equal(self, o)

    def __eq__(self, o):
        return _nl.equal(self, o)

    def __ne__(self, o):
        return _nl.not_equal(self, o)

    def __and__(self, o):
        return _nl.bitwise_and(self, o)

    def __or__(self, o):
        return _nl.bitwise_or(self, o)

    def __xor__(self, o):
        return _nl.bitwise_xor(self, o)

    def __lshift__(self, o):
        return _nl.left_shift(self, o)

    def __rshift__(self, o):
        return _nl.right_shift(self, o)

    def __invert__(self):
        return _nl.invert(self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # np.exp(tile), np.add(a, b): run the matching nl function on the emulator
        fn = getattr(_nl, ufunc.__name__, None) if method == "__call__" else None
        if fn is None or kwargs.get("out") is not None:
            return NotImplemented
        return fn(*inputs, **{k: v for k, v in kwargs.items() if k in ("dtype",)})

    # -- reshaping -----------------------------------------------------------------------------
    def reshape(self, *shape):
        """A reshaped view of a whole tensor (same storage, row-major order)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if not self.is_whole:
            raise IndexingError("reshape is supported on whole tensors only (not on views)")
        st = self.st
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
                        pax=0 if st.pax >= 0 else -1, kind=st.kind)
        alias.id = st.id  # same allocation as far as the trace is concerned
        run = current()
        if st.id in run.input_ids:
            run.input_ids.add(alias.id)
        return type(self).whole(alias)

    @property
    def tensor(self):
        return self


def _index_values(t: Tensor) -> np.ndarray:
    """Values of an index tile used for indirect (dynamic) indexing."""
    run = current()
    if not run.execute or t.st.data is None:
        return np.zeros(t.shape, dtype=np.int64)  # shape-only mode: indices are unknown
    return np.asarray(t.array()).astype(np.int64)


def _calibrate() -> int:
    class Probe:
        seen = 0

        def __setitem__(self, key, value):
            Probe.seen = sys.getrefcount(value)

    p = Probe()
    p[0] = object()
    return Probe.seen


_TEMP_REFS = _calibrate()

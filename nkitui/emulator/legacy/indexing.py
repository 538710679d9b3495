"""Legacy index grids: `nl.arange`, `nl.mgrid`, affine index expressions and mask predicates.

`nl.arange(128)[:, None]` is an affine expression over one axis of a 2-D index grid; expressions
combine with ints and each other (`i * 128 + i_p`, `2 * i_f + 1`). Grids broadcast like NumPy
(right-aligned). Comparisons give `Predicate`s (boolean grids) used as `mask=`; `&`, `|`, `~`
combine them. A subscript whose every dimension is an int or a one-axis affine expression becomes
a plain strided view; anything else becomes a gather view.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, SupportsInt, TypeAlias, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nkitui.emulator.errors import IndexingError, MaskError

if TYPE_CHECKING:
    from nkitui.emulator.tensor import Tensor

Grid: TypeAlias = NDArray[np.int64]  # integer indices, one per point of an index grid
Terms: TypeAlias = tuple[tuple[int, int, int], ...]  # (grid axis from the end, size, coefficient) per term
Box: TypeAlias = tuple[tuple[int, int], ...]  # per axis the (lo, hi) range a box mask keeps
Mask: TypeAlias = "Predicate | bool | np.bool_ | None"  # a legacy mask= (plan_mask checks what a kernel passes)
# what an index expression combines with: another grid's values or a number
# (Any: numpy's stubs define no `ndarray // np.number`, and numpy scalars must pass as they are, as their
# dtype steers numpy's promotion)
Value: TypeAlias = Any
_T = TypeVar("_T")


def _grid_shape(nd: int, terms: Terms) -> tuple[int, ...]:
    shape = [1] * nd
    for pfe, size, _ in terms:
        shape[nd - 1 - pfe] = size
    return tuple(shape)


class IndexExpr:
    """Base of index expressions (affine or general integer grids)."""

    __slots__ = ()
    __hash__ = object.__hash__

    def grid(self) -> Grid:
        raise IndexingError("abstract index expression")

    # comparisons build predicates -------------------------------------------------------------
    def _cmp(self, other: object, fn: np.ufunc) -> Predicate:
        return Predicate(fn(self.grid(), _value(other)))

    def __lt__(self, o: object) -> Predicate:
        return self._cmp(o, np.less)

    def __le__(self, o: object) -> Predicate:
        return self._cmp(o, np.less_equal)

    def __gt__(self, o: object) -> Predicate:
        return self._cmp(o, np.greater)

    def __ge__(self, o: object) -> Predicate:
        return self._cmp(o, np.greater_equal)

    def __eq__(self, o: object) -> Predicate:  # type: ignore[override]  # element-wise, as numpy's ==
        return self._cmp(o, np.equal)

    def __ne__(self, o: object) -> Predicate:  # type: ignore[override]  # element-wise, as numpy's !=
        return self._cmp(o, np.not_equal)

    def __bool__(self) -> NoReturn:
        raise IndexingError("err_control_flow_condition_depending_on_arange: an index expression has no "
                            "truth value; express the condition as mask= instead of an if")

    def __floordiv__(self, o: object) -> GridExpr:
        return GridExpr(self.grid() // _value(o))

    def __rfloordiv__(self, o: object) -> GridExpr:
        return GridExpr(_value(o) // self.grid())

    def __mod__(self, o: object) -> GridExpr:
        return GridExpr(self.grid() % _value(o))

    def __rmod__(self, o: object) -> GridExpr:
        return GridExpr(_value(o) % self.grid())

    def __iter__(self) -> NoReturn:
        raise TypeError("index expressions are not iterable")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.grid().shape


def _value(o: object) -> Value:
    if isinstance(o, IndexExpr):
        return o.grid()
    if isinstance(o, (bool, int, float, np.integer, np.floating)):
        return o
    raise IndexingError(f"cannot combine an index expression with {type(o).__name__}")


class AffineExpr(IndexExpr):
    """offset + sum(coeff * arange(size)) with each term on one grid axis (pfe: position from the end)."""

    __slots__ = ("offset", "terms", "nd", "_grid", "dense")

    def __init__(self, offset: SupportsInt, terms: Terms, nd: int, dense: tuple[int, ...] | None = None) -> None:
        self.offset = int(offset)
        self.terms = terms  # tuple of (pos_from_end, size, coeff)
        self.nd = nd
        self._grid: Grid | None = None
        # the full grid of the nl.mgrid this expression comes from: mgrid components are dense
        # (every one has the whole grid's shape, as numpy.mgrid's), which is the shape nisa.iota
        # gives its tile; indexing broadcasts, so there the open grid is enough
        self.dense = dense

    def grid(self) -> Grid:
        g = self._grid
        if g is None:
            shape = _grid_shape(self.nd, self.terms)
            g = np.full(shape, self.offset, dtype=np.int64)
            for pfe, size, coeff in self.terms:
                shp = [1] * self.nd
                shp[self.nd - 1 - pfe] = size
                g = g + (np.arange(size, dtype=np.int64) * coeff).reshape(shp)
            self._grid = g
        return g

    @property
    def shape(self) -> tuple[int, ...]:
        return _grid_shape(self.nd, self.terms)

    def __getitem__(self, key: object) -> AffineExpr:
        # nl.arange(n)[:, None] / [None, :]: place a 1-D arange on an axis of a grid
        if not isinstance(key, tuple):
            key = (key,)
        if self.nd != 1 or len(self.terms) > 1:
            raise IndexingError("only a 1-D nl.arange can be expanded with [:, None] / [None, :]")
        slots = [i for i, k in enumerate(key) if isinstance(k, slice)]
        if len(slots) != 1 or any(k is not None for i, k in enumerate(key) if i != slots[0]):
            raise IndexingError(f"expand an arange with exactly one ':' and None elsewhere, got {key!r}")
        nd = len(key)
        pfe = nd - 1 - slots[0]
        terms = tuple((pfe, size, coeff) for _, size, coeff in self.terms)
        return AffineExpr(self.offset, terms, nd)

    def _combine(self, other: object, sign: int) -> AffineExpr | GridExpr | None:
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            return AffineExpr(self.offset + sign * int(other), self.terms, self.nd, self.dense)
        if isinstance(other, AffineExpr):
            nd = max(self.nd, other.nd)
            acc: dict[int, list[int]] = {}  # grid axis -> [size, coefficient]
            for pfe, size, coeff in self.terms:
                acc[pfe] = [size, coeff]
            for pfe, size, coeff in other.terms:
                if pfe in acc:
                    if acc[pfe][0] != size and 1 not in (size, acc[pfe][0]):
                        raise IndexingError(f"index grids of sizes {acc[pfe][0]} and {size} do not broadcast")
                    acc[pfe] = [max(size, acc[pfe][0]), acc[pfe][1] + sign * coeff]
                else:
                    acc[pfe] = [size, sign * coeff]
            terms = tuple(sorted((p, s, c) for p, (s, c) in acc.items() if c != 0 or s > 1))
            dense = self.dense if other.dense in (None, self.dense) else (other.dense if self.dense is None else None)
            return AffineExpr(self.offset + sign * other.offset, terms, nd, dense)
        if isinstance(other, (IndexExpr, float, np.floating)):
            return GridExpr(self.grid() + sign * _value(other))
        return None  # not an index operand: the operator returns NotImplemented

    def __add__(self, o: object) -> AffineExpr | GridExpr:
        r = self._combine(o, 1)
        return NotImplemented if r is None else r

    __radd__ = __add__

    def __sub__(self, o: object) -> AffineExpr | GridExpr:
        r = self._combine(o, -1)
        return NotImplemented if r is None else r

    def __rsub__(self, o: object) -> AffineExpr | GridExpr:
        r = self.__neg__()._combine(o, 1)
        return NotImplemented if r is None else r

    def __neg__(self) -> AffineExpr:
        return AffineExpr(-self.offset, tuple((p, s, -c) for p, s, c in self.terms), self.nd, self.dense)

    def __mul__(self, o: object) -> AffineExpr | GridExpr:
        if isinstance(o, (int, np.integer)) and not isinstance(o, bool):
            k = int(o)
            return AffineExpr(self.offset * k, tuple((p, s, c * k) for p, s, c in self.terms), self.nd, self.dense)
        if isinstance(o, (IndexExpr, float, np.floating)):
            return GridExpr(self.grid() * _value(o))
        return NotImplemented

    __rmul__ = __mul__

    def __repr__(self) -> str:
        parts = [str(self.offset)] if self.offset else []
        parts += [f"{c}*i{p}[{s}]" for p, s, c in self.terms]
        return f"AffineExpr({' + '.join(parts) or '0'}, grid {self.shape})"


class GridExpr(IndexExpr):
    """A general integer index grid (non-affine expressions such as `i // 2`)."""

    __slots__ = ("arr",)

    def __init__(self, arr: ArrayLike) -> None:
        self.arr: Grid = np.asarray(arr)

    def grid(self) -> Grid:
        return self.arr

    def _bin(self, o: object, fn: np.ufunc) -> GridExpr:
        return GridExpr(fn(self.arr, _value(o)))

    def __add__(self, o: object) -> GridExpr:
        return self._bin(o, np.add)

    __radd__ = __add__

    def __sub__(self, o: object) -> GridExpr:
        return self._bin(o, np.subtract)

    def __rsub__(self, o: object) -> GridExpr:
        return GridExpr(_value(o) - self.arr)

    def __mul__(self, o: object) -> GridExpr:
        return self._bin(o, np.multiply)

    __rmul__ = __mul__

    def __neg__(self) -> GridExpr:
        return GridExpr(-self.arr)


class Predicate:
    """A boolean grid: the result of comparing index expressions (a legacy `mask=`)."""

    __slots__ = ("arr",)
    __hash__ = object.__hash__

    def __init__(self, arr: ArrayLike) -> None:
        self.arr = np.asarray(arr, dtype=bool)

    def __and__(self, o: object) -> Predicate:
        return Predicate(self.arr & _pred(o))

    __rand__ = __and__

    def __or__(self, o: object) -> Predicate:
        return Predicate(self.arr | _pred(o))

    __ror__ = __or__

    def __xor__(self, o: object) -> Predicate:
        return Predicate(self.arr ^ _pred(o))

    def __invert__(self) -> Predicate:
        return Predicate(~self.arr)

    def __bool__(self) -> NoReturn:
        raise MaskError("err_ambiguous_tensor_truth_value: a mask predicate has no truth value: use mask= instead "
                        "of an if on index expressions, and combine predicates with &, |, ~ (not and/or/not)")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.arr.shape

    def __repr__(self) -> str:
        return f"Predicate({self.arr.sum()} of {self.arr.size} true, grid {self.arr.shape})"


def _pred(o: object) -> NDArray[np.bool_] | bool:
    if isinstance(o, Predicate):
        return o.arr
    if isinstance(o, (bool, np.bool_)):
        return bool(o)
    raise MaskError(f"cannot combine a mask predicate with {type(o).__name__}: use comparisons of nl.arange "
                    "expressions, loop indices and ints")


def arange(*args: SupportsInt) -> AffineExpr:
    bounds: tuple[SupportsInt, SupportsInt, SupportsInt]
    if len(args) == 1:
        bounds = 0, args[0], 1
    elif len(args) == 2:
        bounds = args[0], args[1], 1
    elif len(args) == 3:
        bounds = args[0], args[1], args[2]
    else:
        raise IndexingError("nl.arange takes (stop) or (start, stop)")
    start, stop, step = int(bounds[0]), int(bounds[1]), int(bounds[2])
    size = len(range(start, stop, step))
    return AffineExpr(start, ((0, size, step),), 1)


class MGrid:
    """The result of `nl.mgrid[...]`: one affine expression per grid axis (.p, .x, .y, .z)."""

    __slots__ = ("exprs",)

    def __init__(self, exprs: Iterable[AffineExpr]) -> None:
        self.exprs = tuple(exprs)

    def __iter__(self) -> Iterator[AffineExpr]:
        return iter(self.exprs)

    def __len__(self) -> int:
        return len(self.exprs)

    def __getitem__(self, i: int) -> AffineExpr:
        return self.exprs[i]

    def _axis(self, i: int) -> AffineExpr:
        if i >= len(self.exprs):
            raise AttributeError(f"this mgrid has {len(self.exprs)} axes")
        return self.exprs[i]

    p = property(lambda self: self._axis(0))
    x = property(lambda self: self._axis(1))
    y = property(lambda self: self._axis(2))
    z = property(lambda self: self._axis(3))
    w = property(lambda self: self._axis(4))


class _MGridFactory:
    """`nl.mgrid[0:128, 0:512]` (like numpy.mgrid, but returning affine index expressions)."""

    def __getitem__(self, key: object) -> MGrid:
        if not isinstance(key, tuple):
            key = (key,)
        nd = len(key)
        axes = []
        for k in key:
            if not isinstance(k, slice) or k.stop is None:
                raise IndexingError(f"nl.mgrid takes slices with explicit bounds, got {k!r}")
            start = 0 if k.start is None else int(k.start)
            step = 1 if k.step is None else int(k.step)
            axes.append((start, step, len(range(start, int(k.stop), step))))
        dense = tuple(size for _, _, size in axes)
        return MGrid(AffineExpr(start, ((nd - 1 - i, size, step),), nd, dense)
                     for i, (start, step, size) in enumerate(axes))


mgrid = _MGridFactory()


# ---------------------------------------------------------------------------------------------
# masks


class MaskPlan:
    """How a mask applies to an instruction with iteration shape `shape`."""

    __slots__ = ("skip", "box", "where", "shape", "partial")

    def __init__(self, skip: bool = False, box: Box | None = None, where: NDArray[np.bool_] | None = None,
                 shape: tuple[int, ...] | None = None) -> None:
        self.skip = skip
        self.box = box  # per-axis (lo, hi) when the mask is a box (fast path: narrow the views)
        self.where = where  # boolean array broadcastable to shape otherwise
        self.shape = shape  # the iteration shape the plan was made for
        # the plan leaves parts of a fresh result unwritten (its tile is pre-filled with sentinels):
        # computed once here, not by `fresh` per result tile (plans are never changed after this)
        self.partial = box is not None or where is not None or skip

    def for_output(self, shape: Sequence[int]) -> "MaskPlan | None":
        """The part of an output of `shape` this plan writes (None: all of it)."""
        if self.skip:
            return self
        if self.shape == tuple(shape):
            return self
        if self.box is not None and self.shape and shape and self.box[0] != (0, self.shape[0]) \
                and shape[0] == self.shape[0]:
            return MaskPlan(box=(self.box[0],) + tuple((0, n) for n in shape[1:]), shape=tuple(shape))
        return None


NO_MASK = MaskPlan()
SKIP = MaskPlan(skip=True)


def plan_mask(mask: object, ref: "tuple[int, ...] | Tensor") -> MaskPlan:
    """Plan a mask for an instruction whose iteration space is `ref` (a shape, or the view that
    defines it: views made from index grids map mask grid axes to their dimensions)."""
    if mask is None or mask is True:
        return NO_MASK
    shape = ref if isinstance(ref, tuple) else tuple(ref.shape)
    if mask is False:
        return SKIP
    if isinstance(mask, (np.bool_,)):
        return NO_MASK if bool(mask) else SKIP
    if not isinstance(mask, Predicate):
        raise MaskError(f"err_unsupported_expression_in_mask: mask must be a predicate built from nl.arange / "
                        f"nl.mgrid expressions, loop indices and ints (got {type(mask).__name__})")
    g = mask.arr
    nd = len(shape)
    gaxes = getattr(ref, "_grid_axes", None)
    if gaxes is not None and len(gaxes) == nd:
        g = _on_axes(g, gaxes, shape)
    while g.ndim > nd and g.shape[0] == 1:
        g = g[0]
    while g.ndim > nd and g.shape[-1] == 1:
        g = g[..., 0]
    if g.ndim > nd:
        raise MaskError(f"mask grid of shape {mask.arr.shape} does not fit an instruction of shape {shape}")
    g = g.reshape((1,) * (nd - g.ndim) + g.shape)
    for gs, s in zip(g.shape, shape):
        if gs not in (1, s):
            raise MaskError(f"mask grid of shape {mask.arr.shape} does not broadcast to the instruction shape {shape}")
    total = int(g.sum())
    if total == g.size:
        return NO_MASK
    if total == 0:
        return SKIP
    # a box mask (product of contiguous per-axis ranges) narrows the operands instead
    box: list[tuple[int, int]] = []
    boxed = True
    count = 1
    for ax in range(nd):
        if g.shape[ax] == 1:
            box.append((0, shape[ax]))
            continue
        other = tuple(a for a in range(nd) if a != ax)
        proj = np.any(g, axis=other) if other else g
        idx = np.flatnonzero(proj)
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        if hi - lo != idx.size:
            boxed = False
            break
        box.append((lo, hi))
        count *= hi - lo
    if boxed and count == total:
        return MaskPlan(box=tuple(box), shape=shape)
    return MaskPlan(where=np.broadcast_to(g, shape), shape=shape)


def _on_axes(g: NDArray[np.bool_], gaxes: Sequence[int], shape: tuple[int, ...]) -> NDArray[np.bool_]:
    """Lay a mask grid out along the dimensions of a view whose dims come from grid axes `gaxes`."""
    nd_m = g.ndim
    sel = [nd_m - 1 - p if 0 <= p < nd_m else None for p in gaxes]
    used = [a for a in sel if a is not None]
    for a in range(nd_m):
        if a not in used and g.shape[a] != 1:
            raise MaskError(f"the mask varies along a grid axis of size {g.shape[a]} that the instruction "
                            f"(shape {shape}) does not iterate over")
    rest = [a for a in range(nd_m) if a not in used]
    t = np.transpose(g, used + rest)
    return t.reshape([g.shape[a] if a is not None else 1 for a in sel])


def narrow(t: _T, box: Box | None, shape: tuple[int, ...] | None = None) -> _T:
    """Narrow an operand to a mask box given for the iteration shape (size-1 axes broadcast)."""
    if box is None:  # the common case (no mask box), before any look-up: several calls per legacy instruction
        return t
    narrowed = getattr(t, "narrow", None)  # tensors narrow; scalars pass as they are
    if narrowed is None:
        return t
    shape_of: tuple[int, ...] = getattr(t, "shape")  # noqa: B009  (t's type is a variable: a tensor here)
    nd = len(shape_of)
    b = box[len(box) - nd:] if len(box) >= nd else ((0, 1),) * (nd - len(box)) + tuple(box)
    b = tuple((0, 1) if n == 1 else (lo, hi) for (lo, hi), n in zip(b, shape_of))
    if all(lo == 0 and hi == n for (lo, hi), n in zip(b, shape_of)):
        return t
    return cast(_T, narrowed(b))  # Tensor.narrow: a view of the same class

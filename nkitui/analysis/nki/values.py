"""Abstract values for reading NKI kernels without running them.

The kernel body is walked once, in program order. Integers are kept exactly where they are known
(module constants, literal shapes, `nl.tile_size.pmax`, shapes from the task manifest); loop
variables and unknown shape dimensions become symbols, and affine combinations of them are kept
as `Lin` so that slice extents such as `(i+1)*128 - i*128` come out as 128. Anything else is
`Unk`, which still remembers which loop variables it depends on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from nkitui.analysis.nki.model import Access

# An abstract value: a Python constant (int, float, str, bool, None, a dtype string), a tuple/list/dict of
# values, or one of the records below. Kept as Any on purpose: the walker reads values by isinstance, and a
# closed union would only move those checks around.
Value: TypeAlias = Any


@dataclass(frozen=True)
class Lin:
    """const + sum(coef * symbol) with integer coefficients."""

    const: int = 0
    terms: tuple[tuple[str, int], ...] = ()

    @property
    def deps(self) -> frozenset[str]:
        return frozenset(s for s, _ in self.terms)

    def coef(self, symbol: str) -> int:
        for s, c in self.terms:
            if s == symbol:
                return c
        return 0


@dataclass(frozen=True)
class Unk:
    """A value the analysis cannot compute. `tags` carry facts such as "min" (bounded by min())."""

    deps: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()
    text: str = ""
    parts: tuple[Any, ...] = ()  # for min(...)/max(...): the candidate values (ints / Lin)
    line: int | None = None  # where a min(...) bound was written


@dataclass(frozen=True)
class Grid:
    """An affine index grid of legacy NKI: `nl.arange(n)[:, None]`, `nl.mgrid[...].p`, shifted/scaled."""

    gid: str
    extent: int | None
    axis: str | None  # "p" (partition), "f" (free) or None (1-D arange, not yet placed)
    deps: frozenset[str] = frozenset()
    shifted: bool = False
    offset: Any = 0  # int | Lin | Unk added to the grid index (e.g. i*128 in `i*128 + i_p`)
    scaled: bool = False  # multiplied by a stride: the grid no longer covers a contiguous range


@dataclass(frozen=True)
class MGrid:
    grids: tuple[Grid, ...]


@dataclass(frozen=True)
class Mask:
    """A legacy `mask=` predicate: comparisons of grids / loop variables, combined with `&`."""

    deps: frozenset[str]
    cmps: tuple[str, ...]  # comparison operators used, e.g. ("<",)
    grids: frozenset[str] = frozenset()
    # (grid ids on the left, operator, bound) for each `grid_expr OP bound` comparison
    bounds: tuple[tuple[frozenset[str], str, Any], ...] = ()
    text: str = ""  # source of the comparison(s)
    line: int | None = None  # where the (first) comparison was written


@dataclass(frozen=True)
class Api:
    """A reference to an NKI / numpy / torch / math callable or module, by canonical name."""

    name: str


@dataclass(frozen=True)
class Dtype:
    name: str | None  # canonical dtype name, None when unknown


@dataclass(frozen=True)
class Buffer:
    name: str  # "sbuf" | "psum" | "hbm" | "shared_hbm"


@dataclass(frozen=True)
class FuncRef:
    name: str
    node: Any = field(compare=False, hash=False)


@dataclass(frozen=True)
class SliceV:
    lower: Any
    upper: Any
    step: Any


@dataclass(frozen=True)
class DsV:
    """`nl.ds(start, size)`."""

    start: Any
    size: Any


@dataclass(frozen=True)
class TRef:
    """A tensor (by id in the kernel model), optionally a view of part of it."""

    tid: int
    view: Access | None = None  # the region indexed, or None for the whole tensor


@dataclass(frozen=True)
class ShapeV:
    """`t.shape` of a tensor whose rank is unknown: indexing or unpacking gives per-dim symbols."""

    tid: int
    name: str


@dataclass(frozen=True)
class Method:
    obj: Any
    name: str


# --------------------------------------------------------------------------------------------
# Integer arithmetic on ints and Lin.


def as_lin(v: Any) -> Lin | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return Lin(v)
    if isinstance(v, Lin):
        return v
    return None


def require_lin(v: Value) -> Lin:
    """`v` as a `Lin`, for values known to be affine (the candidates a min(...) keeps are ints or `Lin`)."""
    lin = as_lin(v)
    if lin is None:
        raise TypeError(f"not an affine value: {v!r}")
    return lin


def simplify(v: Lin) -> int | Lin:
    return v.const if not v.terms else v


def lin_add(a: Lin, b: Lin, sign: int = 1) -> int | Lin:
    terms: dict[str, int] = dict(a.terms)
    for s, c in b.terms:
        terms[s] = terms.get(s, 0) + sign * c
    kept = tuple(sorted((s, c) for s, c in terms.items() if c != 0))
    return simplify(Lin(a.const + sign * b.const, kept))


def lin_scale(a: Lin, k: int) -> int | Lin:
    if k == 0:
        return 0
    return simplify(Lin(a.const * k, tuple((s, c * k) for s, c in a.terms)))


def lin_floordiv(a: Lin, k: int) -> int | Lin | None:
    """a // k when every coefficient and the constant divide exactly; None otherwise."""
    if k == 0:
        return None
    if a.const % k == 0 and all(c % k == 0 for _, c in a.terms):
        return simplify(Lin(a.const // k, tuple((s, c // k) for s, c in a.terms)))
    return None


def symbol(name: str) -> Lin:
    return Lin(0, ((name, 1),))


def deps_of(v: Any) -> frozenset[str]:
    """Symbols (loop variables, shape dims, program ids) a value depends on."""
    if isinstance(v, (Lin, Unk, Grid, Mask)):
        return v.deps
    if isinstance(v, MGrid):
        out: frozenset[str] = frozenset()
        for g in v.grids:
            out |= g.deps
        return out
    if isinstance(v, (tuple, list)):
        out = frozenset()
        for item in v:
            out |= deps_of(item)
        return out
    if isinstance(v, SliceV):
        return deps_of(v.lower) | deps_of(v.upper) | deps_of(v.step)
    if isinstance(v, DsV):
        return deps_of(v.start) | deps_of(v.size)
    if isinstance(v, TRef) and v.view is not None:
        return v.view.deps
    return frozenset()


def tags_of(v: Any) -> frozenset[str]:
    if isinstance(v, Unk):
        return v.tags
    if isinstance(v, (tuple, list)):
        out: frozenset[str] = frozenset()
        for item in v:
            out |= tags_of(item)
        return out
    return frozenset()


def known_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, Lin) and not v.terms:
        return v.const
    return None


def is_number(v: Value) -> bool:
    """A Python int or float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def combine_masks(values: list[Value]) -> Mask:
    """`m1 & m2` (or `m & cond`): one mask with every comparison and bound of its parts."""
    deps: frozenset[str] = frozenset()
    cmps: tuple[str, ...] = ()
    grids: frozenset[str] = frozenset()
    bounds: tuple[tuple[frozenset[str], str, Any], ...] = ()
    texts: list[str] = []
    line: int | None = None
    for v in values:
        if isinstance(v, Mask):
            line = line or v.line
            deps |= v.deps
            cmps += v.cmps
            grids |= v.grids
            bounds += v.bounds
            if v.text:
                texts.append(v.text)
        else:
            deps |= deps_of(v)
    return Mask(deps=deps, cmps=cmps, grids=grids, bounds=bounds, text=" & ".join(texts), line=line)


def flatten(v: Value) -> list[Value]:
    """The leaves of nested tuples and lists."""
    if isinstance(v, (tuple, list)):
        out: list[Value] = []
        for item in v:
            out.extend(flatten(item))
        return out
    return [v]

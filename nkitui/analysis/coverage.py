"""Which rows of each HBM tensor a kernel's DMAs touch, dimension by dimension.

With shapes from the task manifest every loop trip count is known, so the first and last index each
DMA touches can be computed exactly: that exposes a last partial tile that is never processed
(floor division), one that runs past the end (no mask), and masks or `min()` bounds that are off by
one. Without shapes the same comparisons are made symbolically where the size symbol cancels
(e.g. a mask `i*128 + i_p <= n` against `n = x.shape[0]`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.nki.model import Access, DimAccess, KernelModel, Op, Tensor
from nkitui.analysis.nki.queries import dim_size, dma_sides, is_dma
from nkitui.analysis.nki.values import Lin, Mask, as_lin, known_int, lin_add


@dataclass
class AccessSpan:
    op: Op
    access: Access
    dim: int
    lo: int | None  # first index touched (over all iterations)
    hi: int | None  # one past the last index touched
    guarded: bool  # a mask or a min() bound limits this access on this dim
    tiling_loops: list[int]  # loops whose variable moves this access along the dim
    rel_end: int | None = None  # (end of the last tile) - (dim size), symbolically, when it can be said
    guard_line: int | None = None  # where the mask comparison or min() bound is written
    gappy: bool = False  # consecutive iterations leave holes (stride larger than the tile)


@dataclass
class DimCoverage:
    tensor: Tensor
    dim: int
    size: Any  # int | Lin | None
    spans: list[AccessSpan] = field(default_factory=list)

    @property
    def size_int(self) -> int | None:
        return known_int(self.size)

    def union(self) -> tuple[int | None, int | None]:
        los = [s.lo for s in self.spans if s.lo is not None]
        his = [s.hi for s in self.spans if s.hi is not None]
        if not self.spans or len(los) < len(self.spans) or len(his) < len(self.spans):
            return None, None
        return min(los), max(his)


def _sym_range(km: KernelModel, sym: str, context: AnalysisContext | None) -> tuple[int, int] | None:
    if sym in km.symbols:
        loop = km.loops[km.symbols[sym]]
        start, step, trip = known_int(loop.start), known_int(loop.step), loop.trip
        if start is None or step is None or trip is None or trip <= 0:
            return None
        return start, start + step * (trip - 1)
    if sym.startswith("program_id(") and context and context.grid:
        axis = int(sym[len("program_id("):-1] or 0)
        if axis < len(context.grid):
            return 0, context.grid[axis] - 1
    return None


def _substitute(value: Any, at: dict[str, int]) -> int | None:
    lin = as_lin(value)
    if lin is None:
        return None
    total = lin.const
    for sym, coef in lin.terms:
        if sym not in at:
            return None
        total += coef * at[sym]
    return total


def _extremes(km: KernelModel, start: Any, context: AnalysisContext | None) -> tuple[int | None, int | None,
                                                                                     dict[str, int]]:
    """Smallest and largest value of `start` over all iterations, and the substitution giving the largest."""
    lin = as_lin(start)
    if lin is None:
        return None, None, {}
    lo = hi = lin.const
    at_max: dict[str, int] = {}
    for sym, coef in lin.terms:
        rng = _sym_range(km, sym, context)
        if rng is None:
            return None, None, {}
        a, b = coef * rng[0], coef * rng[1]
        lo += min(a, b)
        hi += max(a, b)
        at_max[sym] = rng[1] if coef > 0 else rng[0]
    return lo, hi, at_max


def _mask_limit(op: Op, d: DimAccess, at: dict[str, int]) -> tuple[bool, Any]:
    """(guarded, exclusive upper limit) from a legacy mask on the grid that indexes `d`."""
    mask = op.mask
    if not isinstance(mask, Mask):
        return False, None
    if d.grid is None:
        # A mask with no recognisable `grid < bound` term may guard any dimension.
        return not mask.bounds, None
    limits = []
    for grids, cmp, bound in mask.bounds:
        if d.grid not in grids or cmp not in ("<", "<="):
            continue
        limits.append((cmp, bound))
    if not limits:
        return True, None
    cmp, bound = limits[0]
    lin = as_lin(bound)
    if lin is None:
        return True, None
    return True, lin_add(lin, Lin(1)) if cmp == "<=" else lin


def _related_end(end: Any, size_syms: frozenset[str], size: Any) -> bool:
    """An end of the last tile that can be compared with the size: they share a symbol, or the size is known."""
    lin = as_lin(end)
    return lin is not None and bool(lin.deps & size_syms or known_int(size) is not None)


def _span(km: KernelModel, op: Op, access: Access, dim: int, size: Any, context: AnalysisContext | None) -> AccessSpan:
    tiling = sorted(km.loops_of(access.dims[dim].deps)) if dim < len(access.dims) else []
    if access.whole or dim >= len(access.dims):
        s = known_int(size)
        return AccessSpan(op, access, dim, 0 if s is not None else None, s, False, [], rel_end=0)
    d = access.dims[dim]
    lo, hi_start, at_max = _extremes(km, d.start, context)
    guarded_mask, limit = _mask_limit(op, d, at_max)
    guarded = d.bounded or guarded_mask
    span = AccessSpan(op, access, dim, lo, None, guarded, tiling)
    if guarded:
        span.guard_line = op.mask.line if isinstance(op.mask, Mask) and guarded_mask else d.guard_line
    # Gaps: a tile stride larger than the tile.
    lin = as_lin(d.start)
    if lin is not None and d.extent is not None:
        for sym, coef in lin.terms:
            if sym in km.symbols:
                step = known_int(km.loops[km.symbols[sym]].step) or 1
                if abs(coef * step) > d.extent:
                    span.gappy = True
    # Symbolic end of the last tile, relative to the size (works without shapes when symbols cancel).
    end_expr: Any = None
    start_lin, size_lin = as_lin(d.start), as_lin(size)
    part_lins = [lin for lin in (as_lin(p) for p in d.extent_parts) if lin is not None]
    if d.extent_parts:
        ends = [lin_add(start_lin, p) for p in part_lins] if start_lin is not None else []
        size_syms = size_lin.deps if size_lin is not None else frozenset()
        related = [e for e in ends if _related_end(e, size_syms, size)]
        if related:
            end_expr = related[0]
    elif limit is not None:
        end_expr = limit
    end_lin = as_lin(end_expr) if end_expr is not None else None
    if end_lin is not None and size_lin is not None:
        diff = lin_add(end_lin, size_lin, -1)
        span.rel_end = known_int(diff)
    # Concrete end over all iterations.
    if hi_start is not None:
        if d.extent is not None:
            span.hi = hi_start + d.extent
        elif d.extent_parts:
            ends_at_max = [_substitute(lin_add(start_lin, p), at_max) for p in part_lins] \
                if start_lin is not None else []
            vals = [v for v in ends_at_max if v is not None]
            if vals and len(vals) == len(d.extent_parts):
                span.hi = min(vals)
        if span.hi is not None and limit is not None:
            lim = _substitute(limit, at_max)
            if lim is not None:
                span.hi = min(span.hi, max(lim, hi_start))
    if d.kind == "int" and lo is not None and hi_start is not None and span.hi is None:
        span.hi = hi_start + 1
    return span


def coverage(km: KernelModel, context: AnalysisContext | None) -> list[DimCoverage]:
    """Coverage of every dimension of every HBM tensor the kernel moves data to or from."""
    by_key: dict[tuple[int, int], DimCoverage] = {}
    for op in km.ops:
        if not is_dma(op):
            continue
        hbm, _, _ = dma_sides(km, op)
        if hbm is None:
            continue
        t = km.root(hbm.tensor)
        if t.id != hbm.tensor or t.id in km.escaped:
            continue
        rank = len(t.shape) if t.shape is not None else len(hbm.dims)
        for dim in range(rank):
            size = dim_size(km, t, dim)
            cov = by_key.setdefault((t.id, dim), DimCoverage(t, dim, size))
            cov.spans.append(_span(km, op, hbm, dim, size, context))
    return list(by_key.values())

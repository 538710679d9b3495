"""Regions of tensors that NKI operations touch: per-dimension index extents, partitions, shapes.

Free functions shared by the walker: they turn evaluated index values (slices, `nl.ds`, legacy grids,
integers, indirect tiles) into `DimAccess` / `Access` records of the NKI model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from nkitui.analysis.nki.model import Access, DimAccess, Tensor
from nkitui.analysis.nki.values import (
    DsV,
    Grid,
    Lin,
    SliceV,
    TRef,
    Unk,
    as_lin,
    deps_of,
    known_int,
    lin_add,
    require_lin,
    tags_of,
)

def slice_extent(s: SliceV, size: Any = None) -> int | None:
    lower = 0 if s.lower is None else s.lower
    upper = size if s.upper is None else s.upper
    lo, hi = as_lin(lower), as_lin(upper)
    if lo is None or hi is None:
        return None
    extent = known_int(lin_add(hi, lo, -1))
    step = 1 if s.step is None else known_int(s.step)
    if extent is None or step is None or step <= 0:
        return None
    return max(0, -(-extent // step))


def dim_access(item: Any, size: Any, partitions_of: Callable[[int], int | None] | None = None) -> DimAccess:
    """How index `item` selects along a dimension of `size` (partitions_of: tile id -> partitions, for
    indirect indexing with a tile)."""
    if isinstance(item, SliceV):
        lower = 0 if item.lower is None else item.lower
        upper = size if item.upper is None else item.upper
        extent = slice_extent(item, size)
        full = item.lower is None and item.upper is None and item.step is None
        bounded = "min" in (tags_of(upper) | tags_of(lower))
        parts: tuple[Any, ...] = ()
        lower_lin = as_lin(lower)
        if isinstance(upper, Unk) and upper.parts and lower_lin is not None:
            # upper = min(a, b, ...): extent = min(a - lower, b - lower, ...)
            parts = tuple(lin_add(require_lin(p), lower_lin, -1) for p in upper.parts)
        guard = upper.line if isinstance(upper, Unk) else lower.line if isinstance(lower, Unk) else None
        return DimAccess(kind="full" if full else "slice", extent=extent,
                         deps=deps_of(lower) | (deps_of(upper) if item.upper is not None else frozenset()),
                         bounded=bounded, start=lower, extent_parts=parts, guard_line=guard)
    if isinstance(item, DsV):
        size_i = known_int(item.size)
        parts = item.size.parts if isinstance(item.size, Unk) else ()
        return DimAccess(kind="slice", extent=size_i, deps=deps_of(item.start) | deps_of(item.size),
                         bounded="min" in tags_of(item.size) or "min" in tags_of(item.start), start=item.start,
                         extent_parts=parts, guard_line=item.size.line if isinstance(item.size, Unk) else None)
    if isinstance(item, Grid):
        start = item.offset if not item.scaled else Unk(deps=item.deps)
        return DimAccess(kind="grid", extent=item.extent if not item.scaled else None, deps=item.deps,
                         grid_axis=item.axis or "p", start=start, grid=item.gid)
    if isinstance(item, TRef):
        extent = partitions_of(item.tid) if partitions_of is not None else None
        return DimAccess(kind="indirect", extent=extent, deps=frozenset(), start=Unk())
    if isinstance(item, (int, Lin)) and not isinstance(item, bool):
        return DimAccess(kind="int", extent=1, deps=deps_of(item), start=item)
    if isinstance(item, Unk):
        return DimAccess(kind="int", extent=1, deps=item.deps, start=item)
    return DimAccess(kind="unknown", extent=None, deps=deps_of(item), start=Unk())


def compose(prev: tuple[DimAccess, ...], items: list[Any]) -> list[DimAccess] | None:
    """Index a view again: new index items apply to the view's non-integer dims, in order."""
    items = [i for i in items if i is not None and i is not Ellipsis]
    out: list[DimAccess] = []
    pending = list(items)
    for d in prev:
        if d.kind == "int" or not pending:
            out.append(d)
            continue
        item = pending.pop(0)
        if isinstance(item, SliceV) and item.lower is None and item.upper is None:
            out.append(d)
        elif isinstance(item, (SliceV, DsV, int, Lin, Unk, Grid)):
            inner = dim_access(item, d.extent)
            start = d.start
            s_lin, i_lin = as_lin(start), as_lin(inner.start)
            combined = lin_add(s_lin, i_lin) if s_lin is not None and i_lin is not None else Unk(
                deps=d.deps | inner.deps)
            out.append(replace(inner, deps=d.deps | inner.deps, start=combined, bounded=d.bounded or inner.bounded))
        else:
            return None
    # Items left over index dimensions the first view did not spell out (rank unknown): append them.
    for item in pending:
        if isinstance(item, (SliceV, DsV, int, Lin, Unk, Grid)):
            out.append(dim_access(item, None))
        else:
            return None
    return out


def finish_access(t: Tensor, dims: tuple[DimAccess, ...], text: str, whole: bool) -> Access:
    grid_dims = [i for i, d in enumerate(dims) if d.kind == "grid"]
    partitions: int | None
    free: int | None
    part_dim: int | None
    transposed = False
    if grid_dims:
        p_dims = [i for i in grid_dims if dims[i].grid_axis == "p"]
        f_dims = [i for i, d in enumerate(dims) if d.kind in ("grid", "slice", "full") and i not in p_dims]
        part_dim = p_dims[0] if p_dims else None
        partitions = dims[part_dim].extent if part_dim is not None else 1
        free = product(dims[i].extent for i in f_dims)
        if part_dim is not None:
            transposed = any(dims[i].grid_axis == "f" and i < part_dim for i in grid_dims)
    elif t.on_chip:
        part_dim = t.pdim if t.pdim < len(dims) else (0 if dims else None)
        partitions = dims[part_dim].extent if part_dim is not None else None
        free = product(d.extent for i, d in enumerate(dims) if i != part_dim and d.kind != "int") if dims else None
    else:
        non_int = [i for i, d in enumerate(dims) if d.kind != "int"]
        if not dims:
            part_dim, partitions, free = None, None, None
        elif len(non_int) >= 2:
            part_dim = non_int[0]
            partitions = dims[part_dim].extent
            free = product(dims[i].extent for i in non_int[1:])
        elif len(non_int) == 1:
            only = non_int[0]
            if only > 0:
                part_dim, partitions, free = only - 1, 1, dims[only].extent
            else:
                part_dim, partitions, free = only, dims[only].extent, 1
        else:
            part_dim, partitions, free = len(dims) - 1, 1, 1
    return Access(tensor=t.id, dims=dims, text=text, whole=whole, partitions=partitions, free=free,
                  part_dim=part_dim, transposed=transposed)


def product(values: Any) -> int | None:
    out = 1
    for v in values:
        if v is None:
            return None
        out *= v
    return out


def region_shape(access: Access) -> list[Any]:
    """Shape of the region: integer-indexed dims drop out, except the partition dim, which stays as 1."""
    shape = [d.extent for d in access.dims if d.kind != "int"]
    pd = access.part_dim
    if pd is not None and pd < len(access.dims) and access.dims[pd].kind == "int":
        shape.insert(0, 1)
    return shape


def loaded_shape(access: Access) -> tuple[Any, ...] | None:
    """Shape of the SBUF tile that `nl.load(access)` creates: partitions first."""
    if access.partitions is None and access.free is None:
        return None
    grids = [d for d in access.dims if d.kind == "grid"]
    if grids:
        p = [d.extent for d in grids if d.grid_axis == "p"]
        f = [d.extent for d in access.dims if d.kind != "int" and not (d.kind == "grid" and d.grid_axis == "p")]
        return tuple(p[:1] or [1]) + tuple(f)
    non_int = [d.extent for d in access.dims if d.kind != "int"]
    if len(non_int) >= 2:
        return tuple(non_int)
    return (access.partitions, access.free)


def trip_count(start: Any, stop: Any, step: Any) -> int | None:
    a, b, s = known_int(start), known_int(stop), known_int(step)
    if a is None or b is None or s is None or s == 0:
        return None
    if s > 0:
        return max(0, -(-(b - a) // s))
    return max(0, -(-(a - b) // -s))

"""Questions rules ask of a kernel model: which side of a DMA is HBM, which symbols tile an access, how
big a dimension is, how many times a loop runs."""

from __future__ import annotations

from typing import Any

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.nki.access import finish_access
from nkitui.analysis.nki.api import DMA_KINDS
from nkitui.analysis.nki.model import Access, DimAccess, KernelModel, Op, Tensor
from nkitui.analysis.nki.values import Lin, known_int


def is_dma(op: Op) -> bool:
    return op.kind in DMA_KINDS or (op.api == "assign" and op.kind == "dma")


def dma_sides(km: KernelModel, op: Op) -> tuple[Access | None, Access | None, str | None]:
    """(HBM side, on-chip side, direction "load" | "store" | "hbm" | "on-chip") of a DMA op."""
    reads = [a for a in op.reads]
    writes = list(op.writes)
    if op.result is not None and op.result in km.tensors:
        res = km.tensors[op.result]
        dims: tuple[DimAccess, ...] = ()
        if res.shape is not None:
            dims = tuple(DimAccess(kind="full", extent=known_int(s), text=":") for s in res.shape)
        writes.append(finish_access(res, dims, res.label(), whole=True))
    src = next((a for a in reads if km.root(a.tensor).is_hbm), None)
    dst = next((a for a in writes if km.root(a.tensor).is_hbm), None)
    chip_src = next((a for a in reads if km.root(a.tensor).on_chip), None)
    chip_dst = next((a for a in writes if km.root(a.tensor).on_chip), None)
    if src is not None and dst is None:
        return src, chip_dst, "load"
    if dst is not None and src is None:
        return dst, chip_src, "store"
    if src is not None and dst is not None:
        return src, None, "hbm"
    return None, chip_dst or chip_src, "on-chip"


def tiling_symbols(km: KernelModel, deps: frozenset[str]) -> list[str]:
    """Symbols in `deps` that iterate over tiles: loop variables and SPMD program ids."""
    return sorted(s for s in deps if s in km.symbols or s.startswith("program_id"))


def loop_trip(km: KernelModel, sym: str, context: AnalysisContext | None) -> int | None:
    if sym in km.symbols:
        return km.loops[km.symbols[sym]].trip
    if sym.startswith("program_id(") and context and context.grid:
        axis = int(sym[len("program_id("):-1] or 0)
        return context.grid[axis] if axis < len(context.grid) else None
    return None


def dim_size(km: KernelModel, t: Tensor, dim: int) -> Any:
    """Size of dimension `dim` of tensor `t`: int, Lin symbol or None."""
    if t.shape is not None and dim < len(t.shape):
        return t.shape[dim]
    for sym, (tid, d) in km.shape_symbols.items():
        if tid == t.id and d == dim:
            return Lin(0, ((sym, 1),))
    return None

"""What every rule gets: the models, the task context, and helpers to describe code in findings."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.cuda import CudaModel
from nkitui.analysis.nki_api import DMA_KINDS
from nkitui.analysis.nki_access import finish_access
from nkitui.analysis.nki_model import Access, DimAccess, KernelModel, Loop, NkiModel, Op, Tensor
from nkitui.analysis.nki_values import Lin, Unk, known_int
from nkitui.common.findings import Category, Finding, Severity


@dataclass(frozen=True)
class RuleSpec:
    id: str
    title: str
    category: Category
    severity: str  # the usual severity; a finding may differ (documented per rule)
    summary: str  # one paragraph: what it detects and why it matters on a NeuronCore


@dataclass
class RuleInput:
    nki: NkiModel
    cuda: CudaModel | None
    context: AnalysisContext | None
    cache: dict[str, Any] = field(default_factory=dict)

    def finding(self, spec: RuleSpec, *, severity: Severity, title: str, message: str, line: int | None,
                end_line: int | None = None, data: dict[str, Any] | None = None,
                file: str | None = None) -> Finding:
        return Finding(
            rule=spec.id, severity=severity, title=title, message=" ".join(message.split()),
            category=spec.category, source="analysis", file=file or self.nki.path, line=line,
            end_line=end_line if end_line is not None and line is not None and end_line > line else None,
            data=data or {},
        )

    @property
    def has_shapes(self) -> bool:
        return bool(self.context and any(t.shape for t in self.context.inputs))

    def task_float_floor(self) -> str | None:
        """The least precise float dtype among the task's declared inputs (what the data can carry)."""
        from nkitui.analysis.dtypes import is_float, mantissa_bits

        if not self.context:
            return None
        dtypes = [t.dtype for t in self.context.inputs if is_float(t.dtype)]
        if not dtypes:
            return None
        return min(dtypes, key=lambda d: mantissa_bits(d) or 0)


# A check reads one kernel's model and yields findings (a module's checks may emit several rule ids).
Check = Callable[[RuleInput, KernelModel], Iterable[Finding]]


# ----------------------------------------------------------------------------------------------
# Describing code


def loop_phrase(loop: Loop) -> str:
    if loop.kind == "while":
        return f"the while loop at line {loop.line}"
    if loop.kind == "iter":
        return f"the `for {loop.var} in {loop.stop_text}` loop at line {loop.line}"
    api = loop.api if loop.api != "builtins.range" else "range"
    return f"the `for {loop.var} in {api}({loop.stop_text})` loop at line {loop.line}"


def trip_phrase(loop: Loop) -> str:
    return f"{loop.trip} iterations" if loop.trip is not None else f"{loop.stop_text} iterations"


def tensor_phrase(t: Tensor) -> str:
    return f"`{t.label()}`"


def lines_phrase(lines: Iterable[int]) -> str:
    """"line 12", "lines 12, 15", "lines 29-37", "lines 3, 7-9 and 12-20"."""
    unique = sorted(set(lines))
    if len(unique) == 1:
        return f"line {unique[0]}"
    spans: list[list[int]] = []
    for n in unique:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in spans]
    if len(parts) > 6:
        parts = parts[:5] + [f"{len(parts) - 5} more places"]
    if len(parts) == 1:
        return f"lines {parts[0]}"
    return "lines " + ", ".join(parts[:-1]) + " and " + parts[-1]


# ----------------------------------------------------------------------------------------------
# DMA helpers


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


def value_text(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Lin):
        parts = [f"{c}*{s.split('@')[0]}" if c != 1 else s.split("@")[0] for s, c in v.terms]
        if v.const:
            parts.append(str(v.const))
        return " + ".join(parts) if parts else "0"
    if isinstance(v, Unk):
        return v.text or "?"
    return str(v)

"""What every rule gets: the models, the task context, and helpers to describe code in findings.

The model queries of nki_query (dma_sides, is_dma, dim_size, loop_trip, tiling_symbols) are re-exported
here for the rule modules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.cuda import CudaModel
from nkitui.analysis.nki.model import KernelModel, Loop, NkiModel, Tensor
from nkitui.analysis.nki.queries import dim_size, dma_sides, is_dma, loop_trip, tiling_symbols
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


def cap(text: str) -> str:
    """Upper-case the first letter only (str.capitalize would lower-case code such as `WARP`)."""
    return text[:1].upper() + text[1:]


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


__all__ = [
    "Check", "RuleInput", "RuleSpec", "cap", "dim_size", "dma_sides", "is_dma", "lines_phrase", "loop_phrase", "loop_trip",
    "tensor_phrase", "tiling_symbols", "trip_phrase",
]

"""What a rule reads: a read-only view of one kernel, its module, the CUDA source and the task context.

Rules never change the model (a test checks it); the view caches what several rules need, such as the
rows each DMA covers, so it is computed once per kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.coverage import DimCoverage, coverage
from nkitui.analysis.cuda import CudaModel
from nkitui.analysis.dtypes import is_float, mantissa_bits
from nkitui.analysis.nki.model import KernelModel, NkiModel
from nkitui.analysis.rules.registry import RuleSpec
from nkitui.common.findings import Finding, Severity


def make_finding(spec: RuleSpec, *, file: str, severity: Severity, title: str, message: str, line: int | None,
                 end_line: int | None = None, data: dict[str, Any] | None = None) -> Finding:
    """A finding of `spec` (the message's whitespace collapsed; an end line only when past the line)."""
    return Finding(
        rule=spec.id, severity=severity, title=title, message=" ".join(message.split()),
        category=spec.category, source="analysis", file=file, line=line,
        end_line=end_line if end_line is not None and line is not None and end_line > line else None,
        data=data or {},
    )


@dataclass(frozen=True)
class KernelView:
    kernel: KernelModel
    module: NkiModel
    cuda: CudaModel | None
    context: AnalysisContext | None

    def finding(self, spec: RuleSpec, *, severity: Severity, title: str, message: str, line: int | None,
                end_line: int | None = None, data: dict[str, Any] | None = None,
                file: str | None = None) -> Finding:
        return make_finding(spec, file=file or self.module.path, severity=severity, title=title, message=message,
                            line=line, end_line=end_line, data=data)

    @property
    def namespace(self) -> str | None:
        return self.module.namespace

    @cached_property
    def coverage(self) -> list[DimCoverage]:
        """Which rows of each HBM tensor the kernel's DMAs touch, per dimension."""
        return coverage(self.kernel, self.context)

    def task_float_floor(self) -> str | None:
        """The least precise float dtype among the task's declared inputs (what the data can carry)."""
        if not self.context:
            return None
        dtypes = [t.dtype for t in self.context.inputs if is_float(t.dtype)]
        if not dtypes:
            return None
        return min(dtypes, key=lambda d: mantissa_bits(d) or 0)

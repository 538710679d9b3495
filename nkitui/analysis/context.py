"""What the analysis may know about a task beyond its sources: tensor shapes, dtypes, kwargs.

Everything here is optional. With it, rules use the real sizes (e.g. "the input has 300 rows, so
the last 44 are never read"); without it they reason from the source alone and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nkitui.analysis.dtypes import canonical


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...] | None = None  # as the kernel sees it (after any declared layout)
    dtype: str | None = None
    rtol: float | None = None  # outputs: relative tolerance of an allclose-style policy, if any

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> "TensorInfo":
        shape = d.get("shape")
        rtol = d.get("rtol")
        return cls(name=name, shape=tuple(int(s) for s in shape) if shape is not None else None,
                   dtype=canonical(d.get("dtype")) or d.get("dtype"), rtol=float(rtol) if rtol is not None else None)


@dataclass(frozen=True)
class AnalysisContext:
    inputs: tuple[TensorInfo, ...] = ()
    outputs: tuple[TensorInfo, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)  # constant keyword arguments of the kernel
    kernel: str | None = None  # kernel function name
    outputs_mode: str = "return"  # "return" | "arguments" (outputs passed after the inputs)
    grid: tuple[int, ...] | None = None  # legacy SPMD launch grid

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def tolerates(self, unit_roundoff: float) -> bool:
        """True when every output's relative tolerance admits rounding errors of `unit_roundoff`."""
        rtols = [t.rtol for t in self.outputs]
        return bool(rtols) and all(r is not None and r >= unit_roundoff for r in rtols)

    @classmethod
    def from_task(cls, task: Any) -> "AnalysisContext":
        """Build from an `nkitui.task.Task` (duck-typed: only the attributes used here are read)."""
        kernel = getattr(task, "kernel", None)

        def infos(specs: Any) -> tuple[TensorInfo, ...]:
            out = []
            for spec in specs or ():
                shape = getattr(spec, "kernel_shape", None) or getattr(spec, "shape", None)
                tol = getattr(spec, "tolerance", None)
                rtol = tol.rtol if tol is not None and getattr(tol, "kind", "") in ("allclose", "range_relative") \
                    else None
                out.append(TensorInfo(name=spec.name, shape=tuple(shape) if shape else None,
                                      dtype=canonical(spec.dtype) or spec.dtype, rtol=rtol))
            return tuple(out)

        return cls(
            inputs=infos(getattr(task, "inputs", ())),
            outputs=infos(getattr(task, "outputs", ())),
            kwargs=dict(getattr(kernel, "kwargs", {}) or {}) if kernel is not None else {},
            kernel=getattr(kernel, "name", None) or None,
            outputs_mode=getattr(kernel, "outputs_mode", "return") if kernel is not None else "return",
            grid=tuple(kernel.grid) if kernel is not None and getattr(kernel, "grid", None) else None,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AnalysisContext":
        """From plain data: {"inputs": {"a": {"shape": [..], "dtype": ".."}}, "outputs": {...}, "kwargs": {..},
        "kernel": "name", "outputs_mode": "return", "grid": [..]}. Inputs keep their order."""
        return cls(
            inputs=tuple(TensorInfo.from_dict(k, v) for k, v in (d.get("inputs") or {}).items()),
            outputs=tuple(TensorInfo.from_dict(k, v) for k, v in (d.get("outputs") or {}).items()),
            kwargs=dict(d.get("kwargs") or {}),
            kernel=d.get("kernel"),
            outputs_mode=d.get("outputs_mode", "return"),
            grid=tuple(d["grid"]) if d.get("grid") else None,
        )

"""Helpers for analysis tests: analyse inline sources written to a temporary task folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from nkitui.analysis import AnalysisContext, AnalysisReport, analyze_sources, build_nki_model
from nkitui.analysis.nki.model import KernelModel
from nkitui.common.findings import Finding

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
SAMPLE_TASKS = REPO / "sample_tasks"


def context(d: dict | None) -> AnalysisContext | None:
    return AnalysisContext.from_dict(d) if d is not None else None


@pytest.fixture
def analyze(tmp_path: Path) -> Callable[..., AnalysisReport]:
    def run(nki_src: str, *, cuda_src: str | None = None, ctx: dict | None = None) -> AnalysisReport:
        nki = tmp_path / "kernel_nki.py"
        nki.write_text(textwrap.dedent(nki_src), encoding="utf-8")
        cuda = None
        if cuda_src is not None:
            cuda = tmp_path / "kernel.cu"
            cuda.write_text(textwrap.dedent(cuda_src), encoding="utf-8")
        return analyze_sources(cuda, nki, task_root=tmp_path, context=context(ctx))

    return run


def kernel_model(src: str, ctx: dict | None = None) -> KernelModel:
    model = build_nki_model(textwrap.dedent(src), "k.py", context(ctx))
    assert model.syntax_error is None, model.syntax_error
    assert len(model.kernels) == 1, [k.name for k in model.kernels]
    return model.kernels[0]


def findings(report: AnalysisReport, rule: str) -> list[Finding]:
    return [f for f in report.findings if f.rule == rule]


def rule_ids(report: AnalysisReport, severity: str | None = None) -> set[str]:
    return {f.rule for f in report.findings if severity is None or f.severity == severity}


def no_internal_errors(report: AnalysisReport) -> None:
    errors = [f for f in report.findings if f.rule == "ANALYSIS-ERROR"]
    assert not errors, [f.message for f in errors]

"""The rule registry: every rule documented at its anchor, rules read the model without changing it, a rule
reports only its own id, and a rule written as docs/analysis-rules.md shows runs like the bundled ones."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import nkitui.analysis as analysis
from nkitui.analysis import all_rule_specs, analyze_models, build_cuda_model, build_nki_model
from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.nki.queries import dma_sides, is_dma
from nkitui.analysis.rules import ALL_RULES, ALL_SPECS, FAMILIES, Rule
from nkitui.analysis.rules.registry import RuleSpec
from nkitui.analysis.rules.tiling import TILE_TINY
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding
from nkitui.task import load_task

from tests.analysis.conftest import REPO, SAMPLE_TASKS, findings

DOCS = (REPO / "docs" / "analysis-rules.md").read_text()
TASKS = sorted(p.parent.name for p in SAMPLE_TASKS.glob("*/task.toml"))


def test_every_rule_is_documented_at_its_anchor() -> None:
    missing = [spec.id for spec in all_rule_specs() if f'<a id="{spec.id.lower()}"></a>' not in DOCS]
    assert not missing, f"no anchor in docs/analysis-rules.md for {missing}"
    assert all(spec.anchor == f"docs/analysis-rules.md#{spec.id.lower()}" for spec in all_rule_specs())


def test_rules_run_family_by_family_each_registered_once() -> None:
    checks = [r.check for r in ALL_RULES]
    assert len(checks) == len(set(checks))
    families = [r.check.__module__ for r in ALL_RULES]
    order = [m.__name__ for m in FAMILIES]
    assert families == sorted(families, key=order.index), "rules must run family by family"
    assert [s.id for s in ALL_SPECS] == list(dict.fromkeys(r.spec.id for r in ALL_RULES))


def _models(name: str) -> tuple[analysis.NkiModel, analysis.CudaModel | None, AnalysisContext]:
    task = load_task(SAMPLE_TASKS / name)
    context = AnalysisContext.from_task(task)
    assert task.sources.nki is not None
    nki = build_nki_model(task.sources.nki.read_text(), task.sources.nki.name, context)
    cuda = build_cuda_model(task.sources.cuda.read_text(), task.sources.cuda.name) if task.sources.cuda else None
    return nki, cuda, context


@pytest.mark.parametrize("name", TASKS)
def test_rules_leave_the_model_as_they_found_it(name: str) -> None:
    nki, cuda, context = _models(name)
    assert nki.kernels, name
    before = copy.deepcopy(nki)
    report = analyze_models(nki, cuda, context)
    assert not [f for f in report.findings if f.rule == "ANALYSIS-ERROR"], name
    assert nki == before, f"a rule changed the kernel model of {name}"


def _with_rule(monkeypatch: pytest.MonkeyPatch, spec: RuleSpec, check: object) -> None:
    monkeypatch.setattr(analysis, "ALL_RULES", [*ALL_RULES, Rule(spec, check)])  # type: ignore[arg-type]  # a test rule


def test_a_rule_reporting_another_id_becomes_an_analysis_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def strays(view: KernelView) -> Iterator[Finding]:
        yield view.finding(ALL_SPECS[-1], severity="high", title="wrong id", message="x", line=view.kernel.line)

    _with_rule(monkeypatch, TILE_TINY, strays)
    nki, cuda, context = _models("flawed_transliteration")
    report = analyze_models(nki, cuda, context)
    errors = [f for f in report.findings if f.rule == "ANALYSIS-ERROR"]
    assert len(errors) == 1 and errors[0].title == f"strays failed on {nki.kernels[0].name}"
    assert f"registered for {TILE_TINY.id} but reported {ALL_SPECS[-1].id}" in errors[0].message
    assert not [f for f in report.findings if f.title == "wrong id"]
    assert findings(report, "NKI-TILE-TINY"), "the other rules still report"


EXAMPLE = RuleSpec(id="NKI-EXAMPLE", title="Stores the same HBM region on every iteration", category="performance",
                   severity="low", summary="The example of docs/analysis-rules.md.")


def test_the_documented_example_rule_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The code block of "Writing a rule", run as written (minus its imports, which are the ones above).
    block = re.search(r"## Writing a rule.*?```python\n(.*?)```", DOCS, re.S)
    assert block is not None
    code = block.group(1).split("\n\n\n", 1)[1].replace("STORE_IN_LOOP = RuleSpec(", "_UNUSED = dict(")
    scope = {"Iterator": Iterator, "Finding": Finding, "KernelView": KernelView, "dma_sides": dma_sides,
             "is_dma": is_dma, "STORE_IN_LOOP": EXAMPLE, "rule": lambda spec: (lambda f: f)}
    exec(compile(code, "analysis-rules.md", "exec"), scope)
    _with_rule(monkeypatch, EXAMPLE, scope["repeated_stores"])
    src = tmp_path / "k_nki.py"
    src.write_text(
        "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n@nki.jit\ndef k(a, out):\n"
        "    for i in nl.affine_range(4):\n        t = nl.load(a[i * 128:(i + 1) * 128, :])\n"
        "        nl.store(out[0:128, :], value=t)\n")
    report = analysis.analyze_sources(None, src)
    hits = findings(report, "NKI-EXAMPLE")
    assert [f.line for f in hits] == [8], [f.title for f in report.findings]

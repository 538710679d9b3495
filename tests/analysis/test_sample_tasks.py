"""The bundled sample tasks: each flawed task's structural flaw (per its AUDITOR_KEY.md) is found, and
no good task gets a high-severity finding."""

from __future__ import annotations

from functools import lru_cache

import pytest

from nkitui.analysis import AnalysisReport, analyze_task
from nkitui.task import load_task
from tests.analysis.conftest import SAMPLE_TASKS, findings, no_internal_errors


def _tasks(flawed: bool) -> list[str]:
    return sorted(p.name for p in SAMPLE_TASKS.iterdir()
                  if (p / "task.toml").is_file() and (p / "AUDITOR_KEY.md").is_file() == flawed)


# Flawed tasks whose flaw static analysis can see; each has a test below.
STRUCTURAL = ["flawed_bf16_accum", "flawed_partial_tile", "flawed_transliteration"]
# Flawed for reasons static analysis cannot see (the tolerance is too loose; the kernel is fine).
NOT_STRUCTURAL = ["flawed_loose_tolerance"]


@lru_cache(maxsize=None)
def report(name: str) -> AnalysisReport:
    return analyze_task(load_task(SAMPLE_TASKS / name))


def _lines(f) -> set[int]:
    out = set(f.data.get("lines", []))
    if f.line is not None:
        out.update(range(f.line, (f.end_line or f.line) + 1))
    return out


def test_every_flawed_sample_task_is_classified() -> None:
    assert _tasks(flawed=True) == sorted(STRUCTURAL + NOT_STRUCTURAL)
    assert len(_tasks(flawed=False)) >= 8


@pytest.mark.parametrize("name", _tasks(flawed=False) + NOT_STRUCTURAL)
def test_good_task_has_no_high_severity_finding(name: str) -> None:
    r = report(name)
    no_internal_errors(r)
    assert r.context and r.nki["kernels"], name
    assert [f for f in r.findings if f.severity == "high"] == []
    assert r.alignment, "every sample task has a CUDA source to align with"


def test_transliteration_is_flagged() -> None:
    # AUDITOR_KEY: tiny one-partition tiles (lines 25-26, 39), sequential loops without a carried
    # dependency (22-23), bias reloaded in the loop (26), an unfused element-wise chain (27-37).
    r = report("flawed_transliteration")
    no_internal_errors(r)
    tile = findings(r, "NKI-PART-UNDER128") + findings(r, "NKI-TILE-TINY")
    assert tile and any(f.severity == "high" for f in tile)
    assert all({25, 26, 39} <= _lines(f) for f in tile)
    seq = {f.line: f for f in findings(r, "NKI-SEQ-NO-DEP")}
    assert sorted(seq) == [22, 23]
    assert "nl.sequential_range(n_cols // WARP)" in seq[23].message  # code quoted verbatim
    assert 26 in {f.line for f in findings(r, "NKI-HBM-RELOAD")}
    chains = findings(r, "NKI-UNFUSED-CHAIN")
    assert chains and all(_lines(f) <= set(range(27, 38)) for f in chains)
    assert any(f.data.get("fused") == "gelu_apprx_tanh" for f in chains)


def test_partial_tile_off_by_one_is_flagged() -> None:
    # AUDITOR_KEY: the mask at line 30 (`< last_row`) drops the last row on the load and the store.
    r = report("flawed_partial_tile")
    no_internal_errors(r)
    masks = findings(r, "NKI-PARTIAL-MASK")
    assert {f.severity for f in masks} == {"high"}
    assert {f.line for f in masks} == {30}
    assert {f.data["tensor"] for f in masks} == {"x", "y"}
    assert all(f.data["reach"] == 299 and f.data["size"] == 300 for f in masks)
    assert {line for f in masks for line in f.data["lines"]} == {31, 43}


def test_bf16_accumulation_is_flagged() -> None:
    # AUDITOR_KEY: matmul results added into a bfloat16 SBUF tile (line 33) with tensor_tensor (line 39).
    r = report("flawed_bf16_accum")
    no_internal_errors(r)
    (f,) = findings(r, "NKI-ACC-NOT-PSUM")
    assert f.severity == "high" and f.line == 39
    assert f.data == {"accumulator": "acc", "buffer": "sbuf", "dtype": "bfloat16"}
    assert "line 33" in f.message


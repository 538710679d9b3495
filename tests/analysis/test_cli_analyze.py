"""`nkitui analyze TASK_DIR [--json]` end to end, in a child process like a user would run it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from tests.analysis.conftest import REPO, SAMPLE_TASKS


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nkitui", "analyze", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_json_report_and_exit_status_for_a_flawed_task() -> None:
    proc = _run(str(SAMPLE_TASKS / "flawed_bf16_accum"), "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["files"]["nki"] == "matmul_bf16_f32out_nki.py"
    high = [f for f in data["findings"] if f["severity"] == "high"]
    assert [(f["rule"], f["line"]) for f in high] == [("NKI-ACC-NOT-PSUM", 39)]
    assert {p["role"] for p in data["alignment"]} >= {"global-memory", "accumulator", "matmul"}


def test_rich_report_for_a_good_task() -> None:
    proc = _run(str(SAMPLE_TASKS / "row_softmax"))
    assert proc.returncode == 0, proc.stderr
    assert "row_softmax_nki.py" in proc.stdout and "CUDA ↔ NKI alignment" in proc.stdout


def test_invalid_task_exits_2_and_says_where(tmp_path: Path) -> None:
    bad = tmp_path / "task"
    bad.mkdir()
    (bad / "task.toml").write_text('schema = 1\nid = "x"\ntitle = "t"\n[sources]\nnki = "missing.py"\n')
    proc = _run(str(bad))
    assert proc.returncode == 2
    assert "task.toml" in proc.stderr and "missing.py" in proc.stderr


def test_discovered_task_without_manifest(tmp_path: Path) -> None:
    src = (SAMPLE_TASKS / "flawed_partial_tile" / "log_softmax_nki.py").read_text()
    (tmp_path / "port_nki.py").write_text(src)
    proc = _run(str(tmp_path), "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["context"] is False
    assert {f["rule"] for f in data["findings"] if f["severity"] == "high"} == {"NKI-PARTIAL-MASK"}


def test_rules_listing_matches_docs() -> None:
    proc = _run("--rules")
    assert proc.returncode == 0
    ids = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    docs = (REPO / "docs" / "analysis-rules.md").read_text()
    assert ids and all(f"`{rule}`" in docs for rule in ids), [r for r in ids if f"`{r}`" not in docs]


def test_task_problems_keep_their_bracketed_field_and_one_severity(tmp_path: Path) -> None:
    task = tmp_path / "task"
    task.mkdir()
    (task / "task.toml").write_text('schema = 1\nid = "x"\ntitle = "t"\n[sources]\nnki = "k_nki.py"\n'
                                    '[kernel]\nentry = "k_nki.py::k"\n')
    (task / "k_nki.py").write_text("def k(:\n")
    proc = _run(str(task))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert any("task.toml [sources.reference]: error: required field is missing" in line for line in lines), lines
    assert all(line.count("error: ") == 1 for line in lines), lines
    as_json = _run(str(task), "--json")
    assert as_json.returncode == 2
    data = json.loads(as_json.stdout)
    assert data["ok"] is False and {"file", "field", "message", "fix"} <= set(data["problems"][0])
    assert "sources.reference" in {p["field"] for p in data["problems"]}


def test_alignment_labels_quoting_source_are_printed_verbatim() -> None:
    from rich.console import Console

    from nkitui.analysis import render
    from nkitui.analysis.alignment import AlignmentPair, LineRange
    from nkitui.analysis.report import AnalysisReport

    report = AnalysisReport(nki_file="k_nki.py", cuda_file="k.cu", namespace="legacy")
    report.alignment.append(AlignmentPair(role="shared-memory", cuda=[LineRange(3, 4)], nki=[LineRange(9, 9)],
                                          cuda_label="__shared__ float sdata[blockSize]", nki_label="x[rows, :]",
                                          note=""))
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(report))
    text = console.export_text()
    assert "sdata[blockSize]" in text and "x[rows, :]" in text

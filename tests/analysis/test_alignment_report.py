"""CUDA<->NKI alignment pairs, and the report's serialisation, queries and rendering."""

from __future__ import annotations

import json

from rich.console import Console

from nkitui.analysis import AnalysisContext, AnalysisReport, analyze_sources, render
from nkitui.analysis.alignment import LineRange, ranges
from tests.analysis.conftest import FIXTURES

MATMUL_CTX = AnalysisContext.from_dict({
    "inputs": {"lhsT": {"shape": [256, 256], "dtype": "bfloat16"}, "rhs": {"shape": [256, 1024], "dtype": "bfloat16"}},
    "outputs": {"result": {"shape": [256, 1024], "dtype": "bfloat16"}},
})


def _matmul_report() -> AnalysisReport:
    return analyze_sources(FIXTURES / "cuda" / "matmul_tiled.cu", FIXTURES / "nki" / "legacy_matmul_good.py",
                           task_root=FIXTURES, context=MATMUL_CTX)


def test_ranges_merge_adjacent_lines() -> None:
    assert ranges([5, 3, 4, 9, 11, 10, 3]) == [LineRange(3, 5), LineRange(9, 11)]
    assert ranges([]) == []


def test_matmul_roles_are_paired() -> None:
    report = _matmul_report()
    by_role: dict[str, list] = {}
    for pair in report.alignment:
        by_role.setdefault(pair.role, []).append(pair)
    memory = {p.cuda_label.split()[0]: p for p in by_role["global-memory"]}
    assert memory["A"].nki_label == "lhsT (HBM)" and memory["A"].match == "role"
    assert memory["B"].nki_label == "rhs (HBM)"
    assert memory["C"].nki_label == "result (HBM)"
    assert memory["A"].cuda == [LineRange(6, 6), LineRange(14, 14)]
    assert LineRange(22, 22) in memory["A"].nki  # the load of lhsT
    shared = {p.cuda_label: p for p in by_role["shared-memory"]}
    assert shared["__shared__ float As[32x32]"].nki_label.startswith("lhsT_tile")
    assert shared["__shared__ float Bs[32x33]"].nki_label.startswith("rhs_tile")
    (acc,) = by_role["accumulator"]
    assert acc.cuda_label == "float acc" and acc.nki_label == "PSUM res_psum"
    assert LineRange(24, 25) in acc.nki  # the nc_matmul accumulating into PSUM, and its eviction
    (matmul,) = by_role["matmul"]
    assert matmul.cuda == [LineRange(19, 19)] and matmul.nki == [LineRange(24, 24)]
    (barrier,) = by_role["barrier"]
    assert barrier.cuda == [LineRange(16, 16), LineRange(21, 21)] and barrier.nki
    (index,) = by_role["indexing"]
    assert index.nki == [LineRange(16, 17), LineRange(19, 19)]
    (guard,) = by_role["bounds-guard"]
    assert guard.match == "unmatched" and guard.nki == []
    (launch,) = by_role["launch"]
    assert launch.cuda == [LineRange(6, 6)] and launch.nki == [LineRange(8, 8)]
    assert all(p.data["cuda_kernel"] == "matmul_tiled" for p in report.alignment)


def test_no_cuda_means_no_alignment() -> None:
    report = analyze_sources(None, FIXTURES / "nki" / "legacy_matmul_good.py", task_root=FIXTURES)
    assert report.alignment == [] and report.cuda is None and report.cuda_file is None


def test_report_round_trips_through_json() -> None:
    report = _matmul_report()
    data = json.loads(json.dumps(report.to_dict()))
    assert data["version"] == 1 and data["files"] == {"nki": "nki/legacy_matmul_good.py",
                                                      "cuda": "cuda/matmul_tiled.cu"}
    assert data["counts"] == report.counts() and data["context"] is True
    again = AnalysisReport.from_dict(data)
    assert again.findings == report.findings
    assert [p.to_dict() for p in again.alignment] == [p.to_dict() for p in report.alignment]
    kernel = again.nki["kernels"][0]
    assert kernel["name"] == "matmul_kernel" and kernel["engines"] == {"dma": 3, "tensor": 1, "vector": 2}
    assert {"line": 24, "api": "nisa.nc_matmul", "kind": "matmul", "engine": "tensor"} in kernel["ops"]
    assert {(t["name"], t["buffer"], t["partitions"]) for t in kernel["tiles"]} >= {
        ("res_psum", "psum", 128), ("lhsT_tile", "sbuf", 128), ("rhs_tile", "sbuf", 128)}
    assert [(lp["var"], lp["kind"], lp["trip"]) for lp in kernel["loops"]] == [
        ("m", "affine", 2), ("n", "affine", 2), ("k", "affine", 2)]
    assert data["cuda"]["kernels"][0]["shared"][0]["name"] == "As"


def test_gutter_and_pairs_at() -> None:
    report = _matmul_report()
    gutter = report.gutter("nki/legacy_matmul_good.py")
    assert sorted(gutter) == [22, 23]
    assert {f.rule for fs in gutter.values() for f in fs} == {"NKI-HBM-RELOAD"}
    roles = {p.role for p in report.pairs_at("cuda", 19)}
    assert {"accumulator", "matmul"} <= roles
    assert {p.role for p in report.pairs_at("nki", 24)} >= {"accumulator", "matmul"}


def test_render_shows_findings_and_alignment() -> None:
    console = Console(width=140, record=True, color_system=None)
    console.print(render(_matmul_report()))
    text = console.export_text()
    assert "NKI-HBM-RELOAD" in text and "nki/legacy_matmul_good.py:22" in text
    assert "CUDA ↔ NKI alignment" in text and "register accumulator → PSUM" in text


def test_syntax_error_report() -> None:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "broken_nki.py"
        p.write_text("import nki\n\ndef k(x:\n    return x\n")
        report = analyze_sources(None, p, task_root=d)
    (f,) = report.findings
    assert f.rule == "NKI-SYNTAX" and f.severity == "high" and f.line == 3 and f.file == "broken_nki.py"


def test_softmax_reductions_and_math_are_paired() -> None:
    ctx = AnalysisContext.from_dict({"inputs": {"x": {"shape": [300, 1000], "dtype": "float32"}},
                                     "outputs": {"y": {"shape": [300, 1000], "dtype": "float32"}}})
    report = analyze_sources(FIXTURES / "cuda" / "softmax.cu", FIXTURES / "nki" / "legacy_softmax_good.py",
                             task_root=FIXTURES, context=ctx)
    assert report.findings == []
    by_role = {}
    for pair in report.alignment:
        by_role.setdefault(pair.role, []).append(pair)
    (red,) = by_role["reduction"]
    assert LineRange(5, 5) in red.cuda and LineRange(10, 10) in red.cuda  # shuffles in the __device__ helpers
    assert red.nki == [LineRange(18, 18), LineRange(20, 20)]  # tensor_reduce, activation_reduce
    (exp,) = [p for p in by_role["math"] if p.cuda_label == "exp"]
    assert exp.match == "name" and exp.nki == [LineRange(20, 20)]
    (guard,) = by_role["bounds-guard"]
    assert guard.cuda == [LineRange(16, 16)] and guard.match == "role" and LineRange(17, 18) in guard.nki
    memory = {p.cuda_label.split()[0]: p for p in by_role["global-memory"]}
    assert memory["x"].match == "name" and memory["y"].match == "name"


def test_a_reduction_scratch_buffer_is_not_paired_with_staged_data() -> None:
    from nkitui.analysis import analyze_task
    from nkitui.task import load_task

    from tests.analysis.conftest import SAMPLE_TASKS

    report = analyze_task(load_task(SAMPLE_TASKS / "flawed_partial_tile"))
    shared = [p for p in report.alignment if p.role == "shared-memory"]
    scratch = [p for p in shared if "scratch" in p.cuda_label]
    assert len(scratch) == 1, [(p.cuda_label, p.nki_label) for p in shared]
    assert scratch[0].nki == [] and scratch[0].nki_label.startswith("none needed") and scratch[0].match == "unmatched"
    staged = [p for p in shared if p is not scratch[0]]
    assert [(p.cuda_label, p.nki_label) for p in staged] == [("registers (no __shared__ staging)", "x_tile")]


def test_a_register_filled_buffer_pairs_with_a_tile_of_its_name() -> None:
    from nkitui.analysis import analyze_task
    from nkitui.task import load_task

    from tests.analysis.conftest import SAMPLE_TASKS

    report = analyze_task(load_task(SAMPLE_TASKS / "linear_scan"))
    shared = {p.cuda_label: p for p in report.alignment if p.role == "shared-memory"}
    carry = shared["__shared__ float carry[]"]
    assert carry.match == "name" and carry.nki_label.startswith("carry") and carry.nki
    assert shared["__shared__ float warp_a[8]"].nki_label.startswith("none needed")


def test_each_dot_accumulator_pairs_with_its_own_psum_tile() -> None:
    from nkitui.analysis import analyze_task
    from nkitui.task import load_task

    from tests.analysis.conftest import SAMPLE_TASKS

    report = analyze_task(load_task(SAMPLE_TASKS / "attention_fwd"))
    accs = {p.cuda_label: p for p in report.alignment if p.role == "accumulator"}
    assert accs["float s"].nki_label == "PSUM s_psum" and accs["float s"].match == "name"
    assert accs["float acc"].nki_label == "PSUM pv_psum" and accs["float acc"].match == "role"
    qk_line = accs["float s"].nki[0].start  # the QK^T matmul belongs to s, not to the P.V accumulator
    assert all(not (r.start <= qk_line <= r.end) for r in accs["float acc"].nki)

import json
from pathlib import Path

import numpy as np
import pytest

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.mutants import OPERATORS, MutationReport, generate_mutants, run_mutants
from nkitui.evaluate.numerics.callables import RunOptions
from nkitui.evaluate.numerics.tolerance import TolerancePolicy

from .helpers import out_spec, run_fake_nki_source

LEGACY = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        acc = nl.zeros((128, N), dtype=nl.float32, buffer=nl.psum)
        scratch = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            a_tile = lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128]
            acc += nisa.nc_matmul(a_tile, rhs[nl.ds(k * 128, 128), :])
        out[m * 128:(m + 1) * 128, :] = acc
    return out
'''

NEW = '''\
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in range(M // 128):
        acc = nl.zeros((128, N), dtype=nl.float32, buffer=nl.psum)
        for k in range(K // 128):
            nisa.nc_matmul(acc, lhsT[nl.ds(k * 128, 128), nl.ds(m * 128, 128)], rhs[k * 128:(k + 1) * 128, :])
        diff = nisa.tensor_tensor(data1=acc, data2=acc * 0.5, op=nl.subtract)
        out[m * 128:(m + 1) * 128, :] = diff + acc * 0.5
    return out
'''


def _inputs():
    rng = np.random.default_rng(0)
    return {"lhsT": rng.normal(size=(256, 256)).astype(np.float32), "rhs": rng.normal(size=(256, 128)).astype(np.float32)}


def _reference(inputs):
    return {"c": inputs["lhsT"].astype(np.float64).T @ inputs["rhs"].astype(np.float64)}


def _by_operator(mutants):
    out = {}
    for m in mutants:
        out.setdefault(m.operator, []).append(m)
    return out


@pytest.mark.parametrize("source", [LEGACY, NEW], ids=["legacy", "new"])
def test_every_operator_finds_sites_in_both_namespaces(source):
    mutants = generate_mutants(source, "port.py")
    ops = _by_operator(mutants)
    assert set(ops) == set(OPERATORS)
    lines = source.splitlines()
    for m in mutants:
        assert len(m.source.splitlines()) == len(lines), m.id  # line numbers are kept
        changed = [i for i, (a, b) in enumerate(zip(lines, m.source.splitlines())) if a != b]
        assert changed and changed[0] + 1 == m.line, (m.id, changed, m.line)
        assert m.file == "port.py"


def test_the_mutations_are_the_documented_ones():
    ops = _by_operator(generate_mutants(LEGACY, "port.py"))
    assert ops["drop-last-tile"][0].description == "nl.affine_range(M // 128) -> nl.affine_range(M // 128 - 1)"
    assert ops["lower-accumulator"][0].line == 12  # the PSUM accumulator comes first
    assert "nl.bfloat16, buffer=nl.psum" in ops["lower-accumulator"][0].description
    skip = ops["skip-accumulation"][0]
    assert skip.line == 16 and "skipped when k == 0" in skip.description
    assert "if k != 0: acc += nisa.nc_matmul" in skip.source
    swap = ops["swap-operands"][0]
    assert "nisa.nc_matmul(rhs[nl.ds(k * 128, 128), :], a_tile)" in swap.description
    shifts = [m.description for m in ops["shift-index"]]
    assert any("nl.ds(k * 128 + 1, 128)" in d for d in shifts)
    assert any("lhsT[k * 128 + 1:(k + 1) * 128 + 1" in d for d in shifts)
    new_ops = _by_operator(generate_mutants(NEW, "port.py"))
    assert "data1=acc * 0.5, data2=acc" in new_ops["swap-operands"][-1].description or any(
        "data1=acc * 0.5, data2=acc" in m.description for m in new_ops["swap-operands"])
    assert any(m.description.startswith("nisa.nc_matmul(acc,") and "skipped" in m.description
               for m in new_ops["skip-accumulation"])


def test_a_tight_tolerance_catches_every_effective_mutant():
    inputs = _inputs()
    ref = _reference(inputs)
    original = run_fake_nki_source(LEGACY, inputs, RunOptions())
    mutants = generate_mutants(LEGACY, "port.py")
    spec = out_spec("c", (256, 128), atol=1e-4, rtol=1e-4)
    report = run_mutants(mutants, run_fake_nki_source, inputs, ref, [spec], original)
    statuses = {r.id: r.status for r in report.results}
    assert "survived" not in statuses.values(), statuses
    assert statuses["lower-accumulator#1"] == "caught"
    assert statuses["lower-accumulator#2"] == "equivalent"  # the unused scratch tile
    assert statuses["skip-accumulation#1"] == "caught"
    assert "crashed" in statuses.values()  # an index shifted past the end of the input
    assert report.findings == ()
    assert report.score == 1.0
    # the dropped row tile is never written (NaN on the emulator): its error is infinite, not left out
    dropped = next(r for r in report.results if r.id == "drop-last-tile#1")
    assert dropped.line == 11 and dropped.max_abs == float("inf")
    assert "16384 of them NaN/Inf against the reference" in dropped.detail


def test_a_loose_tolerance_lets_the_bf16_accumulator_survive():
    inputs = _inputs()
    ref = _reference(inputs)
    original = run_fake_nki_source(LEGACY, inputs, RunOptions())
    spec = out_spec("c", (256, 128), kind="rel_l2", tol=0.05)
    advised = {"c": TolerancePolicy(kind="allclose", atol=1e-4, rtol=1e-4)}
    report = run_mutants(generate_mutants(LEGACY, "port.py"), run_fake_nki_source, inputs, ref, [spec], original,
                         advised)
    survived = [r for r in report.results if r.status == "survived"]
    assert [r.id for r in survived] == ["lower-accumulator#1"]
    [f] = report.findings
    assert f.rule == rules.MUTANT_SURVIVED and f.severity == "high"
    assert (f.file, f.line) == ("port.py", 12)
    assert "rel_l2 tol=0.05" in f.message and "bfloat16" in f.message
    assert "the advisor derives for a correct port (`c`: allclose atol=0.0001 rtol=0.0001) rejects it" in f.message
    assert 0 < report.score < 1
    back = MutationReport.from_dict(json.loads(json.dumps(report.to_dict(), allow_nan=False)))
    assert back.to_dict() == report.to_dict()


def test_a_change_within_a_correct_ports_error_is_undetectable_not_survived():
    inputs = _inputs()
    ref = _reference(inputs)
    original = run_fake_nki_source(LEGACY, inputs, RunOptions())
    spec = out_spec("c", (256, 128), kind="rel_l2", tol=0.05)
    advised = {"c": TolerancePolicy(kind="rel_l2", tol=0.02)}  # as loose as a bf16 accumulator needs
    report = run_mutants(generate_mutants(LEGACY, "port.py"), run_fake_nki_source, inputs, ref, [spec], original,
                         advised)
    assert {r.id: r.status for r in report.results}["lower-accumulator#1"] == "undetectable"
    assert report.findings == ()


def test_unparsable_source_names_file_and_line():
    with pytest.raises(SyntaxError, match=r"port.py:2: cannot parse the NKI port"):
        generate_mutants("x = 1\ndef f(:\n  pass\n", "port.py")


def test_statements_sharing_a_line_with_their_loop_are_left_alone():
    src = "def k(x):\n    acc = 0\n    for i in range(4): acc += x[i]\n    return acc\n"
    ops = _by_operator(generate_mutants(src, "k.py"))
    assert "skip-accumulation" not in ops and "drop-last-tile" in ops


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parents[3] / "sample_tasks").iterdir()
                                        if (p / "task.toml").is_file()))
def test_sample_ports_yield_mutants_that_parse(name):
    root = Path(__file__).parents[3] / "sample_tasks" / name
    port = next(root.glob("*_nki.py"))
    source = port.read_text()
    mutants = generate_mutants(source, port.name)
    assert mutants, name
    for m in mutants:
        compile(m.source, port.name, "exec")
        assert len(m.source.splitlines()) == len(source.splitlines())

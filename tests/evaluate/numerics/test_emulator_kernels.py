"""Precision isolation and mutation testing on real NKI kernels, run by nkitui's emulator."""

from __future__ import annotations

import importlib.util
import itertools
import sys

import numpy as np

from nkitui import emulator
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import advise_output
from nkitui.evaluate.numerics.mutants import generate_mutants, run_mutants
from nkitui.evaluate.numerics.precision import isolate_precision
from nkitui.evaluate.numerics.callables import RunOptions

from .helpers import BF16, out_spec

LEGACY_MATMUL = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        res_psum = nl.zeros((128, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            lhsT_tile = nl.load(lhsT[nl.ds(k * 128, 128), nl.ds(m * 128, 128)])
            rhs_tile = nl.load(rhs[nl.ds(k * 128, 128), :])
            res_psum += nisa.nc_matmul(lhsT_tile, rhs_tile)
        res_sb = nl.copy(res_psum, dtype=nl.float32)
        nl.store(result[nl.ds(m * 128, 128), :], value=res_sb)
    return result
'''

# The same kernel with the running sum in a bf16 SBUF tile (the flaw of the flawed_bf16_accum task).
LEGACY_BF16_ACC = LEGACY_MATMUL.replace("for k in nl.affine_range", "for k in nl.sequential_range").replace(
    "res_psum = nl.zeros((128, N), nl.float32, buffer=nl.psum)",
    "res_psum = nl.zeros((128, N), nl.bfloat16, buffer=nl.sbuf)",
).replace(
    "res_psum += nisa.nc_matmul(lhsT_tile, rhs_tile)",
    "res_psum[...] = nl.add(res_psum, nisa.nc_matmul(lhsT_tile, rhs_tile), dtype=nl.bfloat16)",
)

_counter = itertools.count()


def _load(source: str, tmp_path):
    emulator.install()
    path = tmp_path / f"kernel_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop(path.stem, None)
    return module.matmul_kernel


def _source_runner(tmp_path):
    def run(source, inputs, options):
        kernel = _load(source, tmp_path)
        with emulator.options(precise=options.precise):
            out = kernel(np.ascontiguousarray(inputs["a"].T), inputs["b"])
        return {"c": np.asarray(out)}

    return run


def _inputs(k=1024):
    rng = np.random.default_rng(0)
    return {"a": rng.normal(size=(128, k)).astype(BF16), "b": rng.normal(size=(k, 128)).astype(BF16)}


def _reference(inputs):
    return {"c": inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)}


def test_precision_isolation_on_emulated_kernels(tmp_path):
    inputs = _inputs()
    spec = out_spec("c", (128, 128), "float32", kind="range_relative", atol=1e-5, rtol=2e-2, k=1024)
    run = _source_runner(tmp_path)
    good = isolate_precision(lambda i, o: run(LEGACY_MATMUL, i, o), _reference, inputs, [spec], "matmul")
    assert good.error is None and [o.verdict for o in good.outputs] == ["consistent"] and good.findings == ()
    bad = isolate_precision(lambda i, o: run(LEGACY_BF16_ACC, i, o), _reference, inputs, [spec], "matmul")
    [o] = bad.outputs
    assert o.verdict == "dtype-error-dominates" and o.passed_precise
    assert "8 matmul partial sums" in o.best_hypothesis.cause and "bfloat16" in o.best_hypothesis.cause
    assert [f.rule for f in bad.findings] == [rules.DTYPE_ERROR_DOMINATES]


def test_mutants_of_an_emulated_kernel(tmp_path):
    inputs = _inputs(512)
    ref = _reference(inputs)
    run = _source_runner(tmp_path)
    original = run(LEGACY_MATMUL, inputs, RunOptions())
    mutants = generate_mutants(LEGACY_MATMUL, "matmul.py")
    assert {m.operator for m in mutants} == {"drop-last-tile", "shift-index", "skip-accumulation", "swap-operands",
                                             "lower-accumulator"}
    spec = out_spec("c", (128, 128), "float32", atol=1e-4, rtol=1e-4, k=512)
    advice = advise_output(spec, ref["c"], inputs, "matmul")
    report = run_mutants(mutants, run, inputs, ref, [spec], original, {"c": advice.policy})
    status = {m.operator: set() for m in mutants}
    for r in report.results:
        status[r.operator].add(r.status)
    assert status["drop-last-tile"] == {"caught"}
    assert status["skip-accumulation"] == {"caught"}
    assert "crashed" in status["shift-index"]  # the emulator refuses the out-of-bounds last tile
    assert report.count("survived") == 0 and report.findings == ()
    # a loose nki-library-style tolerance lets the bf16 accumulator through: the advisor's would not
    loose = out_spec("c", (128, 128), "float32", kind="range_relative", atol=1e-5, rtol=2e-2, k=512)
    weak = run_mutants([m for m in mutants if m.operator == "lower-accumulator"], run, inputs, ref, [loose],
                       original, {"c": advice.policy})
    assert [r.status for r in weak.results] == ["survived", "survived"]
    assert [(f.rule, f.file, f.line) for f in weak.findings] == [
        (rules.MUTANT_SURVIVED, "matmul.py", 12),  # the PSUM accumulator in bf16
        (rules.MUTANT_SURVIVED, "matmul.py", 17),  # the PSUM -> SBUF copy rounding to bf16
    ]

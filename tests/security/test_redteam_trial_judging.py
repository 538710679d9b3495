"""Red team, round 10A: wrong kernels that passed because of how the adversarial trials were drawn and judged.

1. **Exact values never drawn.** `vector_add` plus `c += (a == 0)` PASSED: no seed, fresh set or trial held an
   exact 0 (the tiny trial's values are subnormals, never 0). The same for `a == -b` or integer-valued inputs.
   Now every op gets a "structured" trial (exact zeros and -0, small integers, half-integer ties, a repeated
   value, b = -a).
2. **"Tolerance-only" accepted thousands of ULPs.** `vector_add` plus `c += 0.004 * (a > 6.5)` PASSED: its large
   trial was excused by a bound whose absolute term followed max|input| = 1e4, on a task that promises 1 ULP.
   Now the bound is per element, and a ULP promise holds at every scale (x4).
3. **Norms judged on NaN/Inf only.** The bundled layernorm with `eps * eps` PASSED: its equal trial was judged on
   NaN/Inf only, and no row came near sqrt(eps). Now a norm's low-variance trial shrinks rows through sqrt(eps)
   (one in four a repeated value: the equal rows) and is judged by the reference's own response to the rounding
   of the row statistics.

Each wrong kernel is a few lines added to a copy of a bundled task, run through `nkitui check`'s evaluation, with
the untouched copy as the control that still passes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nkitui.common.resources import bundled_dir
from tests.security.test_forgery import evaluate

SAMPLES = bundled_dir("sample_tasks")
ADD_LINE = "        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)\n"

ZERO_A = """        z_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z_tile, data=a_tile, op0=nl.equal, operand0=0.0)
        nisa.tensor_tensor(dst=c_tile, data1=c_tile, data2=z_tile, op=nl.add)
"""
A_EQUALS_MINUS_B = """        s_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=s_tile, data1=a_tile, data2=b_tile, op=nl.add)
        z_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z_tile, data=s_tile, op0=nl.equal, operand0=0.0, op1=nl.multiply, operand1=0.5)
        nisa.tensor_tensor(dst=c_tile, data1=c_tile, data2=z_tile, op=nl.add)
"""
INTEGER_A = """        sq_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=sq_tile, data1=a_tile, data2=a_tile, op=nl.multiply)
        z_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z_tile, data=sq_tile, op0=nl.equal, operand0=4.0, op1=nl.multiply, operand1=0.25)
        nisa.tensor_tensor(dst=c_tile, data1=c_tile, data2=z_tile, op=nl.add)
"""
TOLERANCE_ONLY = """        z_tile = nl.ndarray((P, F), dtype=c.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z_tile, data=a_tile, op0=nl.greater, operand0=6.5, op1=nl.multiply, operand1=0.004)
        nisa.tensor_tensor(dst=c_tile, data1=c_tile, data2=z_tile, op=nl.add)
"""


def _copy(name: str, root: Path) -> Path:
    task = root / name
    shutil.copytree(SAMPLES / name, task, ignore=shutil.ignore_patterns("AUDITOR_KEY.md", "__pycache__"))
    return task


def _vector_add(root: Path, attack: str = "") -> Path:
    task = _copy("vector_add", root)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("1048576", "262144"))  # 2 cores x 128 x 1024: the kernel's unit
    kernel = task / "vector_add_nki.py"
    source = kernel.read_text()
    assert ADD_LINE in source
    kernel.write_text(source.replace(ADD_LINE, ADD_LINE + attack))
    return task


def _wrong_eps(root: Path, name: str) -> Path:
    task = _copy(name, root)
    kernel = task / f"{name}_nki.py"
    source = kernel.read_text()
    line = "nl.full((P, 1), eps, dtype=nl.float32"
    assert line in source
    kernel.write_text(source.replace(line, "nl.full((P, 1), eps * eps, dtype=nl.float32"))
    return task


def _evaluate(task: Path):  # noqa: ANN202
    return evaluate(task, seeds=1, trials=True, timeout_s=120.0)[0]


def _trials(result) -> dict[str, str]:  # noqa: ANN001
    audit = result.numerics_audit()
    assert audit is not None and audit.trials is not None
    return {t.name: t.status for t in audit.trials.trials}


def _check(result, cid: str):  # noqa: ANN001, ANN202
    return next(c for c in result.checks if c.id == cid)


def _not_passed_by_trials(result, failing: set[str]) -> None:  # noqa: ANN001
    checks = [(c.id, c.passed, c.detail) for c in result.checks]
    assert result.status != "passed" and result.exit_code != 0, checks
    assert _check(result, "output:" + result.numerics_audit().outputs[0].name).passed is True, checks  # seeds pass
    assert _check(result, "trials").passed is False, checks
    statuses = _trials(result)
    assert {name for name, status in statuses.items() if status == "fail"} >= failing, statuses


@pytest.mark.parametrize("attack", [ZERO_A, A_EQUALS_MINUS_B, INTEGER_A], ids=["a==0", "a==-b", "a==+-2"])
def test_a_kernel_wrong_only_on_exact_values_is_not_passed(tmp_path: Path, record_property, attack: str) -> None:
    record_property("protection", "trials:structured")
    _not_passed_by_trials(_evaluate(_vector_add(tmp_path, attack)), {"structured"})


def test_thousands_of_ulps_on_the_large_trial_are_not_tolerance_only(tmp_path: Path, record_property) -> None:
    record_property("protection", "trials:per-element-bound")
    result = _evaluate(_vector_add(tmp_path, TOLERANCE_ONLY))
    _not_passed_by_trials(result, {"large"})


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_a_norm_with_the_wrong_eps_is_not_passed(tmp_path: Path, record_property, name: str) -> None:
    record_property("protection", "trials:norm-conditioning")
    result = _evaluate(_wrong_eps(tmp_path, name))
    _not_passed_by_trials(result, {"low-variance"})


@pytest.mark.parametrize("name", ["vector_add", "layernorm", "rmsnorm"])
def test_the_honest_controls_pass(tmp_path: Path, name: str) -> None:
    task = _vector_add(tmp_path) if name == "vector_add" else _copy(name, tmp_path)
    result = _evaluate(task)
    assert result.status == "passed", [(c.id, c.passed, c.detail) for c in result.checks]
    statuses = _trials(result)
    assert "structured" in statuses and set(statuses.values()) <= {"pass", "tolerance-only"}, statuses

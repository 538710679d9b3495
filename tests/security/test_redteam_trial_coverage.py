"""Red team, round 9c, findings 2 and 3: kernels wrong only where the adversarial trials did not look.

On 6cf512a (main 478370d) the trials put their values into the largest float input only (two for matmul and
attention), and their "large" values stopped at min(1e4, dtype max / 16). A copy of `vector_add` computing
`a + clamp(b, -50, 50)` (b only ever held the seeds' normal(0, 1) values) and one computing
`a + b + 1000 * (a >= 2e4)` both PASSED `nkitui check`.

Now `large` spreads every float input's magnitudes over the decades up to the op's safe top (fp32 element-wise:
~1e36; 1 in 8 elements in the small normals), each input alone (`large: <x>`) and all together, and such a case
is judged at each element's own scale. Every wrong kernel here fails its trials; the honest controls pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.numerics.inputs import make_inputs
from nkitui.evaluate.numerics.trials import run_trials
from nkitui.executor.backends.emulator import EmulatorBackend
from nkitui.task import load_task
from tests.helpers.inprocess import kernel_runner, load_reference
from tests.security.test_forgery import evaluate

ADD_LINE = "nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)"
CLAMP_B = "c_tile = nl.add(a_tile, nl.minimum(nl.maximum(b_tile, -50.0), 50.0))  # wrong: b clamped to +-50"
BUMP_ABOVE_2E4 = ("c_tile = nl.add(nl.add(a_tile, b_tile), "
                  "nl.multiply(nl.greater_equal(a_tile, 20000.0, dtype=nl.float32), 1000.0))  # wrong where a >= 2e4")


def _vector_add(root: Path, line: str | None) -> Path:
    """A copy of the bundled vector_add at 262144 elements whose add is `line` (None: the honest kernel)."""
    shutil.copytree(bundled_dir("sample_tasks") / "vector_add", root)
    manifest = root / "task.toml"
    manifest.write_text(manifest.read_text().replace("1048576", "262144"))
    kernel = root / "vector_add_nki.py"
    source = kernel.read_text()
    assert ADD_LINE in source
    if line is not None:
        kernel.write_text(source.replace(ADD_LINE, line))
    return root


def _matmul_clamping_lhs(root: Path, clamp: bool) -> Path:
    """A copy of the bundled matmul_bf16 (bf16 operands) whose first operand (`a`, the smaller one) is clamped to
    +-1e5 on the device: wrong only where |a| > 1e5."""
    shutil.copytree(bundled_dir("sample_tasks") / "matmul_bf16", root)
    kernel = root / "matmul_bf16_nki.py"
    source = kernel.read_text()
    load = "src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])"
    assert load in source
    if clamp:
        source = source.replace(load, load + "\n            nisa.tensor_copy(lhsT_sb[:, k, :], "
                                "nl.minimum(nl.maximum(lhsT_sb[:, k, :], -1e5), 1e5))  # wrong: clamped")
    kernel.write_text(source)
    return root


def _evaluate(task: Path):  # noqa: ANN202
    return evaluate(task, seeds=2, trials=True, timeout_s=180.0)[0]


def _failing_trials(result) -> list[str]:  # noqa: ANN001
    audit = result.numerics_audit()
    assert audit is not None and audit.trials is not None
    return [t.name for t in audit.trials.adversarial if t.status in ("fail", "error")]


def _check(result, name: str):  # noqa: ANN001, ANN202
    return next(c for c in result.checks if c.id == name)


@pytest.mark.parametrize("line, caught_by", [
    (CLAMP_B, "large: b"),  # finding 2: wrong on the second input only
    (BUMP_ABOVE_2E4, "large: a"),  # finding 3: wrong above 2e4 only
], ids=["clamp-b", "bump-above-2e4"])
def test_a_vector_add_wrong_where_the_old_trials_never_looked_is_not_passed(tmp_path: Path, record_property, line: str,
                                                                           caught_by: str) -> None:
    record_property("protection", "trials:every-input-every-decade")
    result = _evaluate(_vector_add(tmp_path / "task", line))
    checks = [(c.id, c.passed, c.detail[:200]) for c in result.checks]
    assert result.status == "failed" and result.exit_code != 0, checks
    # its seeds are right (their values never reach the wrong range): only the trials see it
    assert all(c.passed for c in result.checks if c.id.startswith("output:")), checks
    assert _check(result, "trials").passed is False, checks
    failing = _failing_trials(result)
    assert caught_by in failing and "large" in failing, failing


def test_the_honest_vector_add_passes_every_trial(tmp_path: Path) -> None:
    """The control: the same copy with its honest add passes, every trial included."""
    result = _evaluate(_vector_add(tmp_path / "task", None))
    assert result.status == "passed", [(c.id, c.passed, c.detail[:200]) for c in result.checks]
    audit = result.numerics_audit()
    assert audit is not None and audit.trials is not None
    assert {t.name for t in audit.trials.adversarial} == {"large", "large: a", "large: b", "tiny", "nonfinite",
                                                          "structured"}
    assert all(t.status == "pass" for t in audit.trials.adversarial), [(t.name, t.status) for t in audit.trials.adversarial]


def test_a_bf16_matmul_wrong_above_1e5_on_its_smaller_operand_only_is_not_passed(tmp_path: Path) -> None:
    """Findings 2 and 3 on a matmul with bf16 operands: the old trials scaled both operands up to 1e4 and sprinkled
    NaN/Inf into the larger one (`b`) only; clamping `a` at +-1e5 is caught by `large: a` now."""
    result = _evaluate(_matmul_clamping_lhs(tmp_path / "task", clamp=True))
    checks = [(c.id, c.passed, c.detail[:200]) for c in result.checks]
    assert result.status == "failed" and _check(result, "trials").passed is False, checks
    assert all(c.passed for c in result.checks if c.id.startswith("output:")), checks
    assert "large: a" in _failing_trials(result)


# -- variants, judged in-process (our own kernels on the emulator; the trials and their verdicts as nkitui's) ---
def _trials(task_dir: Path) -> dict[str, str]:
    task = load_task(task_dir)
    backend = EmulatorBackend(task, task.target)
    backend.prepare()
    report = run_trials(kernel_runner(backend, task), load_reference(task), lambda s: make_inputs(task, s), [0],
                        task.outputs, task.op)
    assert report.seeds[0].status == "pass"  # the seed's values never reach the wrong range
    return {t.name: t.status for t in report.adversarial}


def _wrong_where(condition: str) -> str:
    """a + b, plus 1% of the input `condition` looks at where it holds: wrong only there."""
    operand = condition.split("(")[1].split(",")[0]
    return (f"c_tile = nl.add(nl.add(a_tile, b_tile), nl.multiply({operand}, nl.multiply("
            f"{condition}, 0.01)))")


@pytest.mark.parametrize("condition", [
    "nl.greater_equal(a_tile, 1e5, dtype=nl.float32)",
    "nl.greater_equal(a_tile, 1e10, dtype=nl.float32)",
    "nl.greater_equal(a_tile, 1e30, dtype=nl.float32)",
    "nl.less_equal(a_tile, -1e6, dtype=nl.float32)",  # negative large values only
    "nl.greater_equal(b_tile, 1e10, dtype=nl.float32)",  # the second input only
], ids=["above-1e5", "above-1e10", "above-1e30", "below-minus-1e6", "b-above-1e10"])
def test_fp32_kernels_wrong_only_in_one_range_fail_their_trials(tmp_path: Path, condition: str) -> None:
    statuses = _trials(_vector_add(tmp_path / "task", _wrong_where(condition)))
    assert statuses["large"] == "fail", statuses
    assert "fail" in (statuses["large: a"], statuses["large: b"]), statuses


def test_the_honest_copies_pass_every_in_process_trial(tmp_path: Path) -> None:
    statuses = _trials(_vector_add(tmp_path / "add", None))
    assert set(statuses.values()) == {"pass"}, statuses
    statuses = _trials(_matmul_clamping_lhs(tmp_path / "matmul", clamp=False))
    assert set(statuses.values()) <= {"pass", "tolerance-only"}, statuses

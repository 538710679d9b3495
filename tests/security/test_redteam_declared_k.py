"""Red team, round 9c, finding 4: task.toml weakening the precision check unseen.

A copy of the bundled vector_add (262144 elements) declares `reduction_length = 100000000` on its element-wise
output, with no `op`, and a loose `rel_l2` (5e-3); its kernel drops `b` from one element per logical core (2
wrong elements). The tolerance accepts it, and precision isolation, expecting the algorithm error of a
1e8-term sum, called it consistent: on 6cf512a the run PASSED. The declared K is now held to what the kernel's
instruction trace and the shapes allow (evaluate/numerics/kbound.py), precision isolation judges with that
bound and fails the kernel, and the report names the declared K and the loose tolerance."""

from __future__ import annotations

import shutil
from pathlib import Path

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.numerics import findings as rules
from tests.helpers.pipeline import evaluate_in_process

N = 262144
WRONG = ("        nisa.tensor_tensor(dst=c_tile[0:1, 0:1], data1=c_tile[0:1, 0:1], data2=b_tile[0:1, 0:1], "
         "op=nl.subtract)\n")


def _task(root: Path, *, k: str, tolerance: str, wrong: bool, op: bool = False) -> Path:
    shutil.copytree(bundled_dir("sample_tasks") / "vector_add", root)
    manifest = (root / "task.toml").read_text()
    if not op:
        manifest = manifest.replace('op = "elementwise"\n', "")
    manifest = manifest.replace("[1048576]", f"[{N}]").replace(
        'tolerance = { kind = "ulp", max_ulp = 1 }', f"tolerance = {tolerance}\n{k}")
    (root / "task.toml").write_text(manifest)
    if wrong:
        kernel = root / "vector_add_nki.py"
        store = "        nisa.dma_copy(dst=c_rows[row0:row0 + P, :], src=c_tile)\n"
        text = kernel.read_text()
        assert store in text
        kernel.write_text(text.replace(store, WRONG + store))
    return root


def _evaluate(task: Path):  # noqa: ANN202
    return evaluate_in_process(task, seeds=2, trials=False, precision=True, timeout_s=120.0, memory_mb=4096).result


def _findings(result) -> dict[str, object]:  # noqa: ANN001
    audit = result.numerics_audit()
    assert audit is not None
    return {f.rule: f for f in audit.findings}


def test_a_declared_k_beyond_the_kernels_sums_does_not_pass_a_wrong_kernel(tmp_path: Path, record_property) -> None:
    record_property("protection", "numerics:declared-k-bound")
    task = _task(tmp_path / "task", k="reduction_length = 100000000", tolerance='{ kind = "rel_l2", tol = 5e-3 }',
                 wrong=True)
    result = _evaluate(task)
    checks = {c.id: (c.passed, c.detail) for c in result.checks}
    assert checks["output:c"][0] is True, checks  # the loose tolerance alone lets it through
    assert result.status != "passed" and result.exit_code != 0, checks
    assert checks["precision"][0] is False and "algorithm-error" in str(checks["precision"][1]), checks
    found = _findings(result)
    k = found[rules.K_EXCEEDS_BOUND]
    assert k.file == "task.toml" and k.data["declared"] == 100_000_000 and k.data["used"] <= 3, k.data
    assert "vector_add_nki.py" in k.message  # the instruction that bounds it
    assert rules.TOL_LOOSE in found


def test_the_same_task_with_the_honest_kernel_still_passes(tmp_path: Path) -> None:
    """The control: the honest kernel under the same task.toml passes, with the task's two problems reported."""
    task = _task(tmp_path / "task", k="reduction_length = 100000000", tolerance='{ kind = "rel_l2", tol = 5e-3 }',
                 wrong=False)
    result = _evaluate(task)
    assert result.status == "passed", [(c.id, c.passed, c.detail) for c in result.checks]
    found = _findings(result)
    assert rules.K_EXCEEDS_BOUND in found and rules.TOL_LOOSE in found


def test_an_honest_task_gets_neither_finding(tmp_path: Path) -> None:
    task = _task(tmp_path / "task", k="", tolerance='{ kind = "ulp", max_ulp = 1 }', wrong=False, op=True)
    result = _evaluate(task)
    assert result.status == "passed"
    found = _findings(result)
    assert not {rules.K_EXCEEDS_BOUND, rules.K_ABOVE_INFERRED, rules.TOL_LOOSE} & set(found), list(found)

"""The evaluation pipeline's features on the emulator backend: the phases in-process (the evaluator's
session in the test process, tests.helpers.pipeline, with its real confined children), and what
involves the evaluator's own process or the parent side (result event, git state, store, the
evidence re-check) end to end through start_evaluation and a real worker."""

from __future__ import annotations

import pytest

from nkitui.evaluate.run import start_evaluation
from nkitui.evaluate.run.store import RunStore
from nkitui.task import TaskError

from tests.helpers.evaluation import HEADER, git_init, quick_request, write_task
from tests.helpers.pipeline import evaluate_in_process


def run(task_dir, **overrides):
    handle = start_evaluation(quick_request(task_dir, **overrides))
    handle.wait(timeout=180)
    return handle.result


TRANSPOSE_KERNEL = HEADER + """

@nki.jit
def copy_kernel(a_t, out):
    # receives a in its declared layout (transposed) and writes into a pre-allocated output
    nl.store(out, nl.load(a_t))
"""

TRANSPOSE_MANIFEST = """\
id = "transpose"
title = "layout and output-argument conventions"
[sources]
nki = "add_nki.py"
reference = "reference.py::ref"
[kernel]
entry = "add_nki.py::copy_kernel"
outputs = "arguments"
[[inputs]]
name = "a"
shape = [64, 128]
dtype = "float32"
layout = "transpose"
[[outputs]]
name = "out"
shape = [64, 128]
dtype = "float32"
layout = "transpose"
tolerance = { kind = "exact" }
"""


def test_layouts_and_output_arguments_follow_the_manifest(tmp_path):
    task = write_task(tmp_path / "t", kernel=TRANSPOSE_KERNEL, manifest=TRANSPOSE_MANIFEST,
                      reference="def ref(a):\n    return a.copy()\n")
    run = evaluate_in_process(task, seeds=1)
    result = run.result
    assert run.exit_code == 0 and result.status == "passed", result.error
    assert result.seeds == [0]
    assert result.seed_results[0].outputs[0].shape == (64, 128)


def test_a_run_records_the_commit_hashes_and_is_stored(tmp_path):
    task = write_task(tmp_path / "repo")
    commit = git_init(task)
    store_root = tmp_path / "store"
    result = run(task, store=True, store_root=store_root)
    assert result.task_commit == commit and result.task_dirty is False
    assert set(result.file_hashes) == {"task.toml", "add_nki.py", "reference.py"}
    stored = RunStore(store_root).load(result.run_id)
    assert stored.to_dict() == result.to_dict() | {"notes": stored.notes}
    assert RunStore(store_root).list("add")[0].run_id == result.run_id
    (task / "add_nki.py").write_text((task / "add_nki.py").read_text() + "\n# edited\n")
    assert run(task).task_dirty is True


def test_a_broken_reference_makes_the_task_invalid(tmp_path):
    task = write_task(tmp_path / "t", reference="def add(a, b, **kw):\n    return a[:10] + b[:10]\n")
    result = run(task)
    assert result.status == "invalid" and result.exit_code == 2
    assert result.error.kind == "reference-error"
    assert "shape (10, 64)" in result.error.message and "(128, 64)" in result.error.message


def test_a_reference_that_raises_points_at_its_line(tmp_path):
    task = write_task(tmp_path / "t", reference="def add(a, b, **kw):\n    x = 1\n    return a + b + undefined_name\n")
    result = run(task)
    assert result.status == "invalid"
    assert (result.error.file, result.error.line) == ("reference.py", 3)
    assert "NameError" in result.error.message
    assert result.error.kind == "reference-error"  # the reference's fault, not the kernel's


def test_a_reference_that_fails_to_import_is_a_reference_error(tmp_path):
    task = write_task(tmp_path / "t", reference="import numpy as np\nraise RuntimeError('no data file')\n\n\ndef add(a, b):\n    return a + b\n")
    result = run(task)
    assert result.status == "invalid" and result.error.kind == "reference-error"
    assert (result.error.file, result.error.line) == ("reference.py", 2)


def test_a_kernel_returning_the_wrong_shape_fails_its_output_check(tmp_path):
    kernel = HEADER + """

@nki.jit
def add_kernel(a, b):
    out = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a[:, 0:32]))
    return out
"""
    result = run(write_task(tmp_path / "t", kernel=kernel))
    assert result.status == "failed"
    check = next(c for c in result.checks if c.id == "output:out")
    assert check.passed is False and "shape (128, 32)" in check.detail


def test_a_syntax_error_in_the_kernel_is_located(tmp_path):
    # the port is what is judged: it loads, and the run fails with the error at its file and line
    task = write_task(tmp_path / "t", kernel=HEADER + "\n\n@nki.jit\ndef add_kernel(a, b)\n    return a\n")
    result = run(task)
    assert result.status == "failed" and result.error.file == "add_nki.py"
    assert result.error.line == HEADER.count("\n") + 4 and "expected ':'" in result.error.message


def test_a_task_without_a_manifest_cannot_start(tmp_path):
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "kernel.cu").write_text("__global__ void k() {}\n")
    (folder / "port.py").write_text(HEADER + "\n\n@nki.jit\ndef k(a):\n    return a\n")
    (folder / "ref.py").write_text("def reference(a):\n    return a\n")
    with pytest.raises(TaskError) as info:
        start_evaluation(quick_request(folder))
    assert "nkitui task init" in str(info.value) and "[[inputs]]" in str(info.value)


@pytest.mark.slow
def test_every_optional_phase_on_a_real_kernel(tmp_path):
    task = write_task(tmp_path / "full")
    result = evaluate_in_process(task, static=True, trials=True, precision=True, mutants=True).result
    names = [p.name for p in result.phases]
    assert names == ["load", "static", "reference", "compile", "run", "compare", "trials", "precision", "mutants", "profile"]
    assert result.status == "passed", [c for c in result.checks if not c.passed]
    audit = result.numerics_audit()
    assert audit.trials is not None and audit.trials.adversarial
    assert audit.precision is not None and audit.precision.outputs[0].verdict == "consistent"
    assert audit.mutants is not None
    assert result.advice and result.advice[0].name == "out"
    assert {c.id for c in result.checks} >= {"kernel-runs", "output:out", "trials", "precision", "sandbox"}


def test_trials_do_not_run_the_seeds_again(tmp_path):
    # the kernel prints once per launch: the seeds run once (run phase), and the trials launch nothing more: the
    # seeds' verified instruction log, replayed on the adversarial inputs, answers them (KernelProcess._verified_replay)
    task = write_task(tmp_path / "t", prelude="print('launch', flush=True)")
    run = evaluate_in_process(task, trials=True, seeds=2)
    launches = run.stdout().count("launch")
    result = run.result
    assert result.status == "passed", result.error
    trials = result.numerics_audit().trials
    assert [t.name for t in trials.seeds] == ["seed 0", "seed 1"] and trials.adversarial
    assert launches == len(result.seeds)
    assert run.session.kernel.answered == len(trials.adversarial)
    # the seed trials carry the compare phase's own metrics (advice conventions included)
    first = trials.seeds[0].metrics[0]
    assert first.to_dict() == result.numerics_audit().outputs[0].to_dict()


def test_a_corrupt_goldens_file_is_named_as_the_task_names_it(tmp_path):
    from tests.helpers.evaluation import add_task_manifest

    manifest = add_task_manifest().replace("[evaluation]", '[evaluation]\ngoldens = "goldens.npz"')
    task = write_task(tmp_path / "g", manifest=manifest)
    (task / "goldens.npz").write_bytes(b"PK\x03\x04" + b"garbage" * 10)
    result = evaluate_in_process(task, goldens=True).result
    finding = next(f for f in result.findings if f.rule == "NUM-GOLDEN-INVALID")
    assert "goldens.npz: cannot read the goldens file" in finding.message
    assert "nkitui-run-" not in finding.message  # not the scratch copy, deleted after the run
    phase = next(p for p in result.phases if p.name == "goldens")
    assert phase.detail.startswith("unusable goldens: goldens.npz: ")


def test_a_kernel_returning_another_dtype_than_declared_is_named(tmp_path):
    kernel = HEADER + """

@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out
"""
    narrow = evaluate_in_process(write_task(tmp_path / "bf16", kernel=kernel)).result
    finding = next(f for f in narrow.findings if f.rule == "NUM-OUTPUT-DTYPE")
    assert finding.severity == "high" and finding.file == "add_nki.py"
    assert finding.message.startswith("The kernel returned output `out` as bfloat16; the manifest declares float32.")
    right = evaluate_in_process(write_task(tmp_path / "ok")).result
    assert right.status == "passed" and not [f for f in right.findings if f.rule == "NUM-OUTPUT-DTYPE"]

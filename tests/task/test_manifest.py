from pathlib import Path

import numpy as np
import pytest

from nkitui.evaluate.numerics.inputs import from_kernel_layout, make_inputs, to_kernel_layout
from nkitui.task import TaskError, load_task

from .conftest import MANIFEST, write_task


def problems_of(tmp_path: Path, manifest: str):
    root = write_task(tmp_path / "t", manifest)
    with pytest.raises(TaskError) as info:
        load_task(root)
    return info.value.problems


def test_valid_manifest_loads(task_dir: Path):
    task = load_task(task_dir)
    assert task.id == "add" and task.target == "trn2"
    assert task.kernel.name == "add_kernel" and task.kernel.namespace == "legacy"
    assert task.sources.reference.name == "add"
    assert [i.name for i in task.inputs] == ["a", "b"]
    assert task.outputs[0].tolerance.kind == "allclose"
    assert task.seeds == (0, 1, 2)
    assert task.runnable and not task.discovered
    assert set(task.file_hashes()) == {"task.toml", "add.cu", "add_nki.py", "reference.py"}


def test_loading_the_manifest_file_directly(task_dir: Path):
    assert load_task(task_dir / "task.toml").id == "add"


def test_every_problem_is_reported_at_once(tmp_path: Path):
    bad = (
        MANIFEST.replace('dtype = "bfloat16"', 'dtype = "bfloat61"')
        .replace('target = "trn2"', 'target = "trn9"')
        .replace("shape = [128, 64]\ndtype = \"float32\"\n\n[[inputs]]", "shape = [0, 64]\ndtype = \"float32\"\n\n[[inputs]]")
        .replace('kind = "allclose"', 'kind = "close"')
    )
    problems = problems_of(tmp_path, bad)
    fields = {p.field for p in problems}
    assert {"target", "inputs[1].dtype", "inputs[0].shape", "outputs[0].tolerance.kind"} <= fields
    by_field = {p.field: p for p in problems}
    assert "bfloat16" in by_field["inputs[1].dtype"].fix  # "did you mean"
    assert all(p.file.endswith("task.toml") for p in problems)
    assert all(p.fix for p in problems)


def test_toml_syntax_error_names_the_line(tmp_path: Path):
    problems = problems_of(tmp_path, MANIFEST.replace('title = "vector add"', 'title = "vector add'))
    assert problems[0].line == 3
    assert "TOML syntax error" in problems[0].message


def test_missing_files_and_functions(tmp_path: Path):
    problems = problems_of(
        tmp_path,
        MANIFEST.replace('reference = "reference.py::add"', 'reference = "reference.py::adder"').replace(
            'cuda = "add.cu"', 'cuda = "missing.cu"'
        ),
    )
    messages = {p.field: p.message for p in problems}
    assert "adder" in messages["sources.reference"] and "add" in messages["sources.reference"]
    assert "missing.cu" in messages["sources.cuda"]


def test_path_escaping_the_task_is_refused(tmp_path: Path):
    problems = problems_of(tmp_path, MANIFEST.replace('cuda = "add.cu"', 'cuda = "../../etc/passwd"'))
    assert any("outside the task folder" in p.message for p in problems)


def test_namespace_mismatch(tmp_path: Path):
    problems = problems_of(tmp_path, MANIFEST.replace('entry = "add_nki.py::add_kernel"', 'entry = "add_nki.py::add_kernel"\nnamespace = "new"'))
    assert any(p.field == "kernel.namespace" and "legacy" in p.fix for p in problems)


def test_unknown_keys_are_warnings_with_a_hint(tmp_path: Path):
    root = write_task(tmp_path / "t", MANIFEST.replace('target = "trn2"', 'target = "trn2"\ntitel = "x"'))
    task = load_task(root)
    assert any(w.field == "titel" and "title" in w.fix for w in task.warnings)


def test_tolerance_kinds_and_their_fields(tmp_path: Path):
    problems = problems_of(tmp_path, MANIFEST.replace('{ kind = "allclose", atol = 1e-5, rtol = 1e-5 }', '{ kind = "rel_l2", atol = 1e-5 }'))
    fields = {p.field for p in problems}
    assert "outputs[0].tolerance.atol" in fields and "outputs[0].tolerance.tol" in fields


def test_layout_transpose_and_inputs(tmp_path: Path):
    manifest = MANIFEST.replace('name = "a"\nshape = [128, 64]', 'name = "a"\nshape = [128, 64]\nlayout = "transpose"')
    task = load_task(write_task(tmp_path / "t", manifest))
    a = task.inputs[0]
    assert a.layout == (1, 0) and a.kernel_shape == (64, 128)
    inputs = make_inputs(task, seed=3)
    assert inputs["a"].dtype == np.float32 and inputs["b"].dtype.name == "bfloat16"
    assert np.all(np.abs(inputs["b"].astype(np.float32)) <= 2.0)
    k = to_kernel_layout(a, inputs["a"])
    assert k.shape == (64, 128) and k.flags.c_contiguous
    np.testing.assert_array_equal(from_kernel_layout(a, k), inputs["a"])


def test_inputs_are_reproducible_per_seed_and_name(task_dir: Path):
    task = load_task(task_dir)
    first, again, other = make_inputs(task, 0), make_inputs(task, 0), make_inputs(task, 1)
    np.testing.assert_array_equal(first["a"], again["a"])
    assert not np.array_equal(first["a"], other["a"])
    assert not np.array_equal(first["a"], first["b"].astype(np.float32))


def test_signature_mismatch_is_a_warning(tmp_path: Path):
    manifest = MANIFEST + '\n[[inputs]]\nname = "c"\nshape = [4]\ndtype = "float32"\n'
    # [[inputs]] after [[outputs]] is still valid TOML: arrays of tables may interleave
    task = load_task(write_task(tmp_path / "t", manifest))
    assert any("positional parameter" in w.message for w in task.warnings)


def test_a_port_that_does_not_parse_still_loads_with_its_error_at_line_and_column(tmp_path: Path):
    # The port is what the auditor judges: it opens (source, finding), runs of it fail; exit 2 is for
    # tasks that are themselves invalid.
    root = write_task(tmp_path / "t")
    kernel = root / "add_nki.py"
    lines = kernel.read_text().splitlines()
    lines.insert(2, "x = max(1, 2")
    kernel.write_text("\n".join(lines) + "\n")
    task = load_task(root)
    assert task.kernel is not None and task.kernel.name == "add_kernel"
    assert task.kernel.syntax_error == ("'(' was never closed", 3, 8)
    assert task.kernel.namespace == "legacy"  # read from the import lines, though the file does not parse
    [warning] = [w for w in task.warnings if "does not parse" in w.message]
    assert warning.field == "kernel.entry" and "(line 3, column 8)" in warning.message
    assert "add_nki.py:3" in warning.fix


def test_a_reference_that_does_not_parse_makes_the_task_invalid(tmp_path: Path):
    root = write_task(tmp_path / "t")
    (root / "reference.py").write_text("def add(a, b:\n    return a + b\n")
    with pytest.raises(TaskError) as info:
        load_task(root)
    [problem] = [p for p in info.value.problems if "does not parse" in p.message]
    assert problem.file.endswith("reference.py") and problem.line == 1 and problem.field == "sources.reference"
    assert "task.toml" in problem.fix


def test_a_reduction_length_beyond_the_largest_input_is_a_warning_naming_the_field(tmp_path: Path):
    """No output element can sum more terms than the largest input holds (evaluate/numerics/kbound.py holds
    the evaluation to that bound); `task validate` says so before anything runs."""
    line = next(l for l in MANIFEST.splitlines() if l.startswith("tolerance"))
    root = write_task(tmp_path / "t", MANIFEST.replace(line, line + "\nreduction_length = 100000000"))
    [warning] = [w for w in load_task(root).warnings if "reduction_length" in w.field]
    assert warning.field == "outputs[0].reduction_length" and warning.file.endswith("task.toml")
    assert "100000000" in warning.message and "8192" in warning.message and "remove it" in warning.fix
    within = write_task(tmp_path / "u", MANIFEST.replace(line, line + "\nreduction_length = 64"))
    assert not [w for w in load_task(within).warnings if "reduction_length" in w.field]

"""Every bundled sample task is complete and its manifest validates cleanly."""

from __future__ import annotations

import re

import pytest

from nkitui.task.pysource import inspect_source
from tests.sample_tasks.harness import (
    SAMPLE_ROOT,
    flawed_task_names,
    good_task_names,
    load,
    task_names,
)

REQUIRED_GOOD = {
    "vector_add", "row_softmax", "rmsnorm", "layernorm", "matmul_bf16", "transpose2d", "attention_fwd",
}
REQUIRED_FLAWED = {
    "flawed_transliteration", "flawed_partial_tile", "flawed_loose_tolerance", "flawed_bf16_accum",
}


def test_the_issue_s_task_list_is_present():
    assert REQUIRED_GOOD <= set(good_task_names())
    assert REQUIRED_FLAWED <= set(flawed_task_names())
    assert len(good_task_names()) >= 8
    assert len(flawed_task_names()) >= 4


def test_at_least_two_good_tasks_use_the_new_namespace():
    new = [n for n in good_task_names() if load(n).kernel.namespace == "new"]
    assert len(new) >= 2, new
    assert "matmul_bf16" in new


@pytest.mark.parametrize("name", task_names())
def test_manifest_validates_without_errors_or_warnings(name):
    task = load(name)  # raises TaskError listing every problem
    assert task.id == name, "the folder name is the task id"
    assert not task.discovered
    assert task.warnings == (), [str(w) for w in task.warnings]
    assert task.runnable
    assert task.target == "trn2"
    assert task.op is not None


@pytest.mark.parametrize("name", task_names())
def test_task_folder_has_every_source(name):
    task = load(name)
    assert task.prompt is not None and task.prompt.is_file()
    assert task.sources.cuda is not None and task.sources.cuda.suffix == ".cu" and task.sources.cuda.is_file()
    assert task.sources.nki is not None and task.sources.nki.is_file()
    assert task.sources.reference is not None and task.sources.reference.path.is_file()
    prompt = task.prompt.read_text(encoding="utf-8")
    # The prompt names the files and the kernel the porter must produce.
    assert task.sources.cuda.name in prompt
    assert task.kernel.name in prompt


@pytest.mark.parametrize("name", task_names())
def test_kernel_signature_and_namespace_imports(name):
    task = load(name)
    info = inspect_source(task.kernel.path)
    assert info.syntax_error is None
    assert info.namespace == task.kernel.namespace
    assert task.kernel.name in info.kernels, "the entry is decorated with @nki.jit"
    params = [p for p in info.parameters[task.kernel.name] if p not in task.kernel.kwargs]
    assert len(params) == len(task.inputs)


@pytest.mark.parametrize("name", task_names())
def test_only_flawed_tasks_carry_an_auditor_key(name):
    key = SAMPLE_ROOT / name / "AUDITOR_KEY.md"
    assert key.is_file() == name.startswith("flawed")


LOCATION = re.compile(r"\*\*Location:\*\*(.*?)(?:\n\n|\n- \*\*)", re.S)
FILE_LINE = re.compile(r"`([\w.]+):(\d+)`")

# Text each flawed line must contain, so a key that drifts from its source fails here.
FLAW_MARKERS = {
    "flawed_transliteration": {22: "sequential_range", 25: "nl.ds(row, 1)", 27: "nl.add"},
    "flawed_partial_tile": {27: "last_row = n_rows - 1", 30: "< last_row"},
    "flawed_loose_tolerance": {29: "atol = 1e-2"},
    "flawed_bf16_accum": {33: "nl.bfloat16", 39: "tensor_tensor"},
}


@pytest.mark.parametrize("name", flawed_task_names())
def test_auditor_key_points_at_the_flawed_lines(name):
    text = (SAMPLE_ROOT / name / "AUDITOR_KEY.md").read_text(encoding="utf-8")
    assert "**Flaw:**" in text and "## Expected detection" in text
    location = LOCATION.search(text)
    assert location, "the key has a **Location:** entry"
    cited = FILE_LINE.findall(location.group(1))
    assert cited, "the location cites file:line"
    seen_lines = set()
    for filename, line in cited:
        path = SAMPLE_ROOT / name / filename
        assert path.is_file(), f"{filename} cited in the key does not exist"
        lines = path.read_text(encoding="utf-8").splitlines()
        assert 1 <= int(line) <= len(lines)
        seen_lines.add(int(line))
    markers = FLAW_MARKERS[name]
    assert set(markers) <= seen_lines
    source = (SAMPLE_ROOT / name / cited[0][0]).read_text(encoding="utf-8").splitlines()
    for line, marker in markers.items():
        assert marker in source[line - 1], f"{cited[0][0]}:{line} no longer holds {marker!r}"


def test_readme_lists_every_task_without_giving_flaws_away():
    readme = (SAMPLE_ROOT / "README.md").read_text(encoding="utf-8")
    for name in task_names():
        assert f"`{name}`" in readme
    flawed_section = readme.split("## Deliberately flawed ports", 1)[1]
    for giveaway in ("off-by-one", "bf16 SBUF", "zeros", "transliteration of", "sequential_range"):
        assert giveaway not in flawed_section

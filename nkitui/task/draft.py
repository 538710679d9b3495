"""Draft a task.toml from what discovery found, for the auditor to complete."""

from __future__ import annotations

from nkitui.task.model import Task
from nkitui.task.pysource import inspect_source


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def draft_manifest(task: Task) -> str:
    lines = [
        "# Drafted by `nkitui task init` from the files in this folder. Check every line;",
        "# see docs/task-format.md for the fields.",
        "schema = 1",
        f"id = {_q(task.id)}",
        f"title = {_q(task.id)}",
        f"target = {_q(task.target)}",
        "",
        "[sources]",
    ]
    if task.sources.cuda:
        lines.append(f"cuda = {_q(task.rel(task.sources.cuda) or '')}")
    if task.sources.nki:
        lines.append(f"nki = {_q(task.rel(task.sources.nki) or '')}")
    if task.sources.reference:
        lines.append(f"reference = {_q((task.rel(task.sources.reference.path) or '') + '::' + task.sources.reference.name)}")
    else:
        lines.append('reference = "reference.py::reference"  # no reference function was found: write one')
    lines += ["", "[kernel]"]
    params: list[str] = []
    if task.kernel:
        lines.append(f"entry = {_q((task.rel(task.kernel.path) or '') + '::' + task.kernel.name)}")
        params = inspect_source(task.kernel.path).parameters.get(task.kernel.name, [])
    for name in params or ["x"]:
        lines += ["", "[[inputs]]", f"name = {_q(name)}", "shape = [128, 512]  # the natural shape", 'dtype = "float32"']
    lines += [
        "", "[[outputs]]", 'name = "out"', "shape = [128, 512]", 'dtype = "float32"',
        'tolerance = { kind = "allclose", atol = 1e-5, rtol = 1e-5 }', "",
    ]
    return "\n".join(lines)

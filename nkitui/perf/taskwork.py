"""A task's minimal work and its speed of light, from its manifest alone (op, shapes, dtypes).

The one place that maps a task's `op` to a roofline formula: the cost model (on a run's trace) and
the workstation (before any run) both ask here.

    work = task_work(task)                          # perf.roofline.Work, or None
    sol, why_not = task_speed_of_light(task, "trn2")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nkitui.perf.roofline import SpeedOfLight, Work
    from nkitui.task.model import Task

# task.op -> perf.roofline.minimal_work kind (missing: no speed-of-light formula for it)
_WORK_KINDS = {
    "matmul": "matmul", "attention": "attention", "elementwise": "elementwise", "reduction": "reduction",
    "softmax": "softmax", "transpose": "transpose", "scan": "reduction",
}


def task_work(task: Task) -> Work | None:
    """The task's minimal work (FLOPs, bytes) for the speed of light, or None when unknown."""
    kind = _WORK_KINDS.get(task.op or "")
    if task.op == "norm":
        kind = "rmsnorm" if "rms" in task.id.lower() else "layernorm"
    if kind is None:
        return None
    from nkitui.perf.roofline import minimal_work

    inputs = [(spec.shape, spec.dtype) for spec in task.inputs]
    outputs = [(spec.shape, spec.dtype) for spec in task.outputs]
    try:
        return minimal_work(kind, inputs, outputs)
    except ValueError:
        return None  # shapes that do not fit the formula (e.g. a matmul with one input)


def task_speed_of_light(task: Task, target: str) -> tuple[SpeedOfLight | None, str]:
    """The task's speed of light on `target` before any run: (SpeedOfLight, "") or (None, why there is
    none, saying how to get one)."""
    if not task.op:
        return None, ("task.toml declares no `op`, so there is no speed of light before a run "
                      "(set op = \"matmul\", \"elementwise\", ... to get one)")
    work = task_work(task)
    if work is None:
        return None, f"no speed-of-light formula fits op {task.op!r} with this task's inputs and outputs"
    from nkitui.perf.roofline import speed_of_light_for

    try:
        return speed_of_light_for(work, target), ""
    except ValueError as exc:
        return None, f"no speed of light: {exc}"

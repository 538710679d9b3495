"""The profile phase without hardware: nkitui.perf's cost model on the emulator's instruction trace."""

from __future__ import annotations

from typing import Any

from nkitui.executor.backends.base import ProfileOutcome
from nkitui.perf.taskwork import task_work
from nkitui.task.model import Task


def estimate_from_trace(trace: Any, target: str, task: Task) -> ProfileOutcome:
    if trace is None:
        return ProfileOutcome(skipped="no instruction trace was recorded (the kernel did not run on the emulator)")
    if len(trace) == 0:
        return ProfileOutcome(skipped="the instruction trace is empty: the kernel issued no NKI instructions")
    from nkitui.perf.estimate import estimate

    record = estimate(trace, target, work=task_work(task))
    total_us = record.total_time * 1e6
    timing = {
        "kind": "estimated",
        "source": record.tool or "nkitui cost model",
        "median_us": total_us,
        "unit": "us",
        "note": "cost-model estimate from the emulator's instruction trace; no hardware was timed",
    }
    return ProfileOutcome(timing=timing, utilisation=record.to_json(),
                          notes=[f"estimated {total_us:.2f} µs on {target} from {len(trace)} instructions"])

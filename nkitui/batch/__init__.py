"""Batch evaluation: the same evaluation as `nkitui check` on every task under a folder, on a local
pool of worker processes or on a Ray cluster, with a typed event stream, cancel and resume.

    from nkitui.batch import BatchOptions, LocalExecutor, start_batch
    handle = start_batch(Path("tasks"), options=BatchOptions(seeds=1), executor=LocalExecutor(2))
    for event in handle.events(): ...
    summary = handle.wait()

`nkitui.batch.ray_executor.RayExecutor` runs the same jobs on Ray (the optional `ray` extra);
`nkitui.batch.aggregate` joins verdicts, findings, latency and review scores into one table.
"""

from nkitui.batch.events import BatchEvent, BatchFinished, BatchStarted, BatchSummary, TaskFinished, TaskPhase, TaskStarted
from nkitui.batch.local import LocalExecutor
from nkitui.batch.options import BatchOptions
from nkitui.batch.record import TaskRecord
from nkitui.batch.runner import BatchHandle, start_batch
from nkitui.batch.tasks import BatchTask, find_task_dirs, find_tasks

__all__ = [
    "BatchEvent", "BatchFinished", "BatchHandle", "BatchOptions", "BatchStarted", "BatchSummary", "BatchTask",
    "LocalExecutor", "TaskFinished", "TaskPhase", "TaskRecord", "TaskStarted", "find_task_dirs", "find_tasks",
    "start_batch",
]

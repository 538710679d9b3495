"""The local executor: a pool of evaluation worker processes on this machine.

Each evaluation is what `nkitui check` runs, through the same entry
(nkitui.evaluate.run.start_evaluation): its kernel in its own confined child process with the
task's limits. The pool keeps at most `workers` of those children alive at once, fed by one
dispatcher thread per slot. The evaluation itself already happens in a child process, so a second
layer of processes (a multiprocessing pool around it) would only add start-up cost and make a
cancel slower and leakier; the threads here only wait on their child's event pipe.
"""

from __future__ import annotations

import queue
import threading
import traceback
from typing import Any

from nkitui.batch.executor import JobOutcome, Reporter, this_node
from nkitui.batch.options import BatchOptions
from nkitui.batch.sizing import PoolSize, pool_size
from nkitui.batch.tasks import BatchTask


class LocalExecutor:
    name = "local"

    def __init__(self, workers: int | None = None, *, size: PoolSize | None = None) -> None:
        self.size = size or pool_size(workers)
        self._lock = threading.Lock()
        self._handles: set[Any] = set()
        self.running_pids: dict[str, int] = {}  # task key -> pid of its evaluation worker
        self._cancelled = threading.Event()
        self._node = this_node()

    @property
    def workers(self) -> int:
        return self.size.workers

    @property
    def workers_reason(self) -> str:
        return self.size.reason

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            handles = list(self._handles)
        for handle in handles:
            handle.cancel()

    def run(self, jobs: list[BatchTask], options: BatchOptions, reporter: Reporter) -> None:
        pending: queue.SimpleQueue[BatchTask] = queue.SimpleQueue()
        for job in jobs:
            pending.put(job)
        slots = [threading.Thread(target=self._slot, args=(pending, options, reporter), name=f"nkitui-batch-slot-{i}",
                                  daemon=True) for i in range(min(self.workers, len(jobs)))]
        for t in slots:
            t.start()
        for t in slots:
            t.join()

    def _slot(self, pending: "queue.SimpleQueue[BatchTask]", options: BatchOptions, reporter: Reporter) -> None:
        while not self._cancelled.is_set():
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            try:
                outcome = self._run_one(job, options, reporter)
            except Exception as exc:  # noqa: BLE001 - one task's internal error must not stop the batch
                outcome = JobOutcome(status="internal-error", node=self._node,
                                     error={"kind": "internal", "message": f"{type(exc).__name__}: {exc}"},
                                     notes=[traceback.format_exc(limit=8)])
            reporter.finished(job.key, outcome)

    def _run_one(self, job: BatchTask, options: BatchOptions, reporter: Reporter) -> JobOutcome:
        from nkitui.evaluate.run import start_evaluation
        from nkitui.executor.events import PhaseEvent
        from nkitui.task import TaskError

        reporter.started(job.key, 1, self._node)
        try:
            handle = start_evaluation(options.request(job.root), task=job.task)
        except TaskError as exc:
            return JobOutcome(status="invalid", problems=[str(p) for p in exc.problems], node=self._node,
                              error={"kind": "invalid-task", "message": str(exc.problems[0]) if exc.problems else "invalid"})
        with self._lock:
            self._handles.add(handle)
            if handle.pid is not None:
                self.running_pids[job.key] = handle.pid
        if self._cancelled.is_set():
            handle.cancel()
        try:
            for event in handle.events():
                if isinstance(event, PhaseEvent) and event.state == "start":
                    reporter.phase(job.key, event.name)
        except BaseException:
            handle.close()  # the worker must not outlive a consumer that failed
            raise
        finally:
            with self._lock:
                self._handles.discard(handle)
                self.running_pids.pop(job.key, None)
        return JobOutcome(result=handle.result, node=self._node)

"""The headless evaluation behind `nkitui check`: the same code path as the UI (start_evaluation),
waiting for the end and turning the result into the CONTRACT's exit code.

    outcome = run_check(EvaluationRequest(Path("rmsnorm")), on_event=print)
    outcome.exit_code     # 0 all checks pass, 1 a check failed, 2 task or command invalid
    outcome.result        # RunResult (None when the task could not even be loaded)
    outcome.problems      # what is invalid and where (compiler style: "file:line [field]: error: ..."),
                          # when exit_code == 2
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nkitui.evaluate.run.result import RunResult
from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run.start import check_runnable, start_evaluation
from nkitui.executor.events import Event

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130


@dataclass
class CheckOutcome:
    exit_code: int
    result: RunResult | None = None
    problems: list[str] = field(default_factory=list)


def run_check(request: EvaluationRequest, on_event: Callable[[Event], None] | None = None) -> CheckOutcome:
    from nkitui.task import TaskError, load_task

    try:
        task = load_task(request.task_dir)
        check_runnable(task)
    except TaskError as exc:
        return CheckOutcome(EXIT_INVALID, problems=[str(p) for p in exc.problems])
    handle = start_evaluation(request, task=task)
    try:
        for event in handle.events():
            if on_event is not None:
                on_event(event)
    except KeyboardInterrupt:
        handle.cancel()
        handle.wait()
        return CheckOutcome(EXIT_INTERRUPTED, handle.result)
    result = handle.result
    if not isinstance(result, RunResult):  # the finalizer always builds one; keep the contract anyway
        return CheckOutcome(EXIT_FAILED, None, ["the run ended without a result"])
    problems = []
    if result.status == "invalid" and result.error:
        e = result.error
        where = f"{e.location}: " if e.location else ""
        problems.append(f"{where}error: {e.message}")
    return CheckOutcome(result.exit_code, result, problems)

"""A run as its starter (the app, `nkitui check`) sees it.

  start     EvaluationRequest, start_evaluation: spawn the evaluator, stream its events, finish the result
  result    RunResult, the versioned record of one run
  store     RunStore: results on disk, A/B comparison
  headless  run_check: wait for the end and give the CONTRACT's exit code

`from nkitui.evaluate.run import start_evaluation, EvaluationRequest` works (loaded on first use, so
importing `nkitui.evaluate.run.result` in the worker stays cheap).
"""

from __future__ import annotations

from typing import Any

_FROM_START = ("EvaluationRequest", "start_evaluation", "check_runnable", "build_result", "read_git_state", "ENTRY")


def __getattr__(name: str) -> Any:
    if name in _FROM_START:
        from nkitui.evaluate.run import start

        return getattr(start, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Start an evaluation of a task in a background worker (the UI and `nkitui check` both use this).

    handle = start_evaluation(EvaluationRequest.of(Path("rmsnorm"), backend="auto"))
    for event in handle.events():      # from a thread: LogEvent, PhaseEvent, ProgressEvent, ErrorEvent, ResultEvent
        ...
    result: RunResult = handle.result  # always set once events() has ended (also after a crash/timeout/cancel)
    handle.cancel()                    # any thread

The worker is the trusted evaluator (nkitui.evaluate.pipeline): it never imports task code, and
starts the untrusted kernel and reference processes itself. The last event is always one
ResultEvent carrying the final RunResult: the evaluator's, with its status settled again here from
its checks and evidence (nkitui.evaluate.run.evidence: a pass without every piece of evidence is an
internal error), completed with what only the parent knows (the task's git commit, file hashes,
limits and the log's end); or, when the evaluator died without a result, one built from what the
parent saw. With `store=True` the result is saved in the run store before that event is delivered.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from nkitui.common import gitsafe
from nkitui.common.codec import encode
from nkitui.evaluate.options import EvaluationOptions, EvaluationRequest, resolve_seeds
from nkitui.evaluate.run.evidence import settle_status
from nkitui.evaluate.run.result import PhaseRecord, ResultVersionError, RunError, RunResult
from nkitui.executor.events import ErrorEvent, Event, ResultEvent
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import DEFAULT_TIMEOUT_S, Limits
from nkitui.executor.runner import RunHandle, WorkerOutcome, start_worker
from nkitui.task import Problem, Task, TaskError, load_task

ENTRY = "nkitui.evaluate.pipeline.session:run_job"
LOG_EXCERPT_LINES = 80

# exit kind (nkitui.executor.exitstatus) -> run status, for runs that ended without a result
_STATUS_FOR_EXIT = {
    "timeout": "timeout", "cancelled": "cancelled", "crash": "crashed", "memory-limit": "memory-limit",
    "cpu-limit": "cpu-limit", "killed": "killed", "internal": "internal-error", "start-failed": "internal-error",
    "disk-limit": "crashed",
}


def check_runnable(task: Task) -> None:
    """TaskError when a task (e.g. discovered without task.toml) lacks what a run needs."""
    if task.runnable:
        return
    missing = [what for what, ok in (("kernel.entry", task.kernel), ("sources.reference", task.sources.reference),
                                     ("[[inputs]]", task.inputs), ("[[outputs]]", task.outputs)) if not ok]
    where = str(task.manifest or (task.root / "task.toml"))
    raise TaskError([Problem(where, ", ".join(missing), f"the task cannot run: it declares no {', '.join(missing)}",
                             f"run `nkitui task init {task.root}` to draft a task.toml, then fill in the tensors")])


@dataclass
class _GitState:
    commit: str | None = None
    dirty: bool | None = None
    note: str = ""


def read_git_state(root: Path) -> _GitState:
    """HEAD of the repository holding the task, and whether the task folder has uncommitted changes."""
    try:
        import git
    except ImportError:
        return _GitState(note="GitPython is not installed")
    try:
        repo = gitsafe.open_repo(root, search_parent_directories=True)  # no hooks, no fsmonitor
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return _GitState(note="the task folder is not in a git repository")
    try:
        commit = repo.head.commit.hexsha
    except ValueError:
        return _GitState(note="the task's git repository has no commit yet")
    try:
        tree = repo.working_tree_dir
        if tree is None:
            raise ValueError("a bare repository has no working tree")
        rel = os.path.relpath(root.resolve(), Path(tree).resolve())
        dirty = repo.is_dirty(untracked_files=True, path=None if rel == "." else rel)
    except Exception:  # noqa: BLE001 - dirtiness is informational
        dirty = None
    finally:
        repo.close()
    return _GitState(commit=commit, dirty=dirty)


def start_evaluation(
    request: EvaluationRequest,
    *,
    on_event: Callable[[Event], None] | None = None,
    task: Task | None = None,
) -> RunHandle:
    """Start a run and return its handle at once. Raises TaskError (with every problem) when the
    task cannot be loaded or cannot run; everything after that is reported through events."""
    task = task or load_task(request.task_dir)
    check_runnable(task)
    root = task.root.resolve()
    timeout = request.timeout_s or task.timeout_s or DEFAULT_TIMEOUT_S
    limits = Limits(timeout_s=float(timeout), memory_mb=request.memory_mb, cpu_s=request.cpu_s)
    payload = {"options": encode(request.options), "python_path": list(request.python_path)}
    # the evaluator is nkitui's own code: it is not confined (it starts the confined children itself)
    job = WorkerJob(entry=ENTRY, payload=payload, limits=limits, workspace=root, extra_env=request.env,
                    python_path=list(request.python_path), role="evaluator")
    git_state: dict[str, _GitState] = {}
    git_thread = threading.Thread(target=lambda: git_state.setdefault("s", read_git_state(root)),
                                  name=f"nkitui-git-{job.run_id}", daemon=True)
    git_thread.start()
    try:
        hashes = task.file_hashes()
    except OSError:
        hashes = {}

    def finalize(outcome: WorkerOutcome) -> tuple[RunResult, list[Event]]:
        git_thread.join(timeout=10)
        result, extra = build_result(outcome, task, request)
        state = git_state.get("s", _GitState(note="git state not read in time"))
        result.task_commit, result.task_dirty = state.commit, state.dirty
        if state.note:
            result.notes.append(state.note)
        result.task_path = str(root)
        result.file_hashes = hashes
        if request.store:
            from nkitui.evaluate.run.store import RunStore

            try:
                path = RunStore(request.store_root).save(result)
                result.notes.append(f"saved as {path}")
            except OSError as exc:
                extra.append(ErrorEvent(kind="store-failed", message=f"the run result could not be saved: {exc}"))
        return result, [*extra, ResultEvent(result.to_dict())]

    handle = start_worker(job, finalizer=finalize, on_event=on_event)
    # the result's nested record types (numerics, perf: numpy and the numerics modules, ~0.3-0.5 s
    # of CPU) are imported while the worker runs, not after it ends, where they delayed every result
    threading.Thread(target=warm_result_types, name=f"nkitui-result-types-{job.run_id}", daemon=True).start()
    return handle


def warm_result_types() -> None:
    """Import what decoding the worker's result needs (RunResult's nested types). A failure is left
    to the decode, which imports them again and reports."""
    from nkitui.evaluate.run import result as result_module

    try:
        result_module.bind_types()
    except Exception:  # noqa: BLE001 - the decode in finalize imports again and reports
        pass


def _silent_exit_error(outcome: WorkerOutcome) -> ErrorEvent:
    """In words: the worker exited with a normal status but without its result or an error event."""
    message = f"the worker exited with status {outcome.exit.returncode} before sending its result"
    stderr = [e.text.strip() for e in outcome.log.entries() if e.stream == "stderr" and e.text.strip()]
    if stderr:
        message += f"; the last line it wrote on stderr: {stderr[-1].rstrip('.')}"
    memory_mb = outcome.limits.memory_mb
    if memory_mb and any("memory" in line.lower() or "alloc" in line.lower() for line in stderr[-5:]):
        message += (f". The memory limit ({memory_mb} MB of address space) is likely too low for the libraries the "
                    "worker loads; raise it (--memory-mb)")
    return ErrorEvent(kind="crash", message=message)


def build_result(outcome: WorkerOutcome, task: Task, request: EvaluationRequest) -> tuple[RunResult, list[Event]]:
    """The final RunResult from the worker's result (or from what the parent saw when there is none)."""
    extra: list[Event] = []
    result: RunResult | None = None
    options = request.options
    if outcome.result is not None:
        try:
            result = RunResult.from_dict(outcome.result)
        except ResultVersionError as exc:
            extra.append(ErrorEvent(kind="internal", message=f"the worker's result could not be read: {exc}"))
        else:
            settle_status(result, task, options)
    exit_kind = outcome.exit.kind
    if result is None:
        status = _STATUS_FOR_EXIT.get(exit_kind, "internal-error")
        errors = outcome.errors
        chosen = next((e for e in reversed(errors) if e.kind == exit_kind), errors[-1] if errors else None)
        if exit_kind in ("ok", "failed", "invalid") and chosen is None:
            # the pipeline always sends a result before a normal exit: something else ended the process
            # (a native library calling exit(), e.g. OpenBLAS failing to allocate under the memory limit)
            status, chosen = "crashed", _silent_exit_error(outcome)
        if chosen is None:
            chosen = ErrorEvent(kind=exit_kind, message=f"the worker ended without a result: {outcome.exit.message}")
        error = RunError(chosen.kind, chosen.message, chosen.file, chosen.line, chosen.traceback)
        if any(e.kind == "memory-limit" for e in errors):
            status = "memory-limit"
        result = RunResult(
            run_id=outcome.run_id, task_id=task.id, task_title=task.title, status=status,
            backend_requested=options.backend, target=options.target or task.target, error=error,
            precise=options.precise, tolerances={o.name: o.tolerance for o in task.outputs if o.tolerance},
        )
        result.phases = [PhaseRecord(p.name, p.status, p.duration_s, p.detail) for p in outcome.phases]
        if outcome.backend is not None:  # the evaluator said which backend it chose before it died
            result.backend, result.backend_reason = outcome.backend.name, outcome.backend.reason
        result.seeds = resolve_seeds(options.seeds, task.seeds)  # as the evaluator's load phase does
        result.notes.append(f"the worker {outcome.exit.message}; this result was built by the parent from the events it received")
        from datetime import datetime, timezone

        result.created_at = datetime.fromtimestamp(outcome.started_at, timezone.utc).isoformat(timespec="seconds")
        result.finished_at = datetime.fromtimestamp(outcome.ended_at, timezone.utc).isoformat(timespec="seconds")
        result.duration_s = round(outcome.elapsed_s, 6)
    elif exit_kind not in ("ok", "failed", "invalid"):
        result.notes.append(f"after sending its result the worker {outcome.exit.message}")
    result.limits = replace(outcome.limits, cpu_s=outcome.limits.effective_cpu_s)
    # the log excerpt holds only the last lines: say in the result itself when output was cut
    for entry in outcome.log.entries():
        if entry.stream == "executor" and entry.text.startswith("[nkitui] … ") and entry.text.endswith(" elided …"):
            result.notes.append(f"the log is cut: {entry.text.removeprefix('[nkitui] … ').removesuffix(' …')} "
                                "(the first lines and the last 200 of that stream are kept)")
    # "[stream] text", or "[stream:level] text" for levels other than info, so a reopened log filters alike
    result.log_excerpt = [f"[{e.stream}{'' if e.level == 'info' else ':' + e.level}] {e.text}"
                          for e in outcome.log.entries()[-LOG_EXCERPT_LINES:]]
    if outcome.startup_s is not None:
        result.versions.setdefault("worker_startup_s", round(outcome.startup_s, 4))
    return result, extra


__all__ = ["ENTRY", "EvaluationOptions", "EvaluationRequest", "build_result", "check_runnable", "read_git_state",
           "start_evaluation"]

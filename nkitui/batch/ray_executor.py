"""The Ray executor: one Ray task per nkitui task, on a local Ray runtime or an existing cluster.

    RayExecutor()                     start a local Ray runtime for this batch (stopped at close())
    RayExecutor("auto")               join the cluster this machine belongs to (`ray start` ran here)
    RayExecutor("10.0.0.5:6379")      join a cluster by its head's address (or "ray://head:10001")

Each Ray task asks for `num_cpus` (1; more for neuronx-cc's compile on hardware) and, where the
cluster has NeuronCores and the backend can use them (neuron, or auto), `neuron_cores` (1 per
kernel), so a Trn host never runs more kernels at once than it has cores; Ray sets
NEURON_RT_VISIBLE_CORES for the task, which the evaluation worker inherits. On the node the task
unpacks its shipment (nkitui.batch.ship: a git bundle, or a snapshot for a task outside git or
with uncommitted changes) and runs `start_evaluation` exactly as the local pool does; the
RunResult comes back as data and the driver stores it, so results land in the same run store,
ledger and JSONL. Results stream back as they finish (ray.wait).

A node or worker that dies mid-task: Ray runs the task once more (max_retries=1); when the retry
dies too, the task is reported `crashed` with Ray's reason and `attempts: 2`. A small actor (the
progress board, no CPU) carries "started" and "phase" notes from the tasks to the driver.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from nkitui import __version__
from nkitui.batch.executor import JobOutcome, Reporter
from nkitui.batch.options import BatchOptions
from nkitui.batch.tasks import BatchTask

TASK_MAX_RETRIES = 1  # a node that dies mid-task: run it once more, then report it
POLL_S = 0.25
CANCEL_GRACE_S = 5.0
LOCAL_OBJECT_STORE_MB = 256  # a local runtime's shared memory: bundles are small, results come back as data
# Not used: Ray's raylet-subreaper cleanup (RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper)
# sets SIGCHLD to SIG_IGN in the driver and every worker, so waitpid() fails and every child's exit
# status reads 0: git bundles come out empty and an evaluation worker's exit code is lost.


class RayUnavailable(RuntimeError):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("Ray is not installed", "pip install 'nkitui[ray]' (on every node of the cluster)") from None
    return ray


def _use_token_auth_if_available() -> None:
    """Joining a cluster by address: Ray looks for its authentication token only when RAY_AUTH_MODE says
    so. With a token at hand (RAY_AUTH_TOKEN, or ~/.ray/auth_token as `ray start --head` writes it),
    ask for token mode; an explicit RAY_AUTH_MODE is left as the user set it. Never turns auth off."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    from pathlib import Path

    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or (Path.home() / ".ray" / "auth_token").is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


# -- what runs on the nodes ----------------------------------------------------------------------

class ProgressBoard:
    """Notes from running tasks, drained by the driver: ("started", key, node, pid) and ("phase", key, name)."""

    def __init__(self) -> None:
        self.notes: list[tuple[Any, ...]] = []

    def started(self, key: str, node: str, pid: int) -> None:
        self.notes.append(("started", key, node, pid))

    def phase(self, key: str, name: str) -> None:
        self.notes.append(("phase", key, name))

    def drain(self) -> list[tuple[Any, ...]]:
        notes, self.notes = self.notes, []
        return notes


def evaluate_shipped(shipment: Any, payload: Any, options: BatchOptions, key: str, board: Any) -> dict[str, Any]:
    """The body of one Ray task: unpack the task, evaluate it like `nkitui check`, return the result as data."""
    import socket

    from nkitui.batch.ship import ShipError, unpack
    from nkitui.evaluate.run import start_evaluation
    from nkitui.executor.events import PhaseEvent
    from nkitui.task import TaskError

    node = socket.gethostname()
    board.started.remote(key, node, os.getpid())
    data = bytes(payload)
    try:
        task_dir = unpack(shipment, data)
    except ShipError as exc:
        return {"node": node, "version": __version__, "status": "internal-error",
                "error": {"kind": "ship-failed", "message": str(exc)}}
    # ray.cancel raises KeyboardInterrupt in this thread at any bytecode. Inside start_evaluation, after
    # the spawn, it lost the handle: the evaluation worker ran on to its own timeout (minutes) after the
    # batch had reported the task cancelled. So the start runs on a thread of its own, and a cancel
    # that comes meanwhile still finds the handle once the start has ended.
    started: dict[str, Any] = {}

    def start() -> None:
        try:
            started["handle"] = start_evaluation(options.request(task_dir))
        except BaseException as exc:  # noqa: BLE001 - handed to the task's thread
            started["error"] = exc

    starter = threading.Thread(target=start, name=f"nkitui-ray-start-{key}"[:60], daemon=True)
    handle = None
    try:
        starter.start()
        starter.join()
        error = started.get("error")
        if isinstance(error, TaskError):
            return {"node": node, "version": __version__, "status": "invalid", "problems": [str(p) for p in error.problems],
                    "error": {"kind": "invalid-task", "message": str(error.problems[0]) if error.problems else "invalid"}}
        if error is not None:
            raise error
        handle = started["handle"]
        for event in handle.events():
            if isinstance(event, PhaseEvent) and event.state == "start":
                board.phase.remote(key, event.name)
    except BaseException:  # a cancel (KeyboardInterrupt from ray.cancel) or a failure: the worker goes too
        _stop_evaluation(starter, started)
        raise
    return {"node": node, "version": __version__, "task_dir": str(task_dir), "result": handle.result.to_dict()}


def _stop_evaluation(starter: threading.Thread, started: dict[str, Any], timeout: float = 30.0) -> None:
    """End the evaluation a cancelled task started (or is starting), and wait until its worker has
    exited, so that a task reported cancelled has left nothing running (`timeout` bounds each wait)."""
    starter.join(timeout)
    handle = started.get("handle")
    if handle is None:
        return
    handle.close()  # SIGTERM to its process group, SIGKILL after the grace period
    deadline = time.monotonic() + timeout
    while handle.running and time.monotonic() < deadline:
        time.sleep(0.02)


# -- the driver ----------------------------------------------------------------------------------

@dataclass
class _Flight:
    task: BatchTask
    commit: str | None
    dirty: bool | None
    shipment_kind: str
    starts: int = 0
    node: str = ""
    pid: int | None = None
    submitted_at: float = field(default_factory=time.monotonic)


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, *, workers: int | None = None, num_cpus: float = 1.0,
                 neuron_cores: int = 1, local_cpus: int | None = None) -> None:
        if address is not None and "ray" not in sys.modules:
            _use_token_auth_if_available()  # Ray reads its auth mode when it is imported
        self.ray = _import_ray()
        self.address = address
        self.num_cpus = num_cpus
        self.neuron_cores_per_task = max(1, int(neuron_cores))
        self._owns_runtime = False
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[Any, _Flight] = {}
        self.running_pids: dict[str, int] = {}  # task key -> pid of the Ray worker running it (tests kill it)
        self._connect(address, local_cpus or workers)
        resources = self.ray.cluster_resources()
        self.cluster_cpus = int(resources.get("CPU", 1))
        self.neuron_cores = int(resources.get("neuron_cores", 0))
        by_cpu = max(1, int(self.cluster_cpus // max(num_cpus, 1e-9)))
        self._workers = min(workers, by_cpu) if workers else by_cpu
        where = "local Ray runtime" if self._owns_runtime else f"Ray cluster {address}"
        cores = f", {self.neuron_cores} NeuronCores" if self.neuron_cores else ""
        self._reason = f"{where}: {self.cluster_cpus} CPUs{cores}" + (" (--workers)" if workers else "")

    def _connect(self, address: str | None, cpus: int | None) -> None:
        ray = self.ray
        if ray.is_initialized():
            return  # the caller (a test session, a notebook) already holds a runtime: use it, leave it running
        common = dict(include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level="error")
        try:
            if address is None:
                from nkitui.batch.sizing import usable_cpus

                # a runtime for this batch alone (never an existing `ray start` cluster: that is --ray auto), listening on the loopback interface, not the network
                ray.init(address="local", num_cpus=cpus or usable_cpus(), object_store_memory=LOCAL_OBJECT_STORE_MB << 20,
                         _node_ip_address="127.0.0.1", **common)
                self._owns_runtime = True
            else:
                ray.init(address=address, **common)
        except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; all mean "no cluster here"
            where = "a local Ray runtime could not start" if address is None else f"could not join the Ray cluster at {address}"
            fix = ("check `ray status` and free memory in /dev/shm" if address is None else
                   "start it with `ray start --head` on the head node, check the address, that this machine runs the "
                   "same Ray and Python versions, and for a cluster with token authentication (Ray's default) that "
                   "RAY_AUTH_TOKEN or ~/.ray/auth_token holds the head's token")
            raise RayUnavailable(f"{where}: {type(exc).__name__}: {exc}", fix) from None

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def workers_reason(self) -> str:
        return self._reason

    def close(self) -> None:
        if self._owns_runtime and self.ray.is_initialized():
            self.ray.shutdown()
            self._owns_runtime = False

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            refs = list(self._pending)
        for ref in refs:
            try:
                self.ray.cancel(ref)  # KeyboardInterrupt in the task: it stops its evaluation worker
            except Exception:  # noqa: BLE001 - already finished
                pass

    # -- running ---------------------------------------------------------------------------------
    def _resources(self, task: BatchTask, options: BatchOptions) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.num_cpus, "max_retries": TASK_MAX_RETRIES, "retry_exceptions": False}
        if self.neuron_cores and options.backend in ("neuron", "auto"):
            # NeuronCores as the Neuron runtime counts them (logical cores: at trn2's default LNC=2 one
            # logical core is the two physical cores an lnc=2 kernel spans), so one per kernel
            opts["resources"] = {"neuron_cores": self.neuron_cores_per_task}
        return opts

    def run(self, jobs: list[BatchTask], options: BatchOptions, reporter: Reporter) -> None:
        from nkitui.batch.ship import ShipError, pack

        ray = self.ray
        board = ray.remote(num_cpus=0)(ProgressBoard).remote()
        remote = ray.remote(evaluate_shipped)
        payloads: dict[tuple[str, str], tuple[Any, Any]] = {}  # (repo, commit) -> (shipment, ObjectRef)
        queue = list(jobs)
        window = self._workers * 2  # enough queued on Ray to keep every slot busy; the rest wait here
        by_key: dict[str, _Flight] = {}
        try:
            while (queue or self._pending) and not (self._cancelled.is_set() and not self._pending):
                while queue and len(self._pending) < window and not self._cancelled.is_set():
                    job = queue.pop(0)
                    try:
                        shipment, ref, state = self._ship(job, payloads, pack)
                    except (ShipError, OSError) as exc:
                        reporter.finished(job.key, JobOutcome(status="internal-error", attempts=0, error={
                            "kind": "ship-failed", "message": str(exc)}))
                        continue
                    flight = _Flight(job, state.commit, state.dirty, shipment.kind)
                    ref_out = remote.options(**self._resources(job, options)).remote(shipment, ref, options, job.key, board)
                    with self._lock:
                        self._pending[ref_out] = flight
                    by_key[job.key] = flight
                if self._cancelled.is_set() and not self._pending:
                    break
                ready = self._ready(POLL_S)
                self._drain(board, by_key, reporter)  # "started" notes before the results they precede
                for ref in ready:
                    self._finish(ref, reporter)
                if self._cancelled.is_set() and self._pending:
                    self._wait_cancelled(board, by_key, reporter)
        finally:
            try:
                ray.kill(board)
            except Exception:  # noqa: BLE001
                pass

    def _finish(self, ref: Any, reporter: Reporter) -> None:
        with self._lock:
            flight = self._pending.pop(ref)
        outcome = self._outcome(ref, flight)
        if outcome.status == "cancelled" and flight.starts == 0:
            return  # still queued in Ray when cancelled: it never started, so it is "not run" (resume runs it)
        reporter.finished(flight.task.key, outcome)

    def _ready(self, timeout: float) -> list[Any]:
        """Every result that is ready now, waiting up to `timeout` for the first one."""
        refs = list(self._pending)
        if not refs:
            return []
        first, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if not first:
            return []
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        return list(ready or first)

    def _wait_cancelled(self, board: Any, by_key: dict[str, _Flight], reporter: Reporter) -> None:
        """After a cancel: collect what the cancelled tasks return; force the stragglers after a grace."""
        deadline = time.monotonic() + CANCEL_GRACE_S
        forced = False
        while self._pending:
            ready = self._ready(POLL_S)
            self._drain(board, by_key, reporter)
            for ref in ready:
                self._finish(ref, reporter)
            if self._pending and not forced and time.monotonic() > deadline:
                forced = True
                for ref in list(self._pending):
                    try:
                        self.ray.cancel(ref, force=True)
                    except Exception:  # noqa: BLE001
                        pass

    def _ship(self, job: BatchTask, payloads: dict[tuple[str, str], tuple[Any, Any]], pack: Any) -> tuple[Any, Any, Any]:
        from nkitui.batch.gitstate import read_git_state

        state = read_git_state(job.root)
        if state.commit is not None and state.dirty is False and state.repo_root is not None:
            cache_key = (str(state.repo_root), state.commit)
            if cache_key in payloads:
                base, ref = payloads[cache_key]
                from dataclasses import replace

                return replace(base, rel_path=state.rel_path), ref, state
            shipment, data, _ = pack(job.root, state)
            ref = self.ray.put(data)
            payloads[cache_key] = (shipment, ref)
            return shipment, ref, state
        shipment, data, _ = pack(job.root, state)
        return shipment, self.ray.put(data), state

    def _drain(self, board: Any, by_key: dict[str, _Flight], reporter: Reporter) -> None:
        try:
            notes = self.ray.get(board.drain.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - progress notes are a nicety; results still arrive
            return
        for note in notes:
            flight = by_key.get(note[1])
            if flight is None:
                continue
            if note[0] == "started":
                flight.starts += 1
                flight.node, flight.pid = note[2], note[3]
                self.running_pids[note[1]] = note[3]
                reporter.started(note[1], flight.starts, note[2])
            elif note[0] == "phase":
                reporter.phase(note[1], note[2])

    def _outcome(self, ref: Any, flight: _Flight) -> JobOutcome:
        from nkitui.evaluate.run.result import RunResult

        ray = self.ray
        self.running_pids.pop(flight.task.key, None)
        attempts = max(1, flight.starts)
        try:
            reply = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return JobOutcome(status="cancelled", attempts=attempts, node=flight.node,
                              error={"kind": "cancelled", "message": "the batch was cancelled while this task ran"})
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if isinstance(cause, KeyboardInterrupt) or self._cancelled.is_set():
                return JobOutcome(status="cancelled", attempts=attempts, node=flight.node,
                                  error={"kind": "cancelled", "message": "the batch was cancelled while this task ran"})
            return JobOutcome(status="internal-error", attempts=attempts, node=flight.node,
                              error={"kind": "internal", "message": f"the Ray task failed: {type(cause).__name__}: {cause}"})
        except Exception as exc:  # noqa: BLE001 - worker or node death after the retry, object lost, OOM kill
            if self._cancelled.is_set():
                return JobOutcome(status="cancelled", attempts=attempts, node=flight.node,
                                  error={"kind": "cancelled", "message": "the batch was cancelled while this task ran"})
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return JobOutcome(status="crashed", attempts=max(attempts, 1 + TASK_MAX_RETRIES), node=flight.node,
                              error={"kind": "node-died", "message": (
                                  f"the Ray worker running this task died on every attempt ({1 + TASK_MAX_RETRIES}); "
                                  f"{type(exc).__name__}: {first}")})
        notes: list[str] = []
        if reply.get("version") != __version__:
            notes.append(f"node {reply.get('node')} runs nkitui {reply.get('version')}, the driver {__version__}: "
                         "install the same version on every node")
        if "result" not in reply:
            return JobOutcome(status=reply.get("status", "internal-error"), error=reply.get("error"),
                              problems=list(reply.get("problems", [])), attempts=attempts, node=reply.get("node", ""),
                              notes=notes)
        result = RunResult.from_dict(reply["result"])
        notes.append(f"ran on Ray node {reply.get('node')} from a {flight.shipment_kind} in {reply.get('task_dir')}")
        if flight.shipment_kind == "snapshot" and flight.commit is not None:
            result.task_commit, result.task_dirty = flight.commit, True  # the driver's commit, with its changes
        return JobOutcome(result=result, attempts=attempts, node=str(reply.get("node", "")), notes=notes)

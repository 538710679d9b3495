"""The kernel server: the untrusted child that imports the port and runs it (worker entry `serve`).

Payload (from the evaluator): backend name and reason, target, the backend probe, the timing
policy, and the read-only roots for confinement. Requests:

  {"op": "load"}                                      import the kernel (the compile phase)
  {"op": "run", "dir": D, "inputs": [meta...], "precise": bool, "trace": bool, "source": S?}
        the inputs (kernel layout, manifest order) are .npy files in D/in; outputs go to D/out:
        reply {outputs: {name: meta}, elapsed_s, provenance, trace: file?, error?}
        `source`: a mutated copy of the kernel file to run instead of the port (mutation testing)
  {"op": "trace", "dir": D, "inputs": [...]}          simulator: the emulator's trace of the same kernel
  {"op": "profile", "dir": D, "inputs": [...], "expected": [meta...]}   hardware timing and profile
  {"op": "exit"}

The reply is data: nothing here knows the reference, a tolerance or a verdict.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nkitui.executor.context import WorkerContext
from nkitui.executor.untrusted.errors import TASK_ERRORS, describe
from nkitui.executor.untrusted.server import Server

NEURON_COMPILE_CACHE = "/var/tmp/neuron-compile-cache"


def serve(payload: dict[str, Any], ctx: WorkerContext) -> int:
    import numpy as np  # noqa: F401 - before confinement: every import that is not task code

    from nkitui.executor.backends import Choice, make_backend
    from nkitui.executor.backends.detect import Probe
    from nkitui.executor.sandbox import current_guard
    from nkitui.task import load_task

    server = Server(ctx, "kernel")
    task = load_task(ctx.workspace)
    timing = None
    if payload.get("timing"):
        from nkitui.executor.timing import TimingPolicy

        timing = TimingPolicy(**payload["timing"])
    backend = make_backend(Choice(str(payload["backend"]), str(payload.get("reason", ""))), task,
                           str(payload["target"]), Probe.from_dict(payload["probe"]), timing=timing)
    guard = current_guard()
    if guard is not None and backend.allows_subprocess:
        guard.allow_writes_under(NEURON_COMPILE_CACHE)
    preload_error = None
    try:
        backend.ensure_preloaded()
    except Exception as exc:  # noqa: BLE001 - told to the evaluator when it asks to load
        preload_error = f"{type(exc).__name__}: {exc}"
    server.confine()
    from nkitui.executor.untrusted.patches import PatchWatch

    runner = KernelRunner(ctx, server, task, backend, PatchWatch())  # recorded before any task code
    if backend.name == "emulator":  # the SDK's own modules may keep caches of their own: not audited there yet
        runner.audit = _launch_state_audit(ctx)
    for request in server.requests():
        op = request["op"]
        if op == "exit":
            break
        if op == "load":
            runner.load(request, preload_error)
        elif op == "run":
            runner.run(request)
        elif op == "state":
            runner.state(request)
        elif op == "trace":
            runner.trace(request)
        elif op == "profile":
            runner.profile(request)
        else:
            server.reply(request, error={"kind": "internal", "message": f"unknown request {op!r}"})
    return 0


class KernelRunner:
    def __init__(self, ctx: WorkerContext, server: Server, task: Any, backend: Any, patches: Any = None) -> None:
        self.ctx, self.server, self.task, self.backend = ctx, server, task, backend
        self.patches = patches
        self.loaded = False
        self.max_elements = _max_elements(task)
        self.audit: Any = None  # LaunchStateAudit: what each launch leaves for a later one (None: not audited)
        self._after: dict[str, Any] | None = None  # the state the last launch (or the kernel's import) left
        # a launch asked with `state_later`: the state it started from, audited when the evaluator asks `state`
        self._unaudited: dict[str, Any] | None = None

    def load(self, request: dict[str, Any], preload_error: str | None) -> None:
        if preload_error:
            self.server.reply(request, error={"kind": "backend-unavailable", "message": preload_error})
            return
        try:
            self.backend.prepare()
        except TASK_ERRORS as exc:
            self.server.reply(request, error=describe(self.ctx, exc, f"importing {self.backend.kernel_label} failed"))
            return
        self.loaded = True
        self.server.reply(request, ok=True, label=self.backend.kernel_label, versions=self.backend.versions())
        # the state the first launch starts from, taken now, after the reply: the evaluator goes on meanwhile, and a
        # later seed's process (loaded while the earlier seeds run) has it long before its launch is asked. Nothing
        # runs here between this and the first `run` request (no task threads or signals; the requests' own folders
        # are not audited), so it is the state that launch would have found.
        if self.audit is not None:
            self._after = self._state()

    def _inputs(self, request: dict[str, Any]) -> list[Any]:
        from nkitui.executor.arrays import load_array

        folder = Path(request["dir"]) / "in"
        arrays = [load_array(folder, meta, max_elements=self.max_elements) for meta in request["inputs"]]
        if "nkitui.emulator.devmem" in sys.modules:
            from nkitui.emulator import devmem

            if devmem.enabled():  # the harness's inputs in write-protected device memory: host code cannot change
                arrays = [devmem.copy_of(a) for a in arrays]  # them in place before the launch that counts
        return arrays

    def _save(self, request: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
        from nkitui.executor.arrays import save_array

        folder = Path(request["dir"]) / "out"
        folder.mkdir(parents=True, exist_ok=True)
        return {name: save_array(folder / f"{name}.npy", arr) for name, arr in outputs.items()}

    def run(self, request: dict[str, Any]) -> None:
        # the state the last launch left is where this one starts (anything changed since is this launch's, as far
        # as the next one can tell): one snapshot a launch after the first
        before = (self._after if self._after is not None else self._state()) if not request.get("source") else None
        self._run(request, before)

    def _state(self) -> dict[str, Any] | None:
        if self.audit is None:
            return None
        gc.collect()  # finalizers of the last launch's garbage run now, not inside the next launch
        return self.audit.snapshot()  # type: ignore[no-any-return]  # LaunchStateAudit.snapshot

    def _state_changes(self, before: dict[str, Any] | None) -> list[str] | None:
        """What this launch (and anything since the last one: `before` is the state the last launch left) left for a
        later launch: a list of words, empty when nothing; None when not audited (mutants: a copy of the kernel in
        another module)."""
        if before is None or self.audit is None:
            return None
        after = self._state()
        assert after is not None
        self._after = after
        return self.audit.changes(before, after)[:8]  # type: ignore[no-any-return]  # LaunchStateAudit.changes

    def _run(self, request: dict[str, Any], before: dict[str, Any] | None) -> None:
        what = str(request.get("what") or "the kernel")
        replay_file = None
        recorder = None
        cpu_s = 0.0
        run = None
        try:
            args = self._inputs(request)
            if request.get("source"):
                outputs = self._run_source(str(request["source"]), args, bool(request.get("precise", True)))
                elapsed, provenance, trace = None, None, None
            else:
                traced = bool(request.get("trace"))
                cpu0 = time.process_time()
                with _collector_paused(traced), self._recording(request, args) as recorder:
                    run = self.backend.run(args, precise=bool(request.get("precise", True)), trace=traced)
                cpu_s = time.process_time() - cpu0  # beside the wall time: how much of it this process had a core
                outputs, elapsed, provenance, trace = run.outputs, run.elapsed_s, run.provenance, run.trace
            if self._patched(request, what):
                return
            saved = self._save(request, outputs)
            replay_file = _write_replay(Path(request["dir"]) / "out", recorder, outputs) if recorder else None
            if self._patched(request, what):
                return
        except MemoryError as exc:
            self.server.reply(request, error=describe(self.ctx, exc, what))
            return
        except TASK_ERRORS as exc:
            self.server.reply(request, error=describe(self.ctx, exc, what))
            return
        trace_file = None
        if trace is not None:
            trace_file = _write_trace(Path(request["dir"]) / "out", trace)
        fields: dict[str, Any] = {"replay": replay_file} if request.get("replay") and not request.get("source") else {}
        if not request.get("source"):
            fields["cpu_s"] = round(cpu_s, 6)
        del args, outputs, run, recorder  # the launch's objects go before the state after it is taken
        if request.get("state_later") and before is not None:
            # the audit after the reply: the evaluator reads the outputs and goes on (the next seed's process, the
            # replay) while this process audits; it asks `state` before anything else here (nothing runs between)
            self._unaudited = before
            self.server.reply(request, outputs=saved, elapsed_s=elapsed, provenance=provenance, trace=trace_file, **fields)
            return
        state = self._state_changes(before)
        if state is not None:
            fields["state"] = state
        self.server.reply(request, outputs=saved, elapsed_s=elapsed, provenance=provenance, trace=trace_file, **fields)

    def state(self, request: dict[str, Any]) -> None:
        """What the last launch asked with `state_later` left for a later launch (its launch-state audit, as `run`
        would have said in its reply); no `state` field when there is no such launch: the evaluator counts that as
        state left behind."""
        before, self._unaudited = self._unaudited, None
        changes = self._state_changes(before)
        self.server.reply(request, **({"state": changes} if changes is not None else {}))

    def _recording(self, request: dict[str, Any], args: list[Any]) -> Any:
        """The replayable instruction log of this launch (emulator only, when the evaluator asks)."""
        import contextlib

        if not request.get("replay") or self.backend.name != "emulator":
            return contextlib.nullcontext(None)
        from nkitui.emulator import replaylog

        return replaylog.recording(args)

    def _patched(self, request: dict[str, Any], what: str) -> bool:
        """Refuse the launch's outputs when task code replaced a function nkitui's code here calls
        (numpy's, nkitui's own): the outputs' check or their transfer may have been rewritten."""
        changed = self.patches.changed() if self.patches is not None else []
        if not changed:
            return False
        self.server.reply(request, error={
            "kind": "sandbox", "file": None, "line": None, "traceback": "",
            "message": f"{what}: task code replaced {', '.join(changed)} in the kernel's process (monkeypatching): "
                       "nkitui's own code calls these to check and pass on the outputs, so this launch's outputs "
                       "are not used"})
        return True

    def _run_source(self, source: str, args: list[Any], precise: bool) -> dict[str, Any]:
        from nkitui.executor.backends.base import get_function, launch_target, load_module

        entry = self.task.kernel
        path = Path(source)
        digest = path.parent.name
        module = load_module(path, f"_nkitui_mutant_{digest}")
        launch = launch_target(get_function(module, entry.name, entry.path.name), self.task)
        outputs: dict[str, Any] = self.backend.run_with(launch, args, precise=precise if self.backend.supports_precise_switch else True)
        return outputs

    def trace(self, request: dict[str, Any]) -> None:
        """The simulator's profile: the same kernel on nkitui's emulator, for the cost model's trace."""
        try:
            tr = self.backend.emulator_trace(self._inputs(request))
        except TASK_ERRORS as exc:
            self.server.reply(request, error=describe(self.ctx, exc, "recording the emulator's trace"))
            return
        out = Path(request["dir"]) / "out"
        out.mkdir(parents=True, exist_ok=True)
        self.server.reply(request, trace=_write_trace(out, tr))

    def profile(self, request: dict[str, Any]) -> None:
        """Hardware timing and the profiler's summary (timed where the kernel runs: in this process)."""
        from nkitui.executor.arrays import load_array

        try:
            args = self._inputs(request)
            folder = Path(request["dir"]) / "expected"
            expected = {name: load_array(folder, meta, max_elements=self.max_elements)
                        for name, meta in (request.get("expected") or {}).items()}
            outcome = self.backend.profile(args, None, lambda got: _recheck(self.task, got, expected), None, self.ctx.log)
        except TASK_ERRORS as exc:
            self.server.reply(request, error=describe(self.ctx, exc, "profiling the kernel"))
            return
        self.server.reply(request, timing=outcome.timing, utilisation=outcome.utilisation, notes=list(outcome.notes),
                          skipped=outcome.skipped)


def _launch_state_audit(ctx: WorkerContext) -> Any:
    from nkitui.executor.untrusted.introspection import install
    from nkitui.executor.untrusted.launchstate import LaunchStateAudit

    workspace = Path(ctx.workspace)
    return LaunchStateAudit(install(str(workspace)).task_roots, workspace.parent)


def _write_replay(folder: Path, recorder: Any, outputs: dict[str, Any]) -> str:
    """The launch's instruction log (nkitui.emulator.replaylog) with each output's view, as replay.bin."""
    from nkitui.emulator import replaylog

    views = {}
    for name, arr in outputs.items():
        view = recorder.output_view(arr)
        if view is None:
            recorder.fail(f"output `{name}` is not a tensor the emulated launch returned or wrote")
        views[name] = view
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "replay.bin").write_bytes(replaylog.pack(recorder, views if recorder.unavailable is None else {}))
    return "replay.bin"


@contextlib.contextmanager
def _collector_paused(paused: bool) -> Iterator[None]:
    """The cyclic collector off during a traced launch: its collections kept walking the growing list
    of recorded instructions (a third of the launch's CPU on flawed_transliteration's 26.6k), and a
    launch leaves about a hundred cyclic objects behind, collected once it is switched back on."""
    was_enabled = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused and was_enabled:
            gc.enable()


def _write_trace(folder: Path, trace: Any) -> str:
    """The instruction trace in its compact binary form (nkitui.emulator.tracepack): the JSON form of a
    large trace costs seconds to build, write, parse and rebuild."""
    from nkitui.emulator import tracepack

    (folder / "trace.bin").write_bytes(tracepack.pack(trace))
    return "trace.bin"


def _recheck(task: Any, got: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """None when a timed launch's outputs equal the verified first launch bit for bit."""
    import numpy as np

    for spec in task.outputs:
        if spec.name not in expected:
            continue
        a, b = np.asarray(got.get(spec.name)), np.asarray(expected[spec.name])
        if a.shape != b.shape:
            return f"`{spec.name}` has shape {a.shape}, the verified launch {b.shape}"
        same_bits = a.dtype == b.dtype and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
        if not same_bits:
            diff = int(np.count_nonzero(a.astype(np.float64) != b.astype(np.float64)))
            return f"`{spec.name}` differs from the verified launch in {diff} element(s)"
    return None


def _max_elements(task: Any) -> int:
    """The largest array this child reads: a few times the task's largest tensor (inputs are the
    evaluator's, so this bounds only mistakes)."""
    sizes: list[int] = [spec.size for spec in (*task.inputs, *task.outputs)] or [1]
    return max(sizes) * 4 + 1024

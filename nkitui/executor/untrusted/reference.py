"""The reference server: the untrusted child that imports the task's reference and runs it.

Requests:
  {"op": "load"}                                   import the reference module
  {"op": "call", "dir": D, "inputs": {name: meta}}  the reference on D/in/*.npy (natural layout);
        reply {outputs: {name: meta}} (checked against the manifest's outputs) or {error}
  {"op": "calls", "dir": D, "sets": [{"inputs": ...}, ...]}   several input sets (set k in D/k/in),
        reply {results: [{outputs, seconds} or {error, seconds}, ...]}: one round trip for a batch the
        audit asks at once (`seconds`: the set's time here, which decides how large later batches are)
  {"op": "exit"}

The reference is task code too: it runs here, in its own process and scratch folder, never in the
evaluator and never beside the kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nkitui.executor.arrays import NARROW_NAMES
from nkitui.executor.context import WorkerContext
from nkitui.executor.untrusted.errors import TASK_ERRORS, describe
from nkitui.executor.untrusted.server import Server


class ReferenceOutputError(Exception):
    """The reference's return value does not match the manifest's outputs."""


def serve(payload: dict[str, Any], ctx: WorkerContext) -> int:
    import numpy as np  # noqa: F401 - before confinement: every import that is not task code

    from nkitui.task import load_task

    server = Server(ctx, "reference")
    task = load_task(ctx.workspace)
    if any(spec.dtype in NARROW_NAMES for spec in (*task.inputs, *task.outputs)):
        import ml_dtypes  # noqa: F401 - bf16/fp8 arrays are viewed back with it: imported now, before task code
    server.confine()
    fn = None
    max_elements = max([s.size for s in (*task.inputs, *task.outputs)] or [1]) * 4 + 1024
    for request in server.requests():
        op = request["op"]
        if op == "exit":
            break
        if op == "load":
            try:
                fn = _load(task)
            except TASK_ERRORS as exc:
                ref = task.sources.reference  # None: _load said so, and the reply must not fail on it
                server.reply(request, error=describe(ctx, exc, f"importing the reference {ref.spec if ref else '(none)'} failed",
                                                     kind="reference-error"))
                continue
            server.reply(request, ok=True)
        elif op in ("call", "calls"):
            if fn is None:
                server.reply(request, error={"kind": "reference-error", "message": "the reference is not loaded"})
                continue
            folder = Path(request["dir"])
            if op == "call":
                server.reply(request, **_call(ctx, task, fn, folder, request, max_elements))
            else:  # several input sets in one request: one answer each, in order
                sets = request.get("sets")
                sets = sets if isinstance(sets, list) else []
                server.reply(request, results=[_timed_call(ctx, task, fn, folder / str(k), item, max_elements)
                                               for k, item in enumerate(sets) if isinstance(item, dict)])
        else:
            server.reply(request, error={"kind": "internal", "message": f"unknown request {op!r}"})
    return 0


def _load(task: Any) -> Any:
    from nkitui.executor.backends.base import KernelLoadError, get_function, load_module

    ref = task.sources.reference
    if ref is None:
        raise KernelLoadError("the task names no reference (sources.reference)")
    module = load_module(ref.path, f"_nkitui_reference_{ref.path.stem}")
    return get_function(module, ref.name, ref.path.name)


def _timed_call(ctx: WorkerContext, task: Any, fn: Any, folder: Path, request: dict[str, Any],
                max_elements: int) -> dict[str, Any]:
    """_call, with the seconds it took (`seconds`: the evaluator uses it only to decide how many input
    sets to ask about at once)."""
    import time

    started = time.perf_counter()
    answer = _call(ctx, task, fn, folder, request, max_elements)
    answer["seconds"] = time.perf_counter() - started
    return answer


def _call(ctx: WorkerContext, task: Any, fn: Any, folder: Path, request: dict[str, Any], max_elements: int) -> dict[str, Any]:
    """The reference on one input set (folder/in/*.npy): {"outputs": {name: meta}} or {"error": ...}."""
    import numpy as np

    from nkitui.executor.arrays import ArrayTransferError, load_array, save_array

    label = task.sources.reference.spec
    try:
        inputs = {name: load_array(folder / "in", meta, max_elements=max_elements)
                  for name, meta in request["inputs"].items()}
        kwargs = dict(task.kernel.kwargs) if task.kernel else {}
        with np.errstate(all="ignore"):
            returned = fn(**inputs, **kwargs)
        outputs = collect_reference_outputs(returned, task, label)
        (folder / "out").mkdir(parents=True, exist_ok=True)
        saved = {name: save_array(folder / "out" / f"{name}.npy", arr) for name, arr in outputs.items()}
    except (ReferenceOutputError, ArrayTransferError) as exc:
        return {"error": {"kind": "reference-error", "message": str(exc), "file": task.rel(task.sources.reference.path),
                          "line": None, "traceback": ""}}
    except TASK_ERRORS as exc:
        return {"error": describe(ctx, exc, str(request.get("what") or "the reference failed"), kind="reference-error")}
    return {"outputs": saved}


def collect_reference_outputs(returned: Any, task: Any, label: str) -> dict[str, Any]:
    import numpy as np

    names = [o.name for o in task.outputs]
    if isinstance(returned, dict):
        missing = [n for n in names if n not in returned]
        if missing:
            raise ReferenceOutputError(f"{label} returned a dict without {', '.join(missing)}")
        values = [returned[n] for n in names]
    elif isinstance(returned, (tuple, list)):
        if len(returned) != len(names):
            raise ReferenceOutputError(f"{label} returned {len(returned)} values for {len(names)} declared output(s) ({', '.join(names)})")
        values = list(returned)
    elif returned is None:
        raise ReferenceOutputError(f"{label} returned nothing; it must return its output(s)")
    else:
        if len(names) != 1:
            raise ReferenceOutputError(f"{label} returned one array for {len(names)} declared outputs ({', '.join(names)})")
        values = [returned]
    out = {}
    for spec, value in zip(task.outputs, values):
        arr = np.asarray(value)
        if arr.shape != spec.shape:
            raise ReferenceOutputError(
                f"{label} returned shape {arr.shape} for output {spec.name!r}; the manifest declares {spec.shape}"
            )
        out[spec.name] = arr
    return out

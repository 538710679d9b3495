"""The confined child of `nkitui emu run` (nkitui/cli/emu.py): runs one kernel on the emulator.

    python -P -m nkitui.cli._emu_child JOB.json

The parent has already read and checked the user's inputs (nkitui.common.npzsafe) and copied the
kernel's folder into the scratch folder; this process applies the limits, installs the guard,
enters the OS confinement (nkitui.executor.confine) before importing the kernel, and leaves only
data behind: outputs as plain .npy files and result.json (a summary, a usage error or the kernel's
failure). It never sees the user's paths, only the names to show in messages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


class UsageError(Exception):
    """Bad inputs for this kernel: the parent exits with code 2 and the message."""


def _apply_casts(raw: dict, display: str) -> dict:
    """`NAME@bfloat16` inputs cast to their low-precision dtype (npz cannot hold them)."""
    import numpy as np

    from nkitui.emulator import dtypes

    arrays = {}
    for key, arr in raw.items():
        name, _, cast = key.partition("@")
        if cast:
            try:
                d = dtypes.dtype_of(cast)
            except TypeError:
                raise UsageError(f"input {key!r} in {display}: unknown dtype {cast!r} after '@'") from None
            if arr.dtype == np.uint16 and d.itemsize == 2:
                arr = arr.view(d.np)
            elif arr.dtype.kind == "V":
                if arr.dtype.itemsize != d.itemsize:
                    raise UsageError(f"input {key!r}: {arr.dtype.itemsize}-byte raw values cannot be {cast}")
                arr = arr.view(d.np)
            else:
                arr = arr.astype(d.np)
        elif arr.dtype.kind == "V":
            raise UsageError(f"input {key!r} in {display} has a raw {arr.dtype.itemsize}-byte dtype (a bfloat16/fp8 "
                             f"array saved by numpy); save it as float32 under the name '{key}@bfloat16' "
                             "(or the right dtype) instead")
        arrays[name] = arr
    return arrays


_THREADS: list[str | None] = [None, None]  # confine.refuse_threads(): (active, degraded), for the report


def _import_kernel(file, name: str, display: str):
    import importlib.util

    from nkitui import emulator

    try:
        emulator.install()
    except emulator.InstallError as e:
        raise UsageError(str(e)) from None
    from nkitui.executor import confine

    _THREADS[:] = confine.refuse_threads()  # nkitui's setup is done: no threads for the kernel's code
    module_name = f"_nkitui_emu_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise UsageError(f"{display}:{e.lineno}: syntax error: {e.msg}") from None
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if kernel is None:
        found = sorted(k for k, v in vars(module).items()
                       if not k.startswith("_") and callable(v) and getattr(v, "__module__", module_name) == module_name)
        hint = f"; kernels and functions defined there: {', '.join(found)}" if found else ""
        raise UsageError(f"no kernel named {name!r} in {display}{hint}")
    if not callable(kernel):
        raise UsageError(f"{display}::{name} is not a function or kernel")
    if not isinstance(kernel, emulator.Kernel):
        kernel = _front_end_jit(module)(kernel)
    return kernel


def _front_end_jit(module):
    """The `jit` of the namespace the kernel file uses: the new `nki` when the file imports it
    (and a front end provides it), else the legacy `neuronxcc.nki`."""
    new = sys.modules.get("nki")
    new_modules = {id(m) for n, m in list(sys.modules.items())
                   if (n == "nki" or n.startswith("nki.")) and getattr(m, "__nkitui_emulator__", False)}
    uses_new = any(id(v) in new_modules for v in vars(module).values())
    if new is not None and uses_new and callable(getattr(new, "jit", None)):
        return new.jit
    from nkitui.emulator.legacy.nki import jit

    return jit


def _bind(kernel, arrays: dict, inputs_path: str):
    import inspect

    sig = inspect.signature(kernel.func)
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                 p.KEYWORD_ONLY)]
    names = {p.name for p in params}
    if arrays and all(k in names for k in arrays):
        args, kwargs = (), dict(arrays)
    else:
        args, kwargs = tuple(arrays.values()), {}
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        shown = ", ".join(f"{k}{list(v.shape)}" for k, v in arrays.items())
        raise UsageError(f"inputs do not match the signature of {kernel.name}{sig}: {inputs_path} holds "
                         f"{len(arrays)} array(s) ({shown}) ({e})") from None
    return args, kwargs


def _collect_outputs(result, info, args, kwargs, bound_names):
    import numpy as np

    if result is None:
        outs = {}
        for name in info.written_args:
            if name in kwargs:
                outs[name] = kwargs[name]
            elif name in bound_names:
                outs[name] = args[bound_names.index(name)]
        return outs
    if isinstance(result, np.ndarray):
        return {"out": result}
    if isinstance(result, (tuple, list)):
        return {f"out{i}": r for i, r in enumerate(result)}
    if isinstance(result, dict):
        return {str(k): v for k, v in result.items()}
    raise UsageError(f"kernel returned {type(result).__name__}, not arrays")


def _run(job: dict, scratch: Path) -> dict:
    import inspect
    import time
    import warnings

    import numpy as np

    from nkitui import emulator

    work = scratch / "work"
    display = job["display"]
    shapes = job.get("shapes")  # shape-only (`nkitui perf estimate FILE.py::KERNEL`): specs, no arrays
    file = work / job["kernel"]
    kernel = _import_kernel(file, job["name"], display)
    if shapes is not None:
        call_args = tuple(emulator.ShapeDtype(tuple(a["shape"]), a["dtype"]) if "shape" in a else a["value"]
                          for a in shapes)
        call_kwargs = dict(job.get("kwargs") or {})
    else:
        raw = {}
        for key, rel in job["inputs"]:
            raw[key] = np.load(scratch / rel, allow_pickle=False)
        arrays = _apply_casts(raw, job["inputs_display"])
        call_args, call_kwargs = _bind(kernel, arrays, job["inputs_display"])
    grid = tuple(job["grid"])
    launch = kernel[grid] if grid else kernel
    opts = {"target": job["target"]} if job.get("target") else {}
    if shapes is not None:
        opts.update(execute=False, capacity="off")
    t0 = time.perf_counter()
    try:
        # `emu run`'s diagnostics reach the user once, in the summary the parent prints (or its JSON);
        # the same messages as Python warnings on stderr would show each of them twice. The shape-only
        # trace (`nkitui perf`) prints no summary of them, so there the warnings stay.
        with warnings.catch_warnings(), emulator.trace(**opts) as tr:
            if shapes is None:
                warnings.simplefilter("ignore", emulator.NKIEmulatorWarning)
            result = launch(*call_args, **call_kwargs)
    except emulator.NKIEmulatorError as e:
        return {"error": {"kind": type(e).__name__, "rule": getattr(e, "rule", ""), "message": str(e)}}
    except Exception as e:  # the kernel's own code raised: report it with its location
        import traceback

        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(file.resolve())
                  or f.filename == str(file)]
        where = f" at {Path(display).name}:{frames[-1].lineno}" if frames else ""
        return {"error": {"kind": type(e).__name__, "rule": "kernel-exception", "message": f"{type(e).__name__}: {e}{where}"}}
    wall = time.perf_counter() - t0
    if job.get("trace") or shapes is not None:
        tr.kernel = job["name"]
        (scratch / "trace.json").write_text(json.dumps(tr.to_json()), encoding="utf-8")
    if shapes is not None:
        return {"summary": {"kernel": job["name"], "file": display, "target": tr.target, "grid": list(grid),
                            "instructions": len(tr), "wall_s": round(wall, 6)}, "files": []}
    info = kernel.last_run if not grid else launch.last_run
    bound_names = list(inspect.signature(kernel.func).parameters)
    outputs = _collect_outputs(result, info, call_args, call_kwargs, bound_names)
    out_dir = scratch / "out"
    out_dir.mkdir()
    described, files = {}, []
    for i, (key, arr) in enumerate(outputs.items()):
        arr = np.asarray(arr)
        described[key] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
        if type(arr.dtype).__module__.startswith("ml_dtypes") or arr.dtype.kind == "V":
            arr = arr.astype(np.float32)
            described[key]["saved_as"] = "float32"
        if arr.dtype.hasobject:
            raise UsageError(f"output {key!r} holds Python objects, not numbers")
        np.save(out_dir / f"{i}.npy", arr, allow_pickle=False)
        files.append([key, f"out/{i}.npy"])
    engines: dict[str, int] = {}
    for ins in tr:
        engines[ins.engine] = engines.get(ins.engine, 0) + 1
    return {"summary": {"kernel": job["name"], "file": display, "target": tr.target, "grid": list(grid),
                        "instructions": len(tr), "engines": engines, "wall_s": round(wall, 6),
                        "outputs": described, "diagnostics": tr.meta.get("diagnostics", [])},
            "files": files}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -P -m nkitui.cli._emu_child JOB.json\n")
        return 2
    job_path = Path(argv[1])
    job = json.loads(job_path.read_text(encoding="utf-8"))
    scratch = job_path.parent
    from nkitui.executor.limits import Limits, apply_limits

    apply_limits(Limits.from_dict(job.get("limits", {})))
    from nkitui.executor import confine
    from nkitui.executor.sandbox import install_guard

    install_guard([str(scratch)], allow_processes=False, task_root=str(scratch / "work"))
    report = confine.enter(confine.ConfinementPolicy(scratch=scratch))
    os.chdir(scratch / "work")
    try:
        out = _run(job, scratch)
    except UsageError as e:
        out = {"usage": str(e)}
    except MemoryError:
        mb = job.get("limits", {}).get("memory_mb")
        out = {"error": {"kind": "MemoryError", "rule": "memory-limit",
                         "message": f"ran out of memory (the limit is {mb} MB of address space)"}}
    no_threads, threads_allowed = _THREADS
    report = confine.ConfinementReport(report.active + ((no_threads,) if no_threads else ()),
                                       report.degraded + ((threads_allowed,) if threads_allowed else ()),
                                       report.details, report.enter_ms)
    out["confinement"] = report.to_dict()
    (scratch / "result.json").write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    rc = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)

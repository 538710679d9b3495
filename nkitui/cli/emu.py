"""`nkitui emu run FILE.py::KERNEL --inputs IN.npz --out OUT.npz`: run one kernel on the emulator.

Inputs are the arrays of IN.npz, passed positionally in the file's order, or by name when every
array name matches a kernel parameter. Outputs (the kernel's returned arrays, or for kernels that
write into their arguments, those arguments) are written to OUT.npz. Exit codes: 0 success,
1 the kernel failed on the emulator, 2 the command or its inputs are invalid.

npz cannot hold bfloat16/fp8 arrays (numpy saves them as raw bytes): name such an input
`NAME@bfloat16` (values stored as float32, or as uint16 bit patterns) and it is cast before the
run; low-precision outputs are saved as float32 and their dtype is shown in the summary.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("emu", help="run an NKI kernel on the CPU emulator",
                                   description="Run NKI kernels on nkitui's numpy emulator of a NeuronCore.")
    sub = parser.add_subparsers(dest="emu_command", metavar="ACTION")
    run = sub.add_parser("run", help="run FILE.py::KERNEL on arrays from an .npz file",
                         description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("spec", metavar="FILE.py::KERNEL", help="kernel file and the kernel function's name")
    run.add_argument("--inputs", required=True, metavar="IN.npz", help="input arrays (positional order or by name)")
    run.add_argument("--out", required=True, metavar="OUT.npz", help="where to write the output arrays")
    run.add_argument("--grid", metavar="G0,G1", help="SPMD launch grid, e.g. 2 or 4,2")
    run.add_argument("--target", choices=("trn1", "trn2", "trn3"), help="NeuronCore generation (default: "
                     "$NEURON_PLATFORM_TARGET_OVERRIDE, else trn2)")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--trace", metavar="OUT.json", help="also save the run's instruction trace (for `nkitui perf "
                     "estimate OUT.json`; gzip-compressed when OUT ends in .gz)")
    run.set_defaults(func=_run)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser) -> int:
    parser.print_help()
    return 2


class UsageError(Exception):
    """Bad command line or inputs: exit code 2 with the message."""


def _run(args) -> int:
    try:
        return _run_checked(args)
    except UsageError as e:
        print(f"nkitui emu run: error: {e}", file=sys.stderr)
        return 2


def _parse_spec(spec: str):
    from pathlib import Path

    path, sep, name = spec.rpartition("::")
    if not sep or not path or not name:
        raise UsageError(f"bad kernel spec {spec!r}: expected FILE.py::KERNEL, e.g. kernels/add.py::add_kernel")
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"kernel file {path} does not exist")
    if file.suffix != ".py":
        raise UsageError(f"kernel file {path} is not a Python file (.py)")
    if not name.isidentifier():
        raise UsageError(f"bad kernel name {name!r} in {spec!r}: it must be a Python identifier")
    return file, name


def _parse_grid(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        grid = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--grid {text!r}: expected comma-separated positive integers such as 2 or 4,2") from None
    if not grid or any(g < 1 for g in grid):
        raise UsageError(f"--grid {text!r}: grid sizes must be positive integers")
    return grid


def _load_inputs(path: str):
    import numpy as np

    from nkitui.emulator import dtypes

    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"inputs file {path} does not exist") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"inputs file {path} is not a readable .npz archive ({e})") from None
    if not hasattr(archive, "files"):
        raise UsageError(f"inputs file {path} holds a single array; save inputs with numpy.savez(path, a=..., b=...)")
    arrays = {}
    for key in archive.files:
        arr = archive[key]
        name, _, cast = key.partition("@")
        if cast:
            try:
                d = dtypes.dtype_of(cast)
            except TypeError:
                raise UsageError(f"input {key!r} in {path}: unknown dtype {cast!r} after '@'") from None
            if arr.dtype == np.uint16 and d.itemsize == 2:
                arr = arr.view(d.np)
            elif arr.dtype.kind == "V":
                if arr.dtype.itemsize != d.itemsize:
                    raise UsageError(f"input {key!r}: {arr.dtype.itemsize}-byte raw values cannot be {cast}")
                arr = arr.view(d.np)
            else:
                arr = arr.astype(d.np)
        elif arr.dtype.kind == "V":
            raise UsageError(f"input {key!r} in {path} has a raw {arr.dtype.itemsize}-byte dtype (a bfloat16/fp8 "
                             f"array saved by numpy); save it as float32 under the name '{key}@bfloat16' "
                             "(or the right dtype) instead")
        arrays[name] = arr
    return arrays


def _import_kernel(file, name: str):
    import importlib.util

    from nkitui import emulator

    try:
        emulator.install()
    except emulator.InstallError as e:
        raise UsageError(str(e)) from None
    module_name = f"_nkitui_emu_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise UsageError(f"{file}:{e.lineno}: syntax error: {e.msg}") from None
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if kernel is None:
        found = sorted(k for k, v in vars(module).items()
                       if not k.startswith("_") and callable(v) and getattr(v, "__module__", module_name) == module_name)
        hint = f"; kernels and functions defined there: {', '.join(found)}" if found else ""
        raise UsageError(f"no kernel named {name!r} in {file}{hint}")
    if not callable(kernel):
        raise UsageError(f"{file}::{name} is not a function or kernel")
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


def _run_checked(args) -> int:
    import inspect
    import time

    import numpy as np

    from nkitui import emulator

    file, name = _parse_spec(args.spec)
    grid = _parse_grid(args.grid)
    arrays = _load_inputs(args.inputs)
    kernel = _import_kernel(file, name)
    call_args, call_kwargs = _bind(kernel, arrays, args.inputs)
    launch = kernel[grid] if grid else kernel
    opts = {"target": args.target} if args.target else {}
    t0 = time.perf_counter()
    try:
        with emulator.trace(**opts) as tr:
            result = launch(*call_args, **call_kwargs)
    except emulator.NKIEmulatorError as e:
        return _fail(args, str(e), type(e).__name__, getattr(e, "rule", ""))
    except Exception as e:  # the kernel's own code raised: report it with its location
        import traceback

        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(file.resolve())
                  or f.filename == str(file)]
        where = f" at {file.name}:{frames[-1].lineno}" if frames else ""
        return _fail(args, f"{type(e).__name__}: {e}{where}", type(e).__name__, "kernel-exception")
    wall = time.perf_counter() - t0
    info = kernel.last_run if not grid else launch.last_run
    bound_names = list(inspect.signature(kernel.func).parameters)
    outputs = _collect_outputs(result, info, call_args, call_kwargs, bound_names)
    saved, described = {}, {}
    for key, arr in outputs.items():
        arr = np.asarray(arr)
        described[key] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
        if type(arr.dtype).__module__.startswith("ml_dtypes") or arr.dtype.kind == "V":
            arr = arr.astype(np.float32)
            described[key]["saved_as"] = "float32"
        saved[key] = arr
    try:
        np.savez(args.out, **saved)
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e}") from None
    if getattr(args, "trace", None):
        _save_trace(tr, args.trace)
    engines: dict[str, int] = {}
    for ins in tr:
        engines[ins.engine] = engines.get(ins.engine, 0) + 1
    summary = {
        "kernel": name, "file": str(file), "target": tr.target, "grid": list(grid),
        "instructions": len(tr), "engines": engines, "wall_s": round(wall, 6),
        "outputs": described, "out": args.out, "diagnostics": tr.meta.get("diagnostics", []),
        "trace": getattr(args, "trace", None),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        per = ", ".join(f"{e} {n}" for e, n in sorted(engines.items()))
        print(f"{name} on {tr.target}{' grid ' + 'x'.join(map(str, grid)) if grid else ''}: {len(tr)} instructions "
              f"({per}) in {wall * 1000:.1f} ms")
        for key, d in described.items():
            note = f" (saved as {d['saved_as']})" if "saved_as" in d else ""
            print(f"  {key}: {tuple(d['shape'])} {d['dtype']}{note}")
        for diag in summary["diagnostics"]:
            print(f"  warning: {diag['message']}")
        print(f"outputs written to {args.out}")
        if summary["trace"]:
            print(f"trace written to {summary['trace']} (estimate it with: nkitui perf estimate {summary['trace']})")
    return 0


def _save_trace(tr, path: str) -> None:
    """Write the instruction trace as JSON (Trace.to_json), gzip-compressed for a .gz name."""
    import gzip

    data = json.dumps(tr.to_json())
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.write(data)
        else:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(data)
    except OSError as e:
        raise UsageError(f"cannot write the trace to {path}: {e.strerror or e}") from None


def _fail(args, message: str, kind: str, rule: str) -> int:
    if args.json:
        print(json.dumps({"error": {"kind": kind, "rule": rule, "message": message}}))
    else:
        print(f"nkitui emu run: kernel failed: {message}", file=sys.stderr)
    return 1

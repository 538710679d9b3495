"""Child process of `nkitui perf estimate FILE.py::KERNEL`: trace the kernel shape-only, write the trace.

    python -m nkitui.cli._perf_trace REQUEST.json

REQUEST.json: {"file", "kernel", "args": [spec...], "kwargs": {name: value}, "grid": [..], "target", "out"}
where a spec is {"shape": [...], "dtype": "bfloat16"} or {"value": ...}. The kernel file is task code: it runs
here, in a child of its own with CPU-time and memory limits, never in the process that prints the estimate.
Exit 0 with the trace written to "out"; exit 1 with {"error": ...} on stdout when the kernel failed; exit 2
when the request itself is bad.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path


def _limit(cpu_s: int, memory_bytes: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or limits already lower: keep what there is
        pass


def _kernel(file: Path, name: str):
    from nkitui import emulator

    emulator.install()
    spec = importlib.util.spec_from_file_location(f"_nkitui_perf_{abs(hash(str(file)))}", file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if kernel is None or not callable(kernel):
        found = sorted(k for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, emulator.Kernel))
        hint = f"; kernels defined there: {', '.join(found)}" if found else ""
        raise LookupError(f"no kernel named {name!r} in {file}{hint}")
    if not isinstance(kernel, emulator.Kernel):
        uses_new = any(getattr(v, "__name__", "").split(".")[0] == "nki" for v in vars(module).values())
        if uses_new:
            import nki

            kernel = nki.jit(kernel)
        else:
            from nkitui.emulator.legacy.nki import jit

            kernel = jit(kernel)
    return kernel


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    _limit(int(request.get("cpu_s", 600)), int(request.get("memory_bytes", 16 * 2**30)))
    from nkitui import emulator

    file = Path(request["file"])
    try:
        kernel = _kernel(file, request["kernel"])
        args = [emulator.ShapeDtype(tuple(a["shape"]), a["dtype"]) if "shape" in a else a["value"]
                for a in request["args"]]
        kwargs = dict(request.get("kwargs") or {})
        grid = tuple(request.get("grid") or ())
        launch = kernel[grid] if grid else kernel
        with emulator.trace(execute=False, target=request["target"], capacity="off") as tr:
            launch(*args, **kwargs)
    except Exception as exc:  # the kernel (task code) failed: report it as data, with its line
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == file.resolve()]
        where = f" at {file.name}:{frames[-1].lineno}" if frames else ""
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}{where}"}))
        return 1
    tr.kernel = request["kernel"]
    Path(request["out"]).write_text(json.dumps(tr.to_json()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1:]))

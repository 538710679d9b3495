"""`nkitui emu run FILE.py::KERNEL --inputs IN.npz --out OUT.npz`: run one kernel on the emulator.

Inputs are the arrays of IN.npz, passed positionally in the file's order, or by name when every
array name matches a kernel parameter. Outputs (the kernel's returned arrays, or for kernels that
write into their arguments, those arguments) are written to OUT.npz. Exit codes: 0 success,
1 the kernel failed on the emulator, 2 the command or its inputs are invalid.

npz cannot hold bfloat16/fp8 arrays (numpy saves them as raw bytes): name such an input
`NAME@bfloat16` (values stored as float32, or as uint16 bit patterns) and it is cast before the
run; low-precision outputs are saved as float32 and their dtype is shown in the summary.

The kernel is untrusted code: it runs in a confined child (its own session, Landlock, seccomp, no
network, limits), on a copy of its folder, and sees neither IN.npz nor OUT.npz — nkitui reads the
inputs (refusing pickles, object arrays, zip bombs and forged headers), hands the child plain .npy
arrays, and writes OUT.npz from the plain .npy arrays the child leaves. Its prints go to stderr as
data: terminal controls shown as pictures, secret shapes redacted, the first MiB shown.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from nkitui.cli.textout import ParagraphHelpFormatter
from nkitui.common.names import TARGET_NAMES

MAX_KERNEL_FOLDER_MB = 256
MAX_KERNEL_FOLDER_FILES = 2000
MAX_RESULT_BYTES = 16 << 20


def register(subparsers) -> None:
    parser = subparsers.add_parser("emu", help="run an NKI kernel on the CPU emulator",
                                   description="Run NKI kernels on nkitui's numpy emulator of a NeuronCore.")
    sub = parser.add_subparsers(dest="emu_command", metavar="ACTION")
    run = sub.add_parser("run", help="run FILE.py::KERNEL on arrays from an .npz file",
                         description="\n\n".join(__doc__.split("\n\n")[1:4]),
                         formatter_class=ParagraphHelpFormatter)  # paragraphs reflowed to the terminal
    run.add_argument("spec", metavar="FILE.py::KERNEL", help="kernel file and the kernel function's name")
    run.add_argument("--inputs", required=True, metavar="IN.npz", help="input arrays (positional order or by name)")
    run.add_argument("--out", required=True, metavar="OUT.npz", help="where to write the output arrays")
    run.add_argument("--grid", metavar="G0,G1", help="SPMD launch grid, e.g. 2 or 4,2")
    run.add_argument("--target", choices=TARGET_NAMES, help="NeuronCore generation (default: "
                     "$NEURON_PLATFORM_TARGET_OVERRIDE, else trn2)")
    run.add_argument("--timeout", type=float, default=300.0, metavar="S", help="wall-clock limit (default 300 s)")
    run.add_argument("--memory-mb", type=int, default=8192, metavar="MB", help="memory limit (default 8192)")
    run.add_argument("--max-input-mb", type=int, default=2048, metavar="MB",
                     help="largest total size of the inputs once unpacked (default 2048)")
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
    from nkitui.common.redact import redact_text

    try:
        return _run_checked(args)
    except UsageError as e:  # may quote the child's words: shown as data
        print(f"nkitui emu run: error: {redact_text(str(e))}", file=sys.stderr)
        return 2


@dataclass(frozen=True)
class OutputInfo:
    shape: tuple[int, ...]
    dtype: str
    saved_as: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    message: str


@dataclass(frozen=True)
class ChildSummary:
    """The summary the confined child returns, read as data: a malformed one is a failure, not a traceback."""

    kernel: str
    target: str
    grid: tuple[int, ...]
    instructions: int
    wall_s: float
    engines: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, OutputInfo] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()


def read_child_summary(data: dict) -> ChildSummary:
    """`data["summary"]` checked field by field (CodecError names the field)."""
    from nkitui.common.codec import decode

    summary: ChildSummary = decode(ChildSummary, data.get("summary"), "summary")
    return summary


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
    if len(grid) > 3 or any(g > 4096 for g in grid) or _product(grid) > 65536:
        raise UsageError(f"--grid {text!r}: at most 3 dimensions of at most 4096, 65536 programs in all")
    return grid


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _load_inputs(path: str, max_mb: int) -> dict:
    from pathlib import Path

    from nkitui.common.npzsafe import NpzError, load_npz

    if not Path(path).exists():
        raise UsageError(f"inputs file {path} does not exist")
    try:
        return load_npz(Path(path), max_bytes=max_mb * 1024 * 1024)
    except NpzError as e:
        raise UsageError(f"inputs file {e}") from None


def _refuse_home(folder) -> None:
    """The kernel's folder is copied for the confined run, where the kernel reads all of it: never a home
    folder (its dot-files hold keys and tokens; credential stores are skipped, but not every secret has a name)."""
    import os
    from pathlib import Path

    homes = {Path(os.path.expanduser("~")).resolve()}
    if os.environ.get("HOME"):
        homes.add(Path(os.environ["HOME"]).resolve())
    if folder in homes:
        raise UsageError(f"the kernel is in your home folder ({folder}), and a kernel's folder is copied whole for "
                         "its confined run: move the kernel (and the files it imports) into a folder of its own")


def _prepare(file, name: str, grid, args, inputs: dict):
    """The scratch folder: a copy of the kernel's folder, the inputs as .npy, the job file."""
    import numpy as np

    from nkitui.executor.limits import Limits
    from nkitui.executor.workspace import WorkspaceError, make_scratch

    folder = file.resolve().parent
    _refuse_home(folder)
    try:
        scratch = make_scratch(folder, max_copy_mb=MAX_KERNEL_FOLDER_MB,
                               max_files=MAX_KERNEL_FOLDER_FILES, prefix="nkitui-emu-")
    except WorkspaceError as e:
        raise UsageError(f"{e} (the kernel's folder is copied for the confined run: keep the kernel in a folder of "
                         "its own)") from None
    try:
        (scratch.root / "inputs").mkdir()
        listed = []
        for i, (key, arr) in enumerate(inputs.items()):
            np.save(scratch.root / "inputs" / f"{i}.npy", arr, allow_pickle=False)
            listed.append([key, f"inputs/{i}.npy"])
        limits = Limits(timeout_s=args.timeout, memory_mb=args.memory_mb)
        job = {"kernel": file.name, "display": str(file), "name": name, "grid": list(grid), "target": args.target,
               "inputs": listed, "inputs_display": args.inputs, "limits": limits.to_dict(),
               "trace": bool(getattr(args, "trace", None))}
        (scratch.root / "job.json").write_text(json.dumps(job), encoding="utf-8")
    except BaseException:
        scratch.remove()
        raise
    return scratch, limits


def _run_child(scratch, limits) -> tuple[dict | None, str]:
    """Spawn the confined child and wait for it: (its result.json, what went wrong in words)."""
    import os
    import signal
    import subprocess
    from pathlib import Path

    from nkitui.executor import confine

    from nkitui.common.childoutput import OutputRelay

    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    read_end, write_end = os.pipe()  # its prints reach the terminal through OutputRelay, never raw
    try:
        proc = confine.spawn([sys.executable, "-P", "-m", "nkitui.cli._emu_child", str(scratch.root / "job.json")],
                             confine.ConfinementPolicy(scratch=scratch.root), python_path=[package_parent],
                             stdin=subprocess.DEVNULL, stdout=write_end, stderr=write_end, cwd=scratch.work)
    except OSError as exc:  # the interpreter could not be started, or the spawn did not end in time
        os.close(read_end)
        return None, f"the kernel's confined process could not be started: {exc}"
    finally:
        os.close(write_end)
    relay = OutputRelay(read_end, sys.stderr)
    try:
        proc.wait(timeout=limits.timeout_s)
        problem = ""
    except subprocess.TimeoutExpired:
        problem = f"the kernel ran past the {limits.timeout_s:g} s limit (--timeout) and was stopped"
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the child, and anything it may have left behind
        except OSError:
            pass
        proc.wait()
        confine.release(proc.pid)
        relay.finish()
    if problem:
        return None, problem
    from nkitui.executor.exitstatus import describe_exit

    ended = f"the kernel's process {describe_exit(proc.returncode, limits).message}"
    try:
        data = json.loads(_read_left(scratch, "result.json", MAX_RESULT_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None, f"{ended} without a result"
    except OSError as exc:  # a FIFO (opening it would wait for ever), a link, a device, too large
        return None, f"{ended} without a result: {exc.strerror or exc} (task code replaced result.json)"
    except (ValueError, RecursionError):
        return None, f"{ended} without a readable result (result.json is not JSON nkitui can read)"
    if not isinstance(data, dict):
        return None, f"{ended} without a readable result (result.json is not a JSON object)"
    return data, ""


def _read_left(scratch, rel: str, max_bytes: int) -> bytes:
    """The bytes of a file the confined child left in its scratch folder: a regular file reached without
    following a link, never a FIFO (whose open waits for a writer that is gone), at most `max_bytes`."""
    from nkitui.executor.workspace import read_beneath

    return read_beneath(scratch.root, rel, max_bytes=max_bytes)


def _collect(scratch, data: dict, max_mb: int) -> dict:
    import io

    from nkitui.common.npzsafe import MAX_HEADER, MAX_MEMBERS, NpzError, read_npy

    outputs = {}
    budget = max_mb * 1024 * 1024
    files = data.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, list) and len(f) == 2 for f in files):
        raise NpzError("the child's list of output files is malformed")
    if len(files) > MAX_MEMBERS:  # each is a read here and a member of OUT.npz: 300,000 empty ones took 38 s
        raise NpzError(f"the child listed {len(files):,} output files; a kernel returns at most {MAX_MEMBERS}")
    for key, rel in files:
        try:  # no link followed (outside the run's folder or in it), no FIFO waited on
            raw = _read_left(scratch, str(rel), budget + MAX_HEADER + 64)
        except OSError as exc:
            raise NpzError(f"output {str(key)[:80]!r} ({str(rel)[:200]}) could not be read: {exc.strerror or exc}") from None
        arr = read_npy(io.BytesIO(raw), str(rel)[:200], budget)
        budget -= arr.nbytes
        outputs[str(key)] = arr
    return outputs


def _run_checked(args) -> int:
    file, name = _parse_spec(args.spec)
    grid = _parse_grid(args.grid)
    if not (0 < args.timeout <= 86400):
        raise UsageError(f"--timeout {args.timeout:g}: give a number of seconds between 1 and 86400")
    if not (64 <= args.memory_mb <= 1 << 20):
        raise UsageError(f"--memory-mb {args.memory_mb}: give a number of MB between 64 and 1048576")
    inputs = _load_inputs(args.inputs, args.max_input_mb)
    import numpy as np

    from nkitui.common.codec import CodecError
    from nkitui.common.npzsafe import NpzError
    from nkitui.common.redact import neutralize_controls as shown
    from nkitui.executor import confine

    confine.harden_parent()
    scratch, limits = _prepare(file, name, grid, args, inputs)
    try:
        data, problem = _run_child(scratch, limits)
        if data is None:
            return _fail(args, problem, "RunError", "sandbox")
        sandbox = shown(confine.ConfinementReport.from_dict(data.get("confinement") or {}).summary())
        if "usage" in data:
            raise UsageError(str(data["usage"]))
        if "error" in data:
            err = data["error"] if isinstance(data["error"], dict) else {"message": str(data["error"])}
            return _fail(args, str(err.get("message", "")), str(err.get("kind", "")), str(err.get("rule", "")))
        try:
            outputs = _collect(scratch, data, args.max_input_mb * 4)
        except NpzError as e:
            return _fail(args, f"the kernel's outputs could not be read: {e}", "OutputError", "output")
        try:
            checked = read_child_summary(data)
        except CodecError as e:
            return _fail(args, f"the kernel's process returned a malformed summary ({e})", "RunError", "sandbox")
        if getattr(args, "trace", None):
            save_trace(read_trace(scratch), args.trace)
    finally:
        scratch.remove()
    try:
        np.savez(args.out, **outputs)
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e}") from None
    summary = {**data["summary"], "out": args.out, "sandbox": sandbox}
    if args.json:
        print(json.dumps(summary))
        return 0
    # every string below came from the kernel's process: terminal controls are shown, not obeyed
    grid_text = " grid " + "x".join(map(str, grid)) if grid else ""
    per = ", ".join(f"{shown(e)} {n}" for e, n in sorted(checked.engines.items()))
    print(f"{name} on {shown(checked.target)}{grid_text}: {checked.instructions} instructions ({per}) in "
          f"{checked.wall_s * 1000:.1f} ms")
    for key, out in checked.outputs.items():
        note = f" (saved as {shown(out.saved_as)})" if out.saved_as else ""
        print(f"  {shown(key)}: {out.shape} {shown(out.dtype)}{note}")
    for diag in checked.diagnostics:
        print(f"  warning: {shown(diag.message)}")
    print(f"outputs written to {args.out}")
    if getattr(args, "trace", None):
        print(f"trace written to {args.trace} (estimate it with: nkitui perf estimate {args.trace})")
    print(sandbox)
    return 0


MAX_TRACE_BYTES = 1 << 30


class KernelFailed(Exception):
    """The kernel failed on the emulator (exit code 1); the message says where."""


def trace_shape_only(file, name: str, grid, target: str, shapes: list, kwargs: dict, *, timeout_s: float,
                     memory_mb: int = 8192):
    """Trace FILE.py::KERNEL shape-only (ShapeDtype arguments, no numerics) in the same confined child as
    `emu run`, on a copy of its folder; returns the Trace. UsageError for bad input, KernelFailed when the
    kernel raised. `shapes` are {"shape": [...], "dtype": name} or {"value": literal} (for `nkitui perf`)."""
    from nkitui.executor import confine
    from nkitui.executor.limits import Limits
    from nkitui.executor.workspace import WorkspaceError, make_scratch

    confine.harden_parent()
    folder = file.resolve().parent
    _refuse_home(folder)
    try:
        scratch = make_scratch(folder, max_copy_mb=MAX_KERNEL_FOLDER_MB,
                               max_files=MAX_KERNEL_FOLDER_FILES, prefix="nkitui-perf-")
    except WorkspaceError as e:
        raise UsageError(f"{e} (the kernel's folder is copied for the confined run: keep the kernel in a folder of "
                         "its own)") from None
    try:
        limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
        job = {"kernel": file.name, "display": str(file), "name": name, "grid": list(grid), "target": target,
               "inputs": [], "inputs_display": "", "limits": limits.to_dict(), "shapes": shapes,
               "kwargs": kwargs, "trace": True}
        (scratch.root / "job.json").write_text(json.dumps(job), encoding="utf-8")
        data, problem = _run_child(scratch, limits)
        if data is None:
            raise KernelFailed(problem)
        from nkitui.common.redact import redact_text

        if "usage" in data:
            raise UsageError(redact_text(str(data["usage"])))
        if "error" in data:
            err = data["error"]
            raise KernelFailed(redact_text(str(err.get("message", "") if isinstance(err, dict) else err)))
        return read_trace(scratch)
    finally:
        scratch.remove()


def read_trace(scratch):
    """The trace the confined child left (trace.json): read and checked as data, never trusted as code."""
    from nkitui.perf.loading import PerfInputError, trace_from_json

    try:
        data = json.loads(_read_left(scratch, "trace.json", MAX_TRACE_BYTES).decode("utf-8"))
        return trace_from_json(data, "the kernel's trace")
    except RecursionError:
        raise UsageError("the kernel's trace could not be read (nested too deeply)") from None
    except (OSError, ValueError, PerfInputError) as e:
        raise UsageError(f"the kernel's trace could not be read ({e})") from None


def save_trace(trace, path: str) -> None:
    """Write a trace as JSON (Trace.to_json), gzip-compressed for a .gz name."""
    import gzip

    data = json.dumps(trace.to_json())
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
    from nkitui.common.redact import redact_text

    message = redact_text(message)  # the kernel's own words: shown as data, secret shapes replaced
    if args.json:
        print(json.dumps({"error": {"kind": kind, "rule": rule, "message": message}}))
    else:
        print(f"nkitui emu run: kernel failed: {message}", file=sys.stderr)
    return 1

"""`nkitui perf ...`: the cost model, profiles, comparisons and the speed of light on the command line.

    nkitui perf estimate TRACE.json [--target T] [--json]
    nkitui perf estimate FILE.py::KERNEL --shapes 4096x8192,8192x8192 --dtypes bf16 [--arg NAME=VALUE]
                         [--grid G0,G1] [--target T] [--json] [--save OUT.json]
    nkitui perf profile PROFILE.json|DIR [--target T] [--json]
    nkitui perf compare A B [--target T] [--json]
    nkitui perf sol --kind matmul --in 8192x4096:bf16 --in 8192x8192:bf16 --out 4096x8192:bf16 [...]

Exit status: 0 success, 1 the kernel failed while being traced, 2 invalid input (the message names the file
or argument and the fix).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

from nkitui.common.names import DEFAULT_TARGET, TARGET_NAMES

TARGETS = TARGET_NAMES
TRACE_TIMEOUT_S = 600


def _sol_kinds() -> dict[str, str]:
    """The operations `sol` knows, with what each needs (shown by --help and in errors)."""
    from nkitui.perf.roofline import VECTOR_PASSES

    return {
        "matmul": "--in A[M,K] --in B[K,N] (--lhs-transposed: A given as [K,M])",
        "batched_matmul": "--in A[...,M,K] --in B[...,K,N]",
        "attention": "--in Q[...,S,D] --in K[...,Sk,D] --in V[...,Sk,Dv] (--causal halves the score work)",
        **{kind: "any inputs and outputs (vector passes per element)" for kind in VECTOR_PASSES},
        "copy": "bytes only", "transpose": "bytes only",
    }


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "perf", help="cost model: estimate a kernel or a saved trace, read a profiler export, compare two, "
                     "or a task's speed of light",
        description="Performance of NKI kernels: nkitui's cost model (estimates, with their uncertainty band), "
                    "Neuron profiler exports (measurements), A/B comparisons and the speed of light.",
        epilog="Exit status: 0 success, 1 the kernel failed while being traced, 2 invalid input.")
    cmds = parser.add_subparsers(dest="perf_command", metavar="ACTION")

    p = cmds.add_parser(
        "estimate", help="estimate a kernel (FILE.py::KERNEL, traced shape-only) or a saved emulator trace",
        description="Estimate how a kernel runs on a NeuronCore with nkitui's cost model. Give a saved trace "
                    "(`nkitui emu run ... --trace OUT.json`), or FILE.py::KERNEL with --shapes and --dtypes: the "
                    "kernel is then traced shape-only (no data, no numerics) in the confined child `nkitui emu "
                    "run` uses and estimated in one step. Every estimate carries the calibrated uncertainty band.",
        epilog="example: nkitui perf estimate matmul.py::matmul_kernel --shapes 8192x4096,8192x8192 "
               "--dtypes bf16 --target trn2")
    p.add_argument("source", metavar="TRACE.json|FILE.py::KERNEL",
                   help="a saved emulator trace, or a kernel file and the kernel's name")
    p.add_argument("--shapes", metavar="S1,S2,...",
                   help="shapes of the kernel's array arguments in order, comma-separated, each DIMxDIM... "
                        "(with FILE.py::KERNEL)")
    p.add_argument("--dtypes", metavar="D1,D2,...",
                   help="their dtypes: one for all or one per shape; bf16, fp16, fp32, fp8, int32, ... or numpy "
                        "names such as bfloat16 (default bf16)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="a non-array keyword argument of the kernel, as a Python literal (repeatable), e.g. "
                        "--arg eps=1e-5")
    p.add_argument("--grid", metavar="G0,G1", help="SPMD launch grid, e.g. 2 or 4,2 (with FILE.py::KERNEL)")
    _target(p, "NeuronCore generation to estimate on (default: the trace's own, else trn2)")
    p.add_argument("--timeout", type=float, default=TRACE_TIMEOUT_S, metavar="S",
                   help=f"seconds the kernel may take to trace (default {TRACE_TIMEOUT_S})")
    p.add_argument("--save", metavar="OUT.json", help="also write the estimate (a perf record) to OUT.json")
    _json(p)
    p.set_defaults(func=_estimate)

    p = cmds.add_parser("profile", help="read a Neuron profiler export (measured)",
                        description="Read a Neuron Explorer or neuron-profile export into a measured perf record.")
    p.add_argument("profile", metavar="PROFILE.json|DIR", help="summary-json / json export, or a directory with one")
    _target(p, "NeuronCore generation the profile was taken on (default: from the file, else trn2)")
    _json(p)
    p.set_defaults(func=_profile)

    p = cmds.add_parser(
        "compare", help="A/B of two runs: saved records, run results, traces or profiles",
        description="Compare two runs metric by metric. Each side is labelled estimated or measured exactly as "
                    "its record says; a warning says when the two are of different tasks, kernels or targets, "
                    "or when an estimate is compared with a measurement.")
    p.add_argument("a", metavar="A", help="a saved perf record, a run result JSON, a trace or a profiler export")
    p.add_argument("b", metavar="B", help="the same kinds as A")
    _target(p, "target for traces and profiles that do not say (records keep their own)")
    _json(p)
    p.set_defaults(func=_compare)

    from nkitui.task.dtypes import DTYPE_NAMES

    kinds = _sol_kinds()
    grouped: dict[str, list[str]] = {}
    for kind, takes in kinds.items():
        grouped.setdefault(takes, []).append(kind)
    listing = "; ".join(f"{', '.join(names)}: {takes}" for takes, names in grouped.items())
    p = cmds.add_parser("sol", help="speed of light of a task's shapes (a lower bound, not a measurement)",
                        description="The least time any kernel can take for an operation's shapes and dtypes on a "
                                    "target: the larger of the TensorE, vector and HBM bounds.",
                        epilog=f"kinds: {listing}. Dtypes: {', '.join(DTYPE_NAMES)}, or bf16, fp16, fp32.")
    p.add_argument("--kind", required=True, choices=tuple(kinds), metavar="KIND",
                   help=f"the operation: {', '.join(kinds)} (what each takes: see below)")
    p.add_argument("--in", dest="inputs", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="an input, e.g. 8192x4096:bf16 (repeatable, in order)")
    p.add_argument("--out", dest="outputs", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="an output, e.g. 4096x8192:bf16 (repeatable)")
    p.add_argument("--lhs-transposed", action="store_true", help="matmul: the first input is given as [K, M]")
    p.add_argument("--causal", action="store_true", help="attention: causal mask (half the score work)")
    p.add_argument("--target", choices=TARGETS, default=DEFAULT_TARGET, help=f"NeuronCore generation (default {DEFAULT_TARGET})")
    _json(p)
    p.set_defaults(func=_sol)
    parser.set_defaults(func=lambda args: _usage(parser))


def _target(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--target", choices=TARGETS, help=text)


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _run(args, body) -> int:
    from nkitui.perf.loading import PerfInputError
    from nkitui.perf.profiles import ProfileError

    try:
        return int(body(args) or 0)
    except (PerfInputError, ProfileError, ValueError) as exc:
        print(f"nkitui perf {args.perf_command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`... | head`): keep Python's exit-time flush from failing on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _estimate(args) -> int:
    return _run(args, _estimate_body)


def _estimate_body(args) -> int:
    from nkitui.perf.estimate import estimate
    from nkitui.perf.loading import PerfInputError, read_json, trace_from_json
    from nkitui.perf.report import render_record

    if "::" in args.source or args.source.endswith(".py"):
        trace = trace_kernel(args)
        if isinstance(trace, int):
            return trace
        rec = estimate(trace, args.target or DEFAULT_TARGET)
    else:
        if args.shapes or args.dtypes or args.arg or args.grid:
            raise PerfInputError(f"{args.source}: --shapes, --dtypes, --arg and --grid go with FILE.py::KERNEL, not "
                                 "with a saved trace")
        rec = estimate(trace_from_json(read_json(args.source), args.source), args.target)
    if args.save:
        try:
            Path(args.save).write_text(json.dumps(rec.to_json()), encoding="utf-8")
        except OSError as exc:
            raise PerfInputError(f"--save {args.save}: cannot write ({exc.strerror or exc})") from None
    print(json.dumps(rec.to_json()) if args.json else render_record(rec))
    return 0


def _kernel_args(args) -> tuple[list[dict], dict]:
    from nkitui.perf.loading import PerfInputError, dtype_name, parse_shape

    if not args.shapes:
        raise PerfInputError(f"{args.source}: give the array arguments' shapes with --shapes, e.g. "
                             "--shapes 4096x8192,8192x8192")
    shapes = [parse_shape(s, f"--shapes {args.shapes!r}") for s in args.shapes.split(",")]
    dtypes = [d for d in (args.dtypes or "bf16").split(",") if d.strip()]
    if len(dtypes) == 1:
        dtypes = dtypes * len(shapes)
    if len(dtypes) != len(shapes):
        raise PerfInputError(f"--dtypes {args.dtypes!r}: give one dtype for all shapes or one per shape "
                             f"({len(shapes)} shapes, {len(dtypes)} dtypes)")
    specs = [{"shape": list(s), "dtype": dtype_name(d, f"--dtypes {args.dtypes!r}")} for s, d in zip(shapes, dtypes)]
    kwargs = {}
    for item in args.arg:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise PerfInputError(f"--arg {item!r}: write NAME=VALUE, e.g. --arg eps=1e-5")
        try:
            kwargs[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise PerfInputError(f"--arg {item!r}: the value must be a Python literal (a number, string, "
                                 "True/False or a tuple)") from None
    return specs, kwargs


def trace_kernel(args):
    """Trace FILE.py::KERNEL shape-only in the confined child of `nkitui emu run`; the Trace, or an exit status
    after printing why not."""
    from nkitui.cli.emu import KernelFailed, UsageError, trace_shape_only
    from nkitui.perf.loading import PerfInputError

    path, sep, name = args.source.rpartition("::")
    if not sep or not path or not name:
        raise PerfInputError(f"bad kernel spec {args.source!r}: expected FILE.py::KERNEL, e.g. kernels/mm.py::mm")
    file = Path(path)
    if not file.is_file():
        raise PerfInputError(f"kernel file {path} does not exist")
    if file.suffix != ".py":
        raise PerfInputError(f"kernel file {path} is not a Python file (.py)")
    if not name.isidentifier():
        raise PerfInputError(f"bad kernel name {name!r} in {args.source!r}: it must be a Python identifier")
    grid: list[int] = []
    if args.grid:
        try:
            grid = [int(x) for x in args.grid.split(",")]
        except ValueError:
            raise PerfInputError(f"--grid {args.grid!r}: expected positive integers such as 2 or 4,2") from None
        if not grid or min(grid) < 1:
            raise PerfInputError(f"--grid {args.grid!r}: grid sizes must be positive integers")
    if not (0 < args.timeout <= 86400):
        raise PerfInputError(f"--timeout {args.timeout:g}: give a number of seconds between 1 and 86400")
    specs, kwargs = _kernel_args(args)
    try:
        return trace_shape_only(file, name, grid, args.target or DEFAULT_TARGET, specs, kwargs, timeout_s=args.timeout)
    except UsageError as e:
        raise PerfInputError(str(e)) from None
    except KernelFailed as e:
        print(f"nkitui perf estimate: tracing {args.source} failed: {e}", file=sys.stderr)
        return 1


def _profile(args) -> int:
    def body(args) -> int:
        from nkitui.perf.profiles import load_profile
        from nkitui.perf.report import render_record

        rec = load_profile(args.profile, target=args.target)
        print(json.dumps(rec.to_json()) if args.json else render_record(rec))
        return 0
    return _run(args, body)


def _compare(args) -> int:
    def body(args) -> int:
        from nkitui.perf.compare import compare
        from nkitui.perf.loading import load_side
        from nkitui.perf.report import render_comparison

        a, b = load_side(args.a, args.target), load_side(args.b, args.target)
        c = compare(a.record, b.record, a_task=a.task, b_task=b.task)
        print(json.dumps(c.to_json()) if args.json else render_comparison(c))
        return 0
    return _run(args, body)


def _sol(args) -> int:
    def body(args) -> int:
        from nkitui.perf.loading import PerfInputError, tensor_spec
        from nkitui.perf.report import render_sol
        from nkitui.perf.roofline import minimal_work, speed_of_light_for

        ins = [tensor_spec(x, "--in") for x in args.inputs]
        outs = [tensor_spec(x, "--out") for x in args.outputs]
        try:
            work = minimal_work(args.kind, ins, outs, lhs_transposed=args.lhs_transposed, causal=args.causal)
        except ValueError as exc:  # the cost model's complaint about the kind's inputs, in the command's words
            import re

            text = re.sub(r"^minimal_work(\([^)]*\))?:\s*", "", str(exc))
            raise PerfInputError(f"--kind {args.kind}: {text} (it takes "
                                 f"{_sol_kinds().get(args.kind, 'inputs and outputs')})") from None
        sol = speed_of_light_for(work, args.target)
        print(json.dumps(sol.to_json()) if args.json else render_sol(sol))
        return 0
    return _run(args, body)

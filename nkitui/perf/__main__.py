"""Command line of the cost model: `python -m nkitui.perf COMMAND ...`.

    estimate TRACE.json [--target T] [--json]         a saved emulator trace (Trace.to_json) -> estimate
    profile PROFILE.json|DIR [--target T] [--json]    a profiler export -> measured record
    compare A B [--json]                              A/B of two records, traces or profiles
    sol --kind matmul --in 8192x4096:bfloat16 --in 8192x8192:bfloat16 --out 4096x8192:bfloat16
        [--lhs-transposed] [--causal] [--target T] [--json]    speed of light of a task's shapes

Exit status: 0 success, 2 invalid input (the message names the file or argument).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from nkitui.emulator.trace import TRACE_VERSION, Instruction, Trace
from nkitui.perf.compare import compare
from nkitui.perf.estimate import estimate
from nkitui.perf.hardware import itemsize
from nkitui.perf.profiles import ProfileError, load_profile, parse_profile
from nkitui.perf.report import render_comparison, render_record, render_sol
from nkitui.perf.roofline import VECTOR_PASSES, minimal_work, speed_of_light_for
from nkitui.perf.summary import PerfRecord
from nkitui.task.dtypes import DTYPE_NAMES, canonical_dtype_name

# The operations `sol` knows, with what each needs (shown by --help and in errors).
SOL_KINDS: dict[str, str] = {
    "matmul": "--in A[M,K] --in B[K,N] (--lhs-transposed: A given as [K,M])",
    "batched_matmul": "--in A[...,M,K] --in B[...,K,N]",
    "attention": "--in Q[...,S,D] --in K[...,Sk,D] --in V[...,Sk,Dv] (--causal halves the score work)",
    **{kind: "any inputs and outputs (vector passes per element)" for kind in VECTOR_PASSES},
    "copy": "bytes only", "transpose": "bytes only",
}
TARGET_NAMES = ("trn1", "trn2", "trn3")


class UsageError(ValueError):
    pass


_ROW_FIELDS = len(Instruction(0, "", "", 0, 0, (), "", (), "").to_row())


def _read_json(path: str) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from exc


_RECORD_HINT = "save one with Trace.to_json() (e.g. json.dump(trace.to_json(), f))"


def trace_from_json(data: Any, path: str) -> Trace:
    """A Trace from decoded JSON; UsageError naming the file and the field when it is not one."""
    if not isinstance(data, dict) or "instructions" not in data:
        kind = "a JSON " + type(data).__name__ if not isinstance(data, dict) else "an object without 'instructions'"
        raise UsageError(f"{path}: not an emulator trace ({kind}); {_RECORD_HINT}; "
                         "for a profiler export use `perf profile`")
    version = data.get("version")
    if version not in (1, TRACE_VERSION):
        raise UsageError(f"{path}: field 'version' is {version!r}, this nkitui reads trace versions 1 and "
                         f"{TRACE_VERSION}; record the trace again with this nkitui")
    rows = data["instructions"]
    if not isinstance(rows, list):
        raise UsageError(f"{path}: field 'instructions' is a JSON {type(rows).__name__}, expected a list of rows")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != _ROW_FIELDS:
            got = f"{len(row)} fields" if isinstance(row, list) else f"a JSON {type(row).__name__}"
            raise UsageError(f"{path}: instructions[{i}] has {got}, expected a row of {_ROW_FIELDS} "
                             f"(Instruction.to_row); {_RECORD_HINT}")
    try:
        return Trace.from_json(data)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: not a valid emulator trace ({type(exc).__name__}: {exc}); {_RECORD_HINT}") from exc


def load_any(path: str, target: str | None = None) -> PerfRecord:
    """A PerfRecord from a saved record, a saved trace (estimated) or a profiler export (measured)."""
    if Path(path).is_dir():
        return load_profile(path, target=target)
    data = _read_json(path)
    if isinstance(data, dict) and "source" in data and "engines" in data:
        try:
            return PerfRecord.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{path}: not a valid saved record ({exc}); save it again with this nkitui "
                             "(`nkitui perf estimate ... --json` or PerfRecord.to_json())") from exc
    if isinstance(data, dict) and "instructions" in data and "storages" in data:
        return estimate(trace_from_json(data, path), target)
    return parse_profile(data, source_name=path, target=target, kernel=Path(path).stem)


def _tensor(spec: str, flag: str) -> tuple[tuple[int, ...], str]:
    shape_text, _, dtype = spec.partition(":")
    try:
        shape = tuple(int(x) for x in shape_text.lower().split("x"))
    except ValueError:
        raise UsageError(f"{flag} {spec!r}: write shapes as DIMxDIM[:dtype], e.g. 4096x8192:bfloat16") from None
    dtype = dtype or "bfloat16"
    # the app's names (bf16, fp32 ...) as well as the manifest's (bfloat16, float32 ...)
    dtype = canonical_dtype_name(dtype.lower()) or dtype
    try:
        itemsize(dtype)
    except ValueError:
        raise UsageError(f"{flag} {spec!r}: unknown dtype {dtype!r}; use one of {', '.join(DTYPE_NAMES)} "
                         "(or bf16, fp16, fp32)") from None
    return shape, dtype


def _work_problem(kind: str, exc: ValueError) -> str:
    """The cost model's complaint about a kind's inputs, in the command's own words."""
    text = re.sub(r"^minimal_work(\([^)]*\))?:\s*", "", str(exc))
    return f"--kind {kind}: {text} (it takes {SOL_KINDS.get(kind, 'inputs and outputs')})"


def main(argv: list[str] | None = None, prog: str = "python -m nkitui.perf") -> int:
    args = build_parser(prog).parse_args(argv)
    return _run(args)


def build_parser(prog: str = "python -m nkitui.perf") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="nkitui's cost model: estimates from emulator traces, "
                                 "measured profiles, A/B comparisons and a task's speed of light")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    target_help = f"hardware generation ({', '.join(TARGET_NAMES)}; default: the one recorded, else trn2)"
    json_help = "print the record as JSON instead of text"
    p = sub.add_parser("estimate", help="estimate a saved emulator trace",
                       description="Run the cost model on an emulator trace saved with Trace.to_json().")
    p.add_argument("trace", metavar="TRACE.json", help="the saved emulator trace")
    p.add_argument("--target", choices=TARGET_NAMES, help=target_help)
    p.add_argument("--json", action="store_true", help=json_help)
    p = sub.add_parser("profile", help="read a profiler export",
                       description="Parse a Neuron profiler export (Neuron Explorer or neuron-profile JSON) into "
                                   "a measured record.")
    p.add_argument("profile", metavar="PROFILE", help="the profiler's JSON export, or a folder holding one")
    p.add_argument("--target", choices=TARGET_NAMES, help=target_help)
    p.add_argument("--json", action="store_true", help=json_help)
    p = sub.add_parser("compare", help="A/B of two records, traces or profiles",
                       description="Compare two runs' performance (B against A): each a saved record, an emulator "
                                   "trace or a profiler export.")
    p.add_argument("a", metavar="A", help="the baseline: a saved record, trace or profiler export")
    p.add_argument("b", metavar="B", help="the run compared with it")
    p.add_argument("--target", choices=TARGET_NAMES, help=target_help)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of text")
    grouped: dict[str, list[str]] = {}
    for kind, takes in SOL_KINDS.items():
        grouped.setdefault(takes, []).append(kind)
    kinds = "; ".join(f"{', '.join(names)}: {takes}" for takes, names in grouped.items())
    p = sub.add_parser("sol", help="speed of light of a task's shapes",
                       description="The least time any kernel can take for an operation's shapes and dtypes on "
                                   "a target: the larger of the TensorE, vector and HBM bounds.",
                       epilog=f"kinds: {kinds}. Dtypes: {', '.join(DTYPE_NAMES)}, or bf16, fp16, fp32.")
    p.add_argument("--kind", required=True, choices=tuple(SOL_KINDS), metavar="KIND",
                   help=f"the operation: {', '.join(SOL_KINDS)} (what each takes: see below)")
    p.add_argument("--in", dest="inputs", action="append", default=[], metavar="SHAPE:DTYPE",
                   help="an input, e.g. 4096x8192:bf16 (repeat for each input, in order)")
    p.add_argument("--out", dest="outputs", action="append", default=[], metavar="SHAPE:DTYPE",
                   help="an output, e.g. 4096x8192:float32 (repeat for each output)")
    p.add_argument("--lhs-transposed", action="store_true", help="matmul: A is given as [K, M] (TensorE's layout)")
    p.add_argument("--causal", action="store_true", help="attention: causal mask (half the score work)")
    p.add_argument("--target", default="trn2", choices=TARGET_NAMES, help="hardware generation (default trn2)")
    p.add_argument("--json", action="store_true", help="print the bound as JSON instead of text")
    return ap


def _run(args: argparse.Namespace) -> int:
    try:
        if args.cmd == "estimate":
            rec = estimate(trace_from_json(_read_json(args.trace), args.trace), args.target)
            print(json.dumps(rec.to_json()) if args.json else render_record(rec))
        elif args.cmd == "profile":
            rec = load_profile(args.profile, target=args.target)
            print(json.dumps(rec.to_json()) if args.json else render_record(rec))
        elif args.cmd == "compare":
            c = compare(load_any(args.a, args.target), load_any(args.b, args.target))
            print(json.dumps(c.to_json()) if args.json else render_comparison(c))
        else:
            ins = [_tensor(x, "--in") for x in args.inputs]
            outs = [_tensor(x, "--out") for x in args.outputs]
            try:
                work = minimal_work(args.kind, ins, outs, lhs_transposed=args.lhs_transposed, causal=args.causal)
            except ValueError as exc:
                raise UsageError(_work_problem(args.kind, exc)) from None
            sol = speed_of_light_for(work, args.target)
            print(json.dumps(sol.to_json()) if args.json else render_sol(sol))
    except (UsageError, ProfileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`... | head`): not an error of ours; keep Python's exit-time flush of
        # stdout from failing again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

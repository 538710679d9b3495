"""How many terms one output element can sum: the bound a declared `reduction_length` is held to.

task.toml's `reduction_length` (K) sets how much accumulation error the numerics expect: precision
isolation, the trials, the goldens and the tolerance advice all grow their allowance with sqrt(K).
A K larger than the kernel can possibly accumulate loosens every one of them unseen, so a declared K
is never taken on faith where evidence exists:

* **the shapes**: an output element cannot sum more terms than the largest input holds. (The product of
  an input's dimensions absent from the output is tighter, but unsound: a square matmul's output has
  its inputs' shape, so no dimension is "absent".)
* **the instruction trace** of the first seed's run: every storage carries how many input terms one of
  its elements can hold, and each instruction passes that on. An element-wise instruction adds its
  operands' counts; one that reads more elements than it writes (reductions, partition reductions,
  activations with an accumulator) multiplies each operand's count by the ratio; a matmul sums its
  contraction (K partitions) of products; a scan sums its whole free axis; whatever lands in PSUM or is
  written where it is also read accumulates onto what was there. Counts are kept per storage (the
  largest over its elements), so the bound is an upper one: coarse, never below what the kernel did.
  The trace is the kernel process's own report; it can only tighten the shapes' bound, never lift it.

`bound_outputs` applies the bound: an output whose declared K exceeds it is judged with the bound and
gets NUM-K-EXCEEDS-BOUND; a declared K within the bound but far above what the shapes suggest gets
the softer NUM-K-ABOVE-INFERRED (a convolution, a scan or a custom reduction may mean it).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from nkitui.common.codec import Record
from nkitui.common.findings import Finding
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import infer_reduction_length
from nkitui.evaluate.numerics.findings import numerics_finding
from nkitui.task.model import TensorSpec

MANIFEST = "task.toml"
ABOVE_INFERRED = 16  # a declared K this many times the inferred one (within the bound) gets a note
SCAN_OPCODES = ("tensor_tensor_scan", "tensor_scalar_cumulative")
MATMUL_OPCODES = ("nc_matmul", "nc_matmul_mx")


@dataclass(frozen=True)
class TraceBound(Record):
    """The most input terms any element the kernel wrote to HBM can hold, and where that count was made."""

    terms: int
    location: str = ""  # file:line of the instruction that made the largest count
    opcode: str = ""


@dataclass(frozen=True)
class KBound(Record):
    """One output's declared K held to the evidence."""

    output: str
    declared: int | None
    inferred: int
    shape_bound: int
    trace_bound: int | None
    bound: int
    used: int | None  # the K the numerics use: the declared one, or the bound (None: inferred as before)
    why: str


def shape_bound(input_shapes: Mapping[str, Sequence[int]]) -> tuple[int, str]:
    """The largest input's element count: more terms than that cannot meet in one element."""
    if not input_shapes:
        return 1, "the task has no inputs"
    name = max(input_shapes, key=lambda k: (math.prod(input_shapes[k]), k))
    n = max(1, math.prod(int(d) for d in input_shapes[name]))
    return n, f"the largest input, `{name}` {list(input_shapes[name])}, holds {n} elements"


def _itemsize(dtype: str) -> int:
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        from nkitui.evaluate.numerics.fpformat import format_name

        try:  # ml_dtypes' names (bfloat16, float8_*) through the formats' table
            import ml_dtypes

            return int(np.dtype(getattr(ml_dtypes, str(format_name(dtype)))).itemsize)
        except (AttributeError, TypeError, ValueError):
            return 1  # unknown: counting bytes as elements only loosens the bound


def _elements(access: Any, itemsize: int) -> int:
    rows, width = int(access[3]) - int(access[2]), int(access[5]) - int(access[4])
    return max(1, rows * max(1, width // max(1, itemsize)))


def trace_bound(trace: Any) -> TraceBound | None:
    """The bound from a Trace (emulator/trace.py, read duck-typed); None when it holds no HBM write."""
    terms: dict[int, float] = {}
    best, where, opcode = 0.0, "", ""
    sizes: dict[str, int] = {}
    for ins in getattr(trace, "instructions", ()):
        writes = ins.writes
        if not writes:
            continue
        reads = ins.reads
        counts = [terms.get(a[0], 1.0) for a in reads]
        op = ins.opcode
        if op in MATMUL_OPCODES and len(reads) >= 2:
            k = max(1, int(ins.partitions), int((ins.meta or {}).get("K") or 0))
            made = [k * (counts[0] + counts[1])]
        elif op in SCAN_OPCODES:
            made = [max(1, int(ins.free)) * (sum(counts) or 1.0)]
        else:
            in_sizes = []
            for dt in ins.in_dtypes:
                if dt not in sizes:
                    sizes[dt] = _itemsize(dt)
                in_sizes.append(sizes[dt])
            out_dt = ins.out_dtype
            if out_dt not in sizes:
                sizes[out_dt] = _itemsize(out_dt) if out_dt else 1
            made = []
            for w in writes:
                n_w = _elements(w, sizes[out_dt])
                rows_w = max(1, int(w[3]) - int(w[2]))
                total = 0.0
                for i, a in enumerate(reads):
                    n_r = _elements(a, in_sizes[i] if i < len(in_sizes) else 1)
                    # reading more than it writes, it reduces: an element written may depend on everything read
                    # into its partition (bn_stats writes 6 statistics per partition, each over the whole row)
                    ratio = max(n_r / n_w, n_r / rows_w) if n_r > n_w else 1.0
                    total += counts[i] * ratio
                made.append(total or 1.0)
        for j, w in enumerate(writes):
            t = made[j] if j < len(made) else made[-1]
            st = w[0]
            if w[1] == "psum" and not any(a[0] == st for a in reads):
                t += terms.get(st, 0.0)  # PSUM accumulates onto what it held (a read of it is counted above)
            if t > terms.get(st, 1.0):
                terms[st] = t
            if w[1] == "hbm" and t > best:
                best, where, opcode = t, ins.location, op
    if best <= 0:
        return None
    return TraceBound(int(min(best, 2**62)), where, opcode)


@dataclass(frozen=True)
class BoundedOutput(TensorSpec):
    """An output spec whose declared K was held to its bound: `reduction_length` is the bound, and the advice's
    reasoning (advisor.reduction_length_for) says where it came from."""

    declared_reduction_length: int | None = None


def _with_k(spec: Any, k: int, declared: int) -> Any:
    if isinstance(spec, TensorSpec):
        values = {f.name: getattr(spec, f.name) for f in dataclasses.fields(TensorSpec)}
        return BoundedOutput(**{**values, "reduction_length": k}, declared_reduction_length=declared)
    clone = copy.copy(spec)  # a plain holder of the same fields
    object.__setattr__(clone, "reduction_length", k)
    return clone


def bound_outputs(
    outputs: Sequence[Any],
    inputs: Mapping[str, np.ndarray],
    op: str | None,
    trace: TraceBound | None = None,
    manifest: str = MANIFEST,
) -> tuple[list[Any], list[KBound], list[Finding]]:
    """The output specs with every declared K held to its bound, what was decided, and the findings."""
    shapes = {n: tuple(int(d) for d in np.shape(a)) for n, a in inputs.items()}
    s_bound, s_why = shape_bound(shapes)
    bounded: list[Any] = []
    decisions: list[KBound] = []
    findings: list[Finding] = []
    for spec in outputs:
        declared = getattr(spec, "reduction_length", None)
        inferred, inferred_why = infer_reduction_length(shapes, tuple(spec.shape), op)
        bound, why = s_bound, s_why
        if trace is not None and trace.terms < bound:
            bound = trace.terms
            why = (f"the kernel's instructions accumulate at most {trace.terms} input term(s) into one element of "
                   f"its outputs (largest count made by {trace.opcode} at {trace.location or '?'}); {s_why}")
        if not declared:
            bounded.append(spec)
            decisions.append(KBound(spec.name, None, inferred, s_bound, trace.terms if trace else None, bound, None, why))
            continue
        declared = int(declared)
        field = f"[[outputs]] `{spec.name}` reduction_length"
        if declared > bound:
            bounded.append(_with_k(spec, bound, declared))
            decisions.append(KBound(spec.name, declared, inferred, s_bound, trace.terms if trace else None, bound, bound, why))
            findings.append(numerics_finding(
                rules.K_EXCEEDS_BOUND, "high",
                f"{manifest}: `{spec.name}` declares K = {declared}, more than it can sum",
                f"{manifest} {field} = {declared} declares that each element of output `{spec.name}` accumulates "
                f"{declared} terms, but {why}, so no element can sum more than {bound}. A larger K grows the "
                f"accumulation error every check allows (precision isolation, trials, goldens, the tolerance advice) "
                f"by sqrt(K), about {math.sqrt(declared / bound):.0f}x here: nkitui judged `{spec.name}` with K = {bound}. "
                f"Fix: set reduction_length to the length of the sum behind one element (nkitui infers {inferred} "
                f"from the shapes: {inferred_why}), or remove it to use that.",
                {"output": spec.name, "file": manifest, "field": "reduction_length", "declared": declared,
                 "bound": bound, "shape_bound": s_bound, "trace_bound": trace.terms if trace else None,
                 "inferred": inferred, "used": bound},
                file=manifest,
            ))
            continue
        bounded.append(spec)
        decisions.append(KBound(spec.name, declared, inferred, s_bound, trace.terms if trace else None, bound, declared, why))
        if declared >= ABOVE_INFERRED * max(1, inferred):
            findings.append(numerics_finding(
                rules.K_ABOVE_INFERRED, "low",
                f"{manifest}: `{spec.name}` declares K = {declared}, {declared // max(1, inferred)}x what the shapes suggest",
                f"{manifest} {field} = {declared} is within what the kernel can sum (at most {bound}: {why}) but "
                f"{declared // max(1, inferred)}x the K nkitui infers from the shapes ({inferred}: {inferred_why}). "
                f"A convolution, a scan or a custom reduction can mean it; otherwise it loosens the accumulation error "
                f"every check allows by about {math.sqrt(declared / max(1, inferred)):.0f}x. Check that one element "
                f"of `{spec.name}` really sums {declared} terms.",
                {"output": spec.name, "file": manifest, "field": "reduction_length", "declared": declared,
                 "bound": bound, "inferred": inferred, "used": declared},
                file=manifest,
            ))
    return bounded, decisions, findings

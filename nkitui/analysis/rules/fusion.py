"""Chains of single-op instructions that one `activation` or `tensor_scalar` would do (nki-spec §4.1, §7.1)."""

from __future__ import annotations

from collections.abc import Iterator

from nkitui.analysis.nki_model import KernelModel, Op
from nkitui.analysis.rules.base import RuleInput, RuleSpec, lines_phrase
from nkitui.common.findings import Finding

UNFUSED_CHAIN = RuleSpec(
    id="NKI-UNFUSED-CHAIN",
    title="Chain of single-op instructions that one activation / tensor_scalar would fuse",
    category="performance",
    severity="low",
    summary=(
        "Consecutive instructions each apply one operation to the previous one's result: multiply/add by a "
        "scalar or per-partition value followed by exp/tanh/..., two scalar ALU ops in a row, or an activation "
        "followed by a free-axis sum. ScalarE's `activation` computes f(x*scale + bias) and can sum along the "
        "free axis in the same pass, and `tensor_scalar` applies two ALU ops for the cost of one; every "
        "separate instruction streams the whole tile again (PERF: fusing multiply, add and exp is ~3x faster). "
        "Low for two instructions, medium for three or more."
    ),
)

_SCALE = {"multiply", "divide"}
_BIAS = {"add", "subtract"}
_MINMAX = {"maximum", "minimum"}


def _column(km: KernelModel, op: Op, index: int) -> bool:
    if index >= len(op.reads):
        return False
    return op.reads[index].free == 1


def _token(km: KernelModel, op: Op) -> str | None:
    if op.kind in ("elementwise", "tensor_scalar") and op.alu in _SCALE | _BIAS | _MINMAX:
        if op.kind == "tensor_scalar" and "op1" in op.kwargs:
            return None
        n = len(op.inputs)
        scalar_like = (n == 1 and (op.scalars or op.kind == "tensor_scalar")) or (
            n == 2 and (_column(km, op, 1) or _column(km, op, 0)))
        if not scalar_like:
            return None
        return "S" if op.alu in _SCALE else "B" if op.alu in _BIAS else "M"
    if op.kind == "activation_fn" and op.fn:
        return "A"
    if op.kind == "activation" and op.fn and "_has_scale" not in op.kwargs and "_has_bias" not in op.kwargs \
            and "reduce_res" not in op.kwargs:
        return "A"
    if op.kind == "reduce" and (op.api == "nl.sum" or op.alu == "add"):
        axis = op.kwargs.get("axis", "")
        if axis.strip() in ("0", "[0]", "(0,)"):
            return None
        return "R"
    return None


def _match(tokens: list[str]) -> tuple[int, str]:
    """Length of the longest fusible prefix and the instruction that fuses it."""
    best = (0, "")
    i = 0
    alu = 0
    while i < len(tokens) and tokens[i] in ("S", "B") and alu < 2:
        i += 1
        alu += 1
    if i < len(tokens) and tokens[i] == "A":
        end = i + 1
        if end < len(tokens) and tokens[end] == "R":
            end += 1
        if end >= 2:
            best = (end, "activation")
    if len(tokens) >= 2 and tokens[0] in "SBM" and tokens[1] in "SBM" and best[0] < 2:
        best = (2, "tensor_scalar")
    return best


def _advice(kind: str, ops: list[Op], tokens: list[str]) -> str:
    if kind == "activation":
        fn = next((op.fn for op in ops if op.fn), "f")
        parts = []
        if "S" in tokens:
            parts.append("scale=<the multiplier>")
        if "B" in tokens:
            parts.append("bias=<the (P,1) offset>")
        if "R" in tokens:
            parts.append("reduce_op=nl.add, reduce_res=<(P,1) sum tile>")
        args = ", ".join([f"op=nl.{fn}", "data=<input tile>"] + parts)
        return (f"one `nisa.activation({args})` computes {fn}(x*scale + bias)"
                f"{' and its free-axis sum' if 'R' in tokens else ''} in a single ScalarE pass")
    return ("one `nisa.tensor_scalar(data, op0=..., operand0=..., op1=..., operand1=...)` applies both ALU ops "
            "for the cost of one instruction")


def check_chains(inp: RuleInput, km: KernelModel) -> Iterator[Finding]:
    readers: dict[int, int] = {}
    for op in km.ops:
        for tid in set(op.inputs):
            readers[tid] = readers.get(tid, 0) + 1
    ops = [op for op in km.ops if op.engine is not None]
    tokens = {op.id: _token(km, op) for op in ops}
    consumer: dict[int, Op] = {}
    for op in ops:
        for tid in op.inputs:
            consumer.setdefault(tid, op)
    used: set[int] = set()
    for op in ops:
        if op.id in used or tokens[op.id] is None:
            continue
        chain = [op]
        while True:
            last = chain[-1]
            if last.result is None or readers.get(last.result, 0) != 1:
                break
            nxt = consumer.get(last.result)
            if nxt is None or tokens.get(nxt.id) is None or nxt.loops != last.loops or nxt.id in used:
                break
            chain.append(nxt)
        start = 0
        while start < len(chain) - 1:
            toks = [tokens[o.id] or "" for o in chain[start:]]
            length, kind = _match(toks)
            if length < 2:
                start += 1
                continue
            part = chain[start:start + length]
            used.update(o.id for o in part)
            lines = [o.line for o in part]
            names = " -> ".join(f"`{o.api.split('.', 1)[-1]}`" for o in part)
            severity = "medium" if length >= 3 else "low"
            yield inp.finding(
                UNFUSED_CHAIN, severity=severity,
                title=f"{length} single-op instructions could be one {kind} ({lines_phrase(lines)})",
                line=min(lines), end_line=max(lines),
                message=(
                    f"{lines_phrase(lines).capitalize()} apply {names} one after another, each to the previous "
                    f"result (`{part[0].text}` ...). Every instruction streams the whole tile through an engine "
                    "again (about N cycles for N elements per partition, plus ~64-100 cycles of fixed cost); "
                    f"{_advice(kind, part, toks[:length])}. The performance guide measures fusing multiply, add "
                    "and exp into one activation as ~3x faster than three instructions."
                ),
                data={"lines": lines, "fused": kind},
            )
            start += length


SPECS = [UNFUSED_CHAIN]
CHECKS = [check_chains]

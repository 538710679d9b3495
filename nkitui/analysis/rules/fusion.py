"""Chains of single-op instructions that one `activation` or `tensor_scalar` would do (nki-spec §4.1, §7.1)."""

from __future__ import annotations

from collections.abc import Iterator

from nkitui.analysis.nki.model import KernelModel, Op
from nkitui.analysis.rules.phrases import cap, lines_phrase
from nkitui.analysis.rules.registry import RuleSpec, rule
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding, Severity

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
        "Also reports groups of instructions that together compute an element-wise function of one tile (e.g. "
        "GELU written out as ten nl.* calls). Low for two instructions (or a group of 3-4), medium for chains of "
        "three or more, groups of five or more, and groups that match a ScalarE activation function."
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


_ISLAND_KINDS = {"elementwise", "activation_fn", "activation", "tensor_scalar", "tensor_tensor",
                 "scalar_tensor_tensor", "reciprocal"}
ISLAND_MIN = 3  # instructions computing a function of one tile, from which a fused form is worth a finding


def _produced(km: KernelModel, op: Op) -> int | None:
    if op.result is not None:
        return op.result
    if len(op.writes) == 1:
        t = km.root(op.writes[0].tensor)
        writers = [o for o in km.ops if any(km.root(a.tensor).id == t.id for a in o.writes) or o.result == t.id]
        if len(writers) == 1 and t.on_chip:
            return t.id
    return None


def _is_column(km: KernelModel, tid: int) -> bool:
    return km.root(tid).free == 1


def _recognise(ops: list[Op]) -> str | None:
    fns = {op.fn for op in ops if op.fn}
    consts = [float(v) for op in ops for v in op.scalars if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if "tanh" in fns and any(abs(c - 0.044715) < 1e-4 or abs(c - 0.7978845608) < 1e-4 for c in consts):
        return "gelu_apprx_tanh"
    if "erf" in fns:
        return "gelu"
    if "exp" in fns and "log" in fns:
        return "softplus"
    if "exp" in fns and ({op.kind for op in ops} & {"reciprocal"} or any(op.alu == "divide" for op in ops)):
        return "sigmoid"
    return None


def _islands(km: KernelModel) -> list[tuple[list[Op], int]]:
    """Groups of >= 3 element-wise instructions that together compute a function of one tile."""
    cands = [op for op in km.ops if op.kind in _ISLAND_KINDS and op.engine is not None]
    by_id = {op.id: op for op in cands}
    produced = {op.id: _produced(km, op) for op in cands}
    producer_of = {tid: op_id for op_id, tid in produced.items() if tid is not None}
    readers: dict[int, list[Op]] = {}
    for op in km.ops:
        for tid in {km.root(i).id for i in op.inputs}:
            readers.setdefault(tid, []).append(op)
    downstream: dict[int, list[int]] = {}
    for op in cands:
        result = produced[op.id]
        if result is None:
            continue
        downstream[op.id] = [r.id for r in readers.get(result, []) if r.id in by_id and r.loops == op.loops]

    def closure(root_id: int) -> list[int]:
        seen: list[int] = []
        todo = list(downstream.get(root_id, []))
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.append(x)
            todo.extend(downstream.get(x, []))
        return seen

    def externals(ids: set[int]) -> set[int]:
        out: set[int] = set()
        for x in ids:
            for i in by_id[x].inputs:
                root = km.root(i).id
                if producer_of.get(root) in ids or _is_column(km, root):
                    continue
                out.add(root)
        return out

    def exits(ids: set[int]) -> list[int]:
        """Members whose result leaves the group (a group computes one value)."""
        out = []
        for x in ids:
            tid_x = produced[x]
            users = readers.get(tid_x, []) if tid_x is not None else []
            if not users or any(u.id not in ids for u in users):
                out.append(x)
        return out

    found: list[tuple[list[Op], int]] = []
    taken: set[int] = set()
    roots: list[int] = []
    for op in km.ops:
        for i in op.inputs:
            root = km.root(i).id
            if root not in roots and any(r.id in by_id for r in readers.get(root, [])):
                roots.append(root)
    for tid in roots:
        if _is_column(km, tid):
            continue
        first = [r for r in readers.get(tid, []) if r.id in by_id and r.id not in taken]
        if not first:
            continue
        starts = [r.id for r in first if r.loops == first[0].loops]
        ids: set[int] = set(starts)
        for x in starts:
            ids.update(y for y in closure(x) if y not in taken)
        # Keep only members whose tile inputs come from `tid` or from other members.
        while True:
            extra = {x for x in ids if any(km.root(i).id != tid and producer_of.get(km.root(i).id) not in ids
                                           and not _is_column(km, km.root(i).id) for i in by_id[x].inputs)}
            if not extra:
                break
            ids -= extra
            reach: set[int] = set()
            todo = [x for x in starts if x in ids]
            while todo:
                x = todo.pop()
                if x in reach:
                    continue
                reach.add(x)
                todo.extend(y for y in downstream.get(x, []) if y in ids)
            ids = reach
        if len(ids) >= ISLAND_MIN and externals(ids) == {tid} and len(exits(ids)) == 1:
            members = sorted((by_id[x] for x in ids), key=lambda o: o.id)
            taken.update(ids)
            found.append((members, tid))
    return found


def _linear_chain(km: KernelModel, members: list[Op], source: int) -> bool:
    """True when each member consumes only the previous member's result (or the source) exactly once."""
    previous = source
    for op in members:
        tiles = {km.root(i).id for i in op.inputs if not _is_column(km, km.root(i).id)}
        if tiles != {previous}:
            return False
        produced = _produced(km, op)
        if produced is None:
            return False
        previous = produced
    return True


@rule(UNFUSED_CHAIN)
def unfused_instruction_chains(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    used: set[int] = set()
    for members, source in _islands(km):
        if _linear_chain(km, members, source):
            continue  # a plain chain: the chain check below gives more specific advice
        used.update(o.id for o in members)
        lines = [o.line for o in members]
        names = ", ".join(o.fn or o.alu or o.api.split(".", 1)[-1] for o in members)
        src = km.tensors[source].label() if source in km.tensors else "one tile"
        known = _recognise(members)
        if known:
            advice = (f"Together they are the {known.replace('_', ' ')} function, which ScalarE evaluates in one "
                      f"instruction: `nisa.activation(op=nl.{known}, data={src})` (add a per-partition bias "
                      "through its `bias=` operand).")
        else:
            advice = ("Look for a ScalarE activation function that matches (gelu, silu, sigmoid, softplus, ...), "
                      "and otherwise fold scalar steps into `activation(scale=, bias=)`, two-op `tensor_scalar` "
                      "and `scalar_tensor_tensor` to cut the instruction count.")
        severity: Severity = "medium" if known or len(members) >= 5 else "low"
        yield view.finding(
            UNFUSED_CHAIN, severity=severity,
            title=f"{len(members)} instructions compute an element-wise function of {src} ({lines_phrase(lines)})",
            line=min(lines), end_line=max(lines),
            message=(
                f"{cap(lines_phrase(lines))} spend {len(members)} instructions ({names}) computing an "
                f"element-wise function of the single tile {src}: each one streams the whole tile through "
                "VectorE or ScalarE again, with a ~64-cycle floor per instruction however small the tile, and "
                f"keeps an intermediate tile alive in SBUF. {advice} The performance guide measures fusing "
                "multiply, add and exp into one activation as ~3x faster than three instructions."
            ),
            data={"lines": sorted(set(lines)), "fused": known or "unknown", "instructions": len(members)},
        )
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
    for op in ops:
        if op.id in used or tokens[op.id] is None:
            continue
        if op.reads and all(a.free == 1 or _is_column(km, km.root(a.tensor).id) for a in op.reads):
            continue  # per-partition scalars ((P,1) columns): one element per partition, nothing to stream
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
            yield view.finding(
                UNFUSED_CHAIN, severity=severity,
                title=f"{length} single-op instructions could be one {kind} ({lines_phrase(lines)})",
                line=min(lines), end_line=max(lines),
                message=(
                    f"{cap(lines_phrase(lines))} apply {names} one after another, each to the previous "
                    f"result (`{part[0].text}` ...). Every instruction streams the whole tile through an engine "
                    "again (about N cycles for N elements per partition, plus ~64-100 cycles of fixed cost); "
                    f"{_advice(kind, part, toks[:length])}. The performance guide measures fusing multiply, add "
                    "and exp into one activation as ~3x faster than three instructions."
                ),
                data={"lines": lines, "fused": kind},
            )
            start += length


HBM_SPILL = RuleSpec(
    id="NKI-HBM-SPILL",
    title="Intermediate results round-trip through HBM",
    category="performance",
    severity="medium",
    summary=(
        "The kernel stores an intermediate into an HBM tensor it allocated itself (not an output) and loads it "
        "back: op-by-op structure carried over from separate CUDA kernels. HBM has ~20x less bandwidth than "
        "SBUF; fusing the operators with tiled loops keeps intermediates on chip (flash-attention style, "
        "nki-spec §9, §10 \"fuse across operators\")."
    ),
)


@rule(HBM_SPILL)
def hbm_round_trips(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    returned = {km.root(tid).id for _, tids in km.returns for tid in tids}
    params = {km.root(p.tid).id for p in km.params if p.tid is not None}
    for t in km.tensors.values():
        if km.root(t.id).id != t.id or not t.is_hbm or t.origin != "alloc" or t.id in returned \
                or t.id in params or t.id in km.escaped:
            continue
        if any(op.kind == "collective" and any(km.root(a.tensor).id == t.id for a in op.reads + op.writes)
               for op in km.ops):
            continue  # an exchange between cores (core_barrier on it): shared HBM is the only way
        stores = [op for op in km.ops if any(km.root(a.tensor).id == t.id for a in op.writes)
                  and op.kind != "collective"]
        loads = [op for op in km.ops if any(km.root(a.tensor).id == t.id for a in op.reads)]
        if not stores or not loads:
            continue
        lines = sorted({op.line for op in stores + loads})
        yield view.finding(
            HBM_SPILL, severity="medium",
            title=f"{t.label()} is an HBM scratch tensor: stored at {lines_phrase(op.line for op in stores)}, "
                  f"loaded back at {lines_phrase(op.line for op in loads)}",
            line=lines[0], end_line=lines[-1],
            message=(
                f"{t.label()} (allocated in HBM at line {t.line}, not an output) is written by "
                f"`{stores[0].text}` and read back by `{loads[0].text}`. Each round trip costs two DMAs at HBM "
                "bandwidth (~20x below SBUF) and serialises the two phases. Fuse them: compute the second step on "
                "the tile while it is still in SBUF, inside the same tile loop."
            ),
            data={"tensor": t.label(), "lines": lines},
        )



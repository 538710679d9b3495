"""Loops: sequential loops without a carried dependency, HBM reloads inside loops (nki-spec §2.5, §10)."""

from __future__ import annotations

from collections.abc import Iterator

from nkitui.analysis.nki.model import KernelModel, Loop, Tensor
from nkitui.analysis.nki.queries import dma_sides, is_dma
from nkitui.analysis.rules.phrases import cap, lines_phrase, loop_phrase, trip_phrase
from nkitui.analysis.rules.registry import RuleSpec, rule
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding, Severity

SEQ_NO_DEP = RuleSpec(
    id="NKI-SEQ-NO-DEP",
    title="sequential_range (or range) with no loop-carried dependency",
    category="performance",
    severity="medium",
    summary=(
        "A legacy-namespace loop is sequential (`nl.sequential_range`, or Python `range`, which the legacy "
        "compiler treats the same way) although no iteration depends on an earlier one. Sequential loops stop "
        "the compiler from pipelining iterations across engines and from multi-buffering tiles; "
        "`nl.affine_range` is the default for independent iterations. Medium in the legacy namespace; low in "
        "the new namespace, where every loop is unrolled and `sequential_range` is a deprecated alias of range."
    ),
)

HBM_RELOAD = RuleSpec(
    id="NKI-HBM-RELOAD",
    title="HBM tile reloaded inside a loop that does not change it",
    category="performance",
    severity="medium",
    summary=(
        "A DMA load from HBM sits inside a loop whose variable its index does not use, so the same data is "
        "fetched on every iteration (the profiler's 'input reloading'). HBM is ~20x slower than SBUF; hoisting "
        "the load (or blocking the loop nest so loaded tiles are reused) raises arithmetic intensity. Medium "
        "when the innermost loop reloads it, low when only an outer loop does (the classic tiled-matmul "
        "baseline, fixed by blocking) unless the tile is fetched 8 or more times."
    ),
)


RELOAD_MEDIUM = 8  # reloads per loaded tile from which an outer-loop reload is worth more than a note


def _created_inside(km: KernelModel, t: Tensor, loop_id: int) -> bool:
    lid = t.loop
    while lid is not None:
        if lid == loop_id:
            return True
        lid = km.loops[lid].parent
    return False


def _carried(km: KernelModel, loop: Loop) -> str | None:
    """Why iteration i+1 depends on iteration i, or None when the iterations are independent."""
    if loop.rebinds:
        return f"`{loop.rebinds[0]}` is rebound to a value computed from its previous iteration"
    ops = km.ops_in_loop(loop.id)
    sym = loop.sym
    accesses: dict[int, list[tuple[str, str, bool]]] = {}  # tensor -> (read|write, index text, uses loop var)
    for op in ops:
        if op.accumulate:
            target = op.kwargs.get("_acc_target")
            roots = [km.root(a.tensor) for a in op.writes]
            if target is not None and int(target) in km.tensors:
                roots.append(km.tensors[int(target)])
            for t in roots:
                if not _created_inside(km, t, loop.id):
                    return f"line {op.line} accumulates into {t.label()}"
        for a in op.reads:
            t = km.root(a.tensor)
            accesses.setdefault(t.id, []).append(("r", a.text, sym in a.deps))
        for a in op.writes:
            t = km.root(a.tensor)
            accesses.setdefault(t.id, []).append(("w", a.text, sym in a.deps))
    for tid, uses in accesses.items():
        t = km.tensors[tid]
        writes = [u for u in uses if u[0] == "w"]
        if not writes or _created_inside(km, t, loop.id):
            continue
        if t.is_hbm:
            if any(not uses_var for _, _, uses_var in writes):
                return f"every iteration writes the same region of {t.label()}"
            reads = [u for u in uses if u[0] == "r"]
            if reads:
                return f"{t.label()} is written and read in the loop"
            continue
        reads = [u for u in uses if u[0] == "r"]
        texts = {text for _, text, _ in uses}
        if not reads:
            if all(uses_var for _, _, uses_var in writes):
                continue
            return f"{t.label()} (declared outside the loop) is overwritten each iteration"
        if len(texts) == 1 and all(uses_var for _, _, uses_var in uses):
            continue
        return f"{t.label()} is written and read across iterations"
    return None


@rule(SEQ_NO_DEP)
def sequential_without_carried_dependency(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    namespace = view.namespace
    for loop in km.loops.values():
        legacy = namespace != "new"
        if not (loop.kind == "sequential" or (loop.kind == "range" and legacy)):
            continue
        if loop.trip is not None and loop.trip <= 1:
            continue
        body = [op for op in km.ops_in_loop(loop.id) if op.engine is not None]
        if not body:
            continue
        if _carried(km, loop) is not None:
            continue
        severity: Severity = "medium" if legacy else "low"
        what = "`nl.sequential_range`" if loop.kind == "sequential" else \
            "a Python `range` (which the legacy compiler turns into `sequential_range`)"
        if legacy:
            why = ("Sequential loops forbid the compiler from overlapping iterations across the DMA queues and "
                   "the Tensor/Vector/Scalar/GpSimd engines and from multi-buffering their tiles, so the engines "
                   "take turns instead of running concurrently. Use `nl.affine_range` for independent iterations "
                   "and keep `sequential_range` for true loop-carried dependencies (scans, carried state).")
        else:
            why = ("In the new `nki` namespace every loop is unrolled and `sequential_range` is a deprecated alias "
                   "of `range`, so it costs nothing here — but it usually signals a line-by-line CUDA port; "
                   "write plain `range` (or `nl.affine_range`).")
        yield view.finding(
            SEQ_NO_DEP, severity=severity,
            title=f"Sequential loop at line {loop.line} has no loop-carried dependency",
            line=loop.line, end_line=loop.line,
            message=(
                f"{cap(loop_phrase(loop))} uses {what}, but no iteration reads a value an earlier "
                f"iteration wrote: its {len(body)} instructions ({lines_phrase(op.line for op in body)}) touch "
                f"only per-iteration tiles and per-iteration slices of HBM. {why}"
            ),
            data={"loop_line": loop.line, "kind": loop.kind, "trip": loop.trip},
        )


def _written_in_kernel(km: KernelModel, t: Tensor) -> bool:
    return any(km.root(a.tensor).id == t.id for op in km.ops for a in op.writes)


@rule(HBM_RELOAD)
def hbm_reloads_in_loops(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    for op in km.ops:
        if not op.loops or not is_dma(op):
            continue
        hbm, _, direction = dma_sides(km, op)
        if hbm is None or direction != "load":
            continue
        t = km.root(hbm.tensor)
        if _written_in_kernel(km, t):
            continue
        invariant: list[Loop] = []
        for lid in op.loops:
            loop = km.loops[lid]
            if loop.sym in hbm.deps or (loop.trip is not None and loop.trip <= 1) or t.id in loop.picks:
                continue  # (picks: `for src in (a, b)` loads another tensor on each iteration)
            invariant.append(loop)
        if not invariant:
            continue
        innermost = km.loops[op.loops[-1]]
        in_innermost = innermost in invariant
        factor: int | None = 1
        for lp in invariant:
            factor = factor * lp.trip if lp.trip is not None and factor is not None else None
        severity: Severity = "medium" if in_innermost or (factor is not None and factor >= RELOAD_MEDIUM) else "low"
        worst = invariant[-1]
        reloads = " x ".join(trip_phrase(lp) for lp in invariant)
        if in_innermost:
            advice = (f"Its index does not use `{innermost.var}`, so the tile is identical on every iteration: "
                      f"load it once above line {innermost.line} and reuse it.")
        else:
            names = ", ".join(f"`{lp.var}`" for lp in invariant)
            advice = (f"Its index does not use {names}, so the same tile is fetched again for every iteration of "
                      f"{'that loop' if len(invariant) == 1 else 'those loops'}. Hoist it out, or block the loop "
                      "nest so each loaded tile is reused across several output tiles (the matmul tutorial's "
                      "'Optimization 1/2' took 51.8 ms to 22.1 ms this way).")
        yield view.finding(
            HBM_RELOAD, severity=severity,
            title=f"HBM load at line {op.line} is repeated by {loop_phrase(worst)}",
            line=op.line,
            message=(
                f"The load at line {op.line} (`{op.text}`) reads {t.label()} from HBM inside "
                f"{loop_phrase(worst)} ({reloads}). {advice} HBM has ~20x less bandwidth than SBUF and every DMA "
                "pays ~1.3 us of fixed latency, so reloads make the kernel DMA-bound."
            ),
            data={"loop_lines": [lp.line for lp in invariant], "tensor": t.label()},
        )


DATA_BRANCH = RuleSpec(
    id="NKI-DATA-BRANCH",
    title="Python if/while on tensor values",
    category="fidelity",
    severity="high",
    summary=(
        "An `if` or `while` tests the values of a tile (`if x[0, 0] > 0:`, `while s > 1:`). NKI traces the "
        "kernel's Python control flow once, at compile time, without data, so a branch on tensor values is "
        "not supported: per-element conditions are written with masks and selects (`nl.where`, "
        "`affine_select`, `range_select`, `select_reduce`) computed on the engines (nki-spec §10)."
    ),
)


@rule(DATA_BRANCH)
def branches_on_tile_data(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    if not km.data_branches:
        return
    lines = [line for line, _ in km.data_branches]
    yield view.finding(
        DATA_BRANCH, severity="high",
        title=f"Control flow on tensor values ({lines_phrase(lines)})",
        line=min(lines), end_line=max(lines),
        message=(
            f"{cap(lines_phrase(lines))} branch{'es' if len(lines) == 1 else ''} on the values of a tile "
            f"(`{km.data_branches[0][1]}`). A CUDA thread can branch on its own data; an NKI kernel cannot: its "
            "Python control flow is traced once at compile time with no data, so the condition has no value "
            "there. Compute the condition as a mask on the engines and select with it (`nl.where`, "
            "`nisa.affine_select`, `range_select`), applying both sides to the whole tile."
        ),
        data={"lines": sorted(set(lines)), "tests": [text for _, text in km.data_branches]},
    )



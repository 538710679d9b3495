"""Matmul accumulation and operand precision (nki-spec §4.1, §4.2, §10, §11)."""

from __future__ import annotations

from collections.abc import Iterator

from nkitui.analysis.dtypes import is_fp32, is_low_precision
from nkitui.analysis.nki.model import KernelModel, Op, Tensor
from nkitui.analysis.rules.phrases import lines_phrase, loop_phrase
from nkitui.analysis.rules.registry import RuleSpec, rule
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding, Severity

ACC_NOT_PSUM = RuleSpec(
    id="NKI-ACC-NOT-PSUM",
    title="Matmul accumulation outside fp32 PSUM",
    category="numerics",
    severity="high",
    summary=(
        "Partial products of a matmul are summed somewhere other than an fp32 PSUM tile: in a bf16/fp16 PSUM "
        "tile, in a low-precision SBUF tile, or with Vector-engine adds. TensorE accumulates in fp32 into PSUM "
        "for free; a bf16 accumulator rounds after every K tile (error grows with K), and SBUF adds cost an "
        "extra VectorE pass per tile. High when the accumulator is low precision or when an accumulation "
        "loop overwrites instead of adding; medium when fp32 partial sums are added on VectorE instead of PSUM."
    ),
)

FP32_MATMUL = RuleSpec(
    id="NKI-FP32-MATMUL",
    title="fp32 matmul operands",
    category="performance",
    severity="low",
    summary=(
        "nc_matmul / nl.matmul runs on fp32 operands. TensorE runs fp32 at a quarter of the bf16 rate (it "
        "executes as two passes); bf16/fp16/fp8 inputs with fp32 PSUM accumulation are the fast path. Medium "
        "when the operands were widened from lower-precision data (all cost, no accuracy gain); low when the "
        "task's own data is fp32, since narrowing it is a precision decision the task must allow."
    ),
)


MATMUL_TRANSPOSE = RuleSpec(
    id="NKI-MATMUL-TRANSPOSE",
    title="nl.matmul without transpose_x=True (a TensorE transpose on every call)",
    category="performance",
    severity="medium",
    summary=(
        "`nl.matmul(x, y)` computes x @ y by lowering to `nc_matmul(transpose(x), y)`: with the default "
        "`transpose_x=False` an extra TensorE transpose of x is inserted on every call. The idiom keeps x in "
        "the contraction-on-partitions layout (x is [K, M]) and passes `transpose_x=True`, or calls "
        "`nisa.nc_matmul(lhsT, rhs)` directly (nki-spec §3, §10). Medium inside a loop, low for a single call."
    ),
)


def _accumulator_of(km: KernelModel, op: Op) -> Tensor | None:
    target = op.kwargs.get("_acc_target")
    if target is not None and int(target) in km.tensors:
        return km.root(int(target))
    if op.writes:
        return km.root(op.writes[0].tensor)
    return None


def _psum_accumulated(km: KernelModel, t: Tensor) -> bool:
    """True when `t` holds a result that TensorE already accumulated over K tiles in PSUM."""
    for op in km.ops:
        if op.kind == "matmul" and op.accumulate and any(km.root(a.tensor).id == t.id for a in op.writes):
            return True
    producer = km.producer(t.id)
    if producer is not None and producer.kind in ("copy", "activation", "tensor_scalar"):
        return any(_psum_accumulated(km, km.root(i)) for i in producer.inputs)
    for op in km.ops:
        if op.kind in ("copy", "activation", "tensor_scalar", "assign") and any(km.root(a.tensor).id == t.id
                                                                               for a in op.writes):
            if any(_psum_accumulated(km, km.root(i)) for i in op.inputs if km.root(i).id != t.id):
                return True
    return False


def _persisting_loops(km: KernelModel, op: Op, t: Tensor) -> list[int]:
    """Loops around `op` that `t` outlives and whose variable does not index the written region."""
    out: list[int] = []
    deps = op.writes[0].deps if op.writes else frozenset()
    for lid in op.loops:
        inside = False
        loop_id = t.loop
        while loop_id is not None:
            if loop_id == lid:
                inside = True
                break
            loop_id = km.loops[loop_id].parent
        if not inside and km.loops[lid].sym not in deps and (km.loops[lid].trip or 2) > 1:
            out.append(lid)
    return out


@rule(ACC_NOT_PSUM)
def matmul_accumulator_outside_fp32_psum(view: KernelView) -> Iterator[Finding]:
    """A matmul that overwrites its PSUM tile on every K step, or accumulates into a low-precision PSUM
    tile or into SBUF."""
    km = view.kernel
    for op in km.ops:
        if op.kind == "matmul":
            if not op.writes:
                continue
            t = km.root(op.writes[0].tensor)
            if op.kwargs.get("_accumulate_false") and _persisting_loops(km, op, t):
                loop = km.loops[_persisting_loops(km, op, t)[-1]]
                yield view.finding(
                    ACC_NOT_PSUM, severity="high",
                    title=f"nc_matmul at line {op.line} overwrites its PSUM tile on every K step",
                    line=op.line,
                    message=(
                        f"The matmul at line {op.line} (`{op.text}`) passes accumulate=False while writing the "
                        f"same region of {t.label()} on every iteration of {loop_phrase(loop)}: each K tile "
                        "replaces the previous partial sum instead of adding to it, so only the last tile "
                        "survives. Use accumulate=True (or leave it None: the first write overwrites, later "
                        "writes accumulate in fp32 PSUM)."
                    ),
                    data={"accumulator": t.label(), "buffer": t.buffer, "dtype": t.dtype},
                )
                continue
            if not op.accumulate:
                continue
            if t.buffer == "psum" and t.dtype is not None and not is_fp32(t.dtype):
                yield view.finding(
                    ACC_NOT_PSUM, severity="high",
                    title=f"Matmul accumulates in a {t.dtype} PSUM tile ({t.label()}, line {t.line})",
                    line=op.line,
                    message=(
                        f"The matmul at line {op.line} (`{op.text}`) accumulates K tiles into {t.label()}, "
                        f"declared at line {t.line} as {t.dtype} in PSUM. The partial sum is rounded to "
                        f"{t.dtype} after every K tile, so the error grows with the contraction length "
                        "instead of staying at fp32 level (CUDA kernels keep a float accumulator for the same "
                        "reason). Declare the PSUM accumulator as nl.float32 — TensorE accumulates in fp32 "
                        "at no cost — and cast once when copying the finished tile to SBUF."
                    ),
                    data={"accumulator": t.label(), "buffer": t.buffer, "dtype": t.dtype},
                )
            elif t.buffer not in ("psum", "unknown"):
                yield view.finding(
                    ACC_NOT_PSUM, severity="high",
                    title=f"Matmul at line {op.line} writes {t.label()} in {t.buffer.upper()}, not PSUM",
                    line=op.line,
                    message=(
                        f"The matmul at line {op.line} (`{op.text}`) accumulates into {t.label()}, which lives "
                        f"in {t.buffer.upper()} (line {t.line}). TensorE can only write (and accumulate into) "
                        "PSUM; declare the accumulator with buffer=nl.psum and dtype=nl.float32."
                    ),
                    data={"accumulator": t.label(), "buffer": t.buffer, "dtype": t.dtype},
                )


@rule(ACC_NOT_PSUM)
def matmul_partials_summed_outside_psum(view: KernelView) -> Iterator[Finding]:
    """Matmul results added up by element-wise instructions: in a low-precision tile, into PSUM with an
    element-wise add, or on VectorE where PSUM accumulation would do."""
    km = view.kernel
    for op in km.ops:
        if not op.accumulate or op.kind == "matmul":
            continue
        acc = _accumulator_of(km, op)
        if acc is None:
            continue
        sources = [km.root(i) for i in op.inputs if km.root(i).id != acc.id]
        mm_sources = [s for s in sources if s.matmul]
        if not mm_sources:
            continue
        src = mm_sources[0]
        loop = km.loops[op.loops[-1]] if op.loops else None
        where = f" inside {loop_phrase(loop)}" if loop is not None else ""
        if acc.dtype is not None and is_low_precision(acc.dtype):
            yield view.finding(
                ACC_NOT_PSUM, severity="high",
                title=f"Matmul partial sums accumulated in {acc.dtype} ({acc.label()}, line {op.line})",
                line=op.line,
                message=(
                    f"Line {op.line} (`{op.text}`) adds a matmul result ({src.label()}) into {acc.label()}, a "
                    f"{acc.dtype} tile in {acc.buffer.upper()} (line {acc.line}){where}. Every addition rounds the "
                    f"running sum to {acc.dtype} (8 significant bits for bf16), so the error grows with the "
                    "number of K tiles, and each add is an extra VectorE pass over the tile. Accumulate on "
                    "TensorE instead: keep one nl.float32 PSUM tile across the K loop (`psum += nc_matmul(...)` "
                    "in legacy NKI, `nisa.nc_matmul(psum, ..., accumulate=True)` in the new namespace) and cast "
                    "once when evicting it."
                ),
                data={"accumulator": acc.label(), "buffer": acc.buffer, "dtype": acc.dtype},
            )
        elif acc.buffer == "psum":
            yield view.finding(
                ACC_NOT_PSUM, severity="medium",
                title=f"PSUM accumulation by element-wise add at line {op.line}",
                line=op.line,
                message=(
                    f"Line {op.line} (`{op.text}`) adds a matmul result into the PSUM tile {acc.label()} with an "
                    "element-wise add. The legacy compiler may lower `psum[...] = psum + mm` to a VectorE "
                    "read-add-write instead of TensorE accumulation (much slower). Write `psum += nc_matmul(...)`"
                    " (legacy) or `nisa.nc_matmul(psum, ..., accumulate=True)` so TensorE accumulates in place."
                ),
                data={"accumulator": acc.label(), "buffer": acc.buffer, "dtype": acc.dtype},
            )
        elif not _psum_accumulated(km, src):
            yield view.finding(
                ACC_NOT_PSUM, severity="medium",
                title=f"Matmul results summed on VectorE at line {op.line} instead of in PSUM",
                line=op.line,
                message=(
                    f"Line {op.line} (`{op.text}`) adds each matmul result ({src.label()}) into "
                    f"{acc.label()} ({acc.buffer.upper()}, {acc.dtype or 'dtype unknown'}){where}. TensorE "
                    "accumulates K tiles into one fp32 PSUM tile for free; adding every partial product on "
                    "VectorE costs an extra pass over the tile per K step and a PSUM eviction each time. Keep "
                    "the K loop's accumulation in PSUM and only add PSUM results into SBUF across K *blocks*."
                ),
                data={"accumulator": acc.label(), "buffer": acc.buffer, "dtype": acc.dtype},
            )


@rule(FP32_MATMUL)
def fp32_matmul_operands(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    hits: list[tuple[Op, list[Tensor]]] = []
    for op in km.ops:
        if op.kind != "matmul" or "is_transpose" in op.kwargs or len(op.reads) < 2:
            continue
        operands = [km.root(a.tensor) for a in op.reads[:2]]
        dtypes = [t.dtype for t in operands]
        if any(t.is_hbm for t in operands):
            continue
        if all(is_fp32(d) for d in dtypes):
            hits.append((op, operands))
    if not hits:
        return
    widened = [t for _, ts in hits for t in ts if t.source_dtype and is_low_precision(t.source_dtype)]
    floor = view.task_float_floor()
    task_low = floor is not None and is_low_precision(floor)
    severity: Severity = "medium" if widened or task_low else "low"
    lines = [op.line for op, _ in hits]
    names = sorted({t.label() for _, ts in hits for t in ts})
    if widened:
        why = (f"The operands were widened from {widened[0].source_dtype} data, so fp32 buys no accuracy over "
               f"{widened[0].source_dtype} inputs with fp32 PSUM accumulation — keep them in "
               f"{widened[0].source_dtype}.")
    elif task_low:
        why = f"The task's inputs are {floor}: feed TensorE {floor} tiles and accumulate in fp32 PSUM."
    else:
        why = ("The task's data is fp32, so narrowing the operands to bf16 (or using fp32 with "
               "`nl.float32r`/tf32 where available) is a precision trade-off the task's tolerance must allow; "
               "note it for the performance score rather than as a defect.")
    yield view.finding(
        FP32_MATMUL, severity=severity,
        title=f"Matmul on fp32 operands ({lines_phrase(lines)})",
        line=min(lines), end_line=max(lines),
        message=(
            f"The matmul{'s' if len(hits) > 1 else ''} at {lines_phrase(lines)} multipl"
            f"{'y' if len(hits) > 1 else 'ies'} fp32 tiles ({', '.join(names)}). TensorE runs fp32 at a quarter "
            "of its bf16 rate (each fp32 matmul executes as two passes), e.g. 23 vs 92 TFLOPS on NeuronCore-v2. "
            f"{why}"
        ),
        data={"lines": sorted(set(lines)), "operands": names},
    )


@rule(MATMUL_TRANSPOSE)
def matmul_transposes_its_operand(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    hits = [op for op in km.ops if op.api == "nl.matmul"
            and op.kwargs.get("transpose_x", "False").strip() in ("False", "0")]
    if not hits:
        return
    lines = sorted({op.line for op in hits})
    looped = [op for op in hits if op.loops]
    yield view.finding(
        MATMUL_TRANSPOSE, severity="medium" if looped else "low",
        title=f"nl.matmul transposes its first operand on every call ({lines_phrase(lines)})",
        line=lines[0], end_line=lines[-1],
        message=(
            f"{'These calls' if len(hits) > 1 else 'This call'} (`{hits[0].text}`) "
            f"use{'' if len(hits) > 1 else 's'} `nl.matmul` with "
            "`transpose_x=False` (the default), so NKI inserts a TensorE transpose of the first operand before "
            "each matmul" + (f", here inside {loop_phrase(km.loops[looped[0].loops[-1]])}" if looped else "")
            + ". Load the first operand already transposed (contraction dimension K on the partitions, [K, M]) "
            "and pass `transpose_x=True`, or call `nisa.nc_matmul(lhsT, rhs)`; the transpose then costs nothing."
        ),
        data={"lines": lines},
    )

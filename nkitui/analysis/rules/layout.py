"""Layout: element-wise transposes and reductions across partitions (nki-spec §2.3, §3.5, §10)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from nkitui.analysis.nki.model import Access, KernelModel, Op
from nkitui.analysis.nki.queries import dma_sides, is_dma
from nkitui.analysis.rules.phrases import cap, lines_phrase, loop_phrase
from nkitui.analysis.rules.registry import RuleSpec, rule
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding

ELEM_TRANSPOSE = RuleSpec(
    id="NKI-ELEM-TRANSPOSE",
    title="Transpose done with element-wise copies or a strided access pattern",
    category="performance",
    severity="medium",
    summary=(
        "Data is transposed by copying with swapped indices — `out[j, i] = in[i, j]` in loops, or a DMA whose "
        "partition index runs along a later HBM axis — instead of choosing a layout that needs no transpose, "
        "or using TensorE (`nc_transpose` / identity matmul), `dma_transpose` (trn2) or the VectorE 32x32 "
        "transpose. Element-granular DMAs move 2-4 bytes per descriptor, far below the 2-4 KiB per partition "
        "DMA needs."
    ),
)

PART_REDUCE = RuleSpec(
    id="NKI-PART-REDUCE",
    title="Reduction across the partition axis",
    category="fidelity",
    severity="medium",
    summary=(
        "A reduction runs across partitions: `axis=0` on nl.sum/max/tensor_reduce (NKI reduces free axes "
        "only — this does not compile, high), a loop that walks a tile one partition at a time accumulating "
        "rows (128 serialized single-partition instructions, medium), or GpSimd `tensor_partition_reduce` "
        "(slow engine, low). Put the reduced axis on the free dimension, or contract over partitions on "
        "TensorE (matmul with a ones vector), or transpose first."
    ),
)


def _swap(src: tuple[frozenset[str], ...], dst: tuple[frozenset[str], ...], km: KernelModel) -> tuple[str, str] | None:
    loops = set(km.symbols)
    src_dims = [d & loops for d in src if d & loops]
    dst_dims = [d & loops for d in dst if d & loops]
    if len(src_dims) < 2 or len(dst_dims) < 2:
        return None
    for a in src_dims[0]:
        for b in src_dims[1]:
            if a != b and b in dst_dims[0] and a in dst_dims[1] and a not in dst_dims[0] and b not in dst_dims[1]:
                return a, b
    return None


def _dims(access: Access) -> tuple[frozenset[str], ...]:
    return tuple(d.deps for d in access.dims)


@rule(ELEM_TRANSPOSE)
def element_wise_transposes(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    for op in km.ops:
        if not (is_dma(op) or op.kind == "copy"):
            continue
        swapped: tuple[str, str] | None = None
        detail = ""
        hbm, chip, direction = dma_sides(km, op) if is_dma(op) else (None, None, None)
        if hbm is not None and hbm.transposed:
            detail = (f"its HBM access `{hbm.text}` puts the partition index on a later axis than the free "
                      "index, so every element is a separate strided transfer")
        for w in op.writes:
            for r in op.reads:
                src_dims = _dims(r)
                src_t = km.root(r.tensor)
                if src_t.on_chip and src_t.origin_dims is not None and not any(src_dims):
                    src_dims = src_t.origin_dims
                found = _swap(src_dims, _dims(w), km)
                if found:
                    swapped = found
        if swapped is None and not detail:
            continue
        if swapped is not None:
            a, b = (s.split("@")[0] for s in swapped)
            detail = (f"it writes element [{b}, {a}] of the destination from element [{a}, {b}] of the source "
                      "(indices swapped between source and destination)")
        loop = km.loops[op.loops[-1]] if op.loops else None
        where = f" inside {loop_phrase(loop)}" if loop is not None else ""
        yield view.finding(
            ELEM_TRANSPOSE, severity="medium",
            title=f"Element-wise transpose at line {op.line}",
            line=op.line,
            message=(
                f"Line {op.line} (`{op.text}`){where} transposes data by copying: {detail}. This is how a CUDA "
                "kernel transposes through shared memory, but on a NeuronCore it turns into tiny strided DMA "
                "descriptors (2-4 bytes each, against the 2-4 KiB per partition DMA needs) or per-element "
                "instructions. Prefer a layout that needs no transpose (e.g. pass the operand pre-transposed, or "
                "swap stationary/moving in nc_matmul); otherwise transpose a whole tile with `nisa.nc_transpose`"
                " (TensorE, up to 128x128), `nisa.dma_transpose` (trn2) or `nl.load_transpose2d`."
            ),
            data={"swapped": list(swapped) if swapped else None},
        )


_AXIS0 = re.compile(r"^[\[(]?\s*0\s*(,|[\])]|$)")


def _reduces_partition_axis(op: Op) -> bool:
    axis = op.kwargs.get("axis")
    if axis is not None:
        return bool(_AXIS0.match(axis.strip()))
    return op.api != "nisa.tensor_reduce" and any(s == 0 for s in op.scalars if isinstance(s, int))


@rule(PART_REDUCE)
def reductions_over_the_partition_axis(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    for op in km.ops:
        if op.kind == "reduce" and op.reads and _reduces_partition_axis(op):
            t = km.root(op.reads[0].tensor)
            if t.pdim != 0:
                continue
            yield view.finding(
                PART_REDUCE, severity="high",
                title=f"Reduction over axis 0 (the partition axis) at line {op.line}",
                line=op.line,
                message=(
                    f"Line {op.line} (`{op.text}`) reduces {t.label()} along axis 0. On SBUF/PSUM tiles axis 0 is "
                    "the partition axis, and NKI reductions (nl.sum/max/..., nisa.tensor_reduce) only run along "
                    "free axes — the call is rejected, and a CUDA-style block reduction does not carry over. "
                    "Lay the data out so the reduced axis is a free axis, or contract over partitions on TensorE "
                    "(`nc_matmul` with a ones vector), or `nc_transpose` first and reduce the free axis."
                ),
                data={"tensor": t.label()},
            )
        elif op.kind == "partition_reduce":
            yield view.finding(
                PART_REDUCE, severity="low",
                title=f"GpSimd partition reduction at line {op.line}",
                line=op.line,
                message=(
                    f"Line {op.line} (`{op.text}`) reduces across partitions with `tensor_partition_reduce` on "
                    "GpSimd, the slowest compute engine. When the reduced data can sit on the free axis, a VectorE "
                    "`tensor_reduce` is cheaper; a sum over partitions is also a TensorE matmul with a ones "
                    "vector, which is usually idle in such kernels."
                ),
                data={},
            )


@rule(PART_REDUCE)
def row_by_row_partition_reductions(view: KernelView) -> Iterator[Finding]:
    """A loop that walks partitions one at a time and accumulates."""
    km = view.kernel
    for loop in km.loops.values():
        ops = km.ops_in_loop(loop.id)
        row_reads: list[Op] = []
        for op in ops:
            for a in op.reads:
                t = km.root(a.tensor)
                if not t.on_chip or a.part_dim is None or a.part_dim >= len(a.dims):
                    continue
                d = a.dims[a.part_dim]
                if loop.sym in d.deps and d.extent == 1:
                    row_reads.append(op)
        if not row_reads:
            continue
        accs = [op for op in ops if op.accumulate and op.kind != "matmul"]
        if not accs:
            continue
        lines = sorted({op.line for op in row_reads + accs})
        yield view.finding(
            PART_REDUCE, severity="medium",
            title=f"Loop at line {loop.line} reduces across partitions one row at a time",
            line=loop.line, end_line=max(lines),
            message=(
                f"{cap(loop_phrase(loop))} reads one partition of a tile per iteration and accumulates it "
                f"({lines_phrase(lines)}): a cross-partition reduction written like a CUDA shared-memory tree or "
                "warp shuffle. Each iteration is a 1-partition instruction (1/128 of the engine) and they all "
                "serialize on the accumulator. Reduce along the free axis instead (transpose the tile with "
                "`nc_transpose` first if needed), or sum over partitions on TensorE with `nc_matmul` against a "
                "ones vector."
            ),
            data={"loop_line": loop.line, "lines": lines},
        )



"""Tile shapes: thread-per-element tiles and partition dimensions below 128 (nki-spec §2.3, §7.1, §10)."""

from __future__ import annotations

from collections.abc import Iterator

from nkitui.analysis.nki.model import Access, KernelModel, Op, Tensor
from nkitui.analysis.nki.values import known_int
from nkitui.analysis.nki.queries import dim_size, dma_sides, is_dma, loop_trip, tiling_symbols
from nkitui.analysis.rules.phrases import cap, lines_phrase, loop_phrase
from nkitui.analysis.rules.registry import RuleSpec, rule
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding, Severity

TINY_ELEMENTS = 64  # elements per DMA at or below which a tile is "tiny" (one warp's worth, or less)
SMALL_TENSOR = 1024  # a tensor this small costs little even element by element
PMAX = 128

TILE_TINY = RuleSpec(
    id="NKI-TILE-TINY",
    title="Thread-per-element indexing / tiny tiles",
    category="performance",
    severity="high",
    summary=(
        "A loop moves (and computes on) one element, or a few dozen, per instruction: the CUDA "
        "thread-per-element pattern transliterated. Each NKI instruction works on a whole tile (up to 128 "
        "partitions x thousands of elements); a DMA pays ~1.3 us fixed latency and wants >=2-4 KiB per "
        "partition, and Vector/Scalar instructions cost >=64 cycles however small the tile. High when one "
        "element moves per DMA (medium if the whole tensor has at most 1024 elements), medium for tiles of "
        "<=64 elements."
    ),
)

PART_UNDER_128 = RuleSpec(
    id="NKI-PART-UNDER128",
    title="Partition dimension below 128 where 128 fits",
    category="performance",
    severity="medium",
    summary=(
        "Tiles use fewer than 128 partitions although the axis mapped to partitions has 128 or more rows "
        "(or is walked by a loop). Vector, Scalar and GpSimd process all active partitions in parallel, so a "
        "1-partition instruction costs the same as a 128-partition one. High for one partition per tile where "
        "64 or more fit (the row-by-row transliteration), medium when at least twice as many fit, low otherwise."
    ),
)


def _tiled(km: KernelModel, hbm: Access) -> list[str]:
    return tiling_symbols(km, hbm.deps)


def _known_elements(t: Tensor) -> int | None:
    shape = t.known_shape()
    sizes = [s for s in shape or () if s is not None]
    if not shape or len(sizes) < len(shape):
        return None
    n = 1
    for s in sizes:
        n *= s
    return n


@rule(TILE_TINY)
def thread_per_element_tiles(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    groups: dict[int, list[tuple[Op, int, Access]]] = {}
    for op in km.ops:
        if not op.loops or not is_dma(op):
            continue
        hbm, chip, _ = dma_sides(km, op)
        if hbm is None or not _tiled(km, hbm):
            continue
        if all(loop_trip(km, s, view.context) == 1 for s in _tiled(km, hbm)):
            continue
        elements = chip.elements if chip is not None and chip.elements is not None else hbm.elements
        if elements is None or elements > TINY_ELEMENTS:
            continue
        groups.setdefault(op.loops[-1], []).append((op, elements, hbm))
    for loop_id, items in groups.items():
        loop = km.loops[loop_id]
        smallest = min(e for _, e, _ in items)
        lines = [op.line for op, _, _ in items]
        compute = [op for op in km.ops_in_loop(loop_id)
                   if op.engine not in (None, "dma") and op.reads and (op.reads[0].elements or 0) <= TINY_ELEMENTS
                   and op.reads[0].elements is not None]
        example = items[0][0].text
        sizes = [_known_elements(km.tensors[hbm.tensor]) for _, _, hbm in items]
        small_data = all(n is not None and n <= SMALL_TENSOR for n in sizes)
        if smallest == 1:
            what = "one element per DMA"
            severity: Severity = "medium" if small_data else "high"
            title = f"Thread-per-element loop at line {loop.line}: one element per instruction"
        else:
            what = f"only {smallest} elements per DMA"
            severity = "medium"
            title = f"Tiny tiles in the loop at line {loop.line}: {smallest} elements per DMA"
        origin = ("CUDA's one-thread-per-element indexing carried over into NKI." if smallest == 1 else
                  "CUDA's warp-sized work items carried over into NKI." if smallest <= 32 else
                  "a tile far smaller than the engines process in one instruction.")
        extra = (f" The same loop also runs {len(compute)} compute instruction(s) on tiles that small "
                 f"({lines_phrase(op.line for op in compute)}).") if compute else ""
        yield view.finding(
            TILE_TINY, severity=severity, title=title, line=min(lines), end_line=max(lines),
            message=(
                f"{cap(loop_phrase(loop))} moves {what} ({lines_phrase(lines)}, e.g. `{example}`): "
                f"{origin}{extra} On a NeuronCore every "
                "instruction processes a whole tile — up to 128 partitions times thousands of elements per "
                "partition — each DMA pays about 1.3 us of fixed latency and needs 2-4 KiB or more per partition "
                "to approach bandwidth, and every Vector/Scalar instruction costs at least ~64 cycles however few "
                "elements it touches. Load a [128, F] tile per iteration (rows on partitions, columns on the free "
                "axis), compute on the whole tile with one instruction, and loop over tiles instead of elements."
            ),
            data={"loop_line": loop.line, "lines": sorted(set(lines)), "elements": smallest},
        )


def _broadcast_rows(km: KernelModel) -> set[int]:
    """Tiles used as a row broadcast across partitions (`t.broadcast_to((128, n))`, or an operand next to
    a tile with more partitions): a one-partition load of such a row is the idiom, not a transliteration."""
    out: set[int] = set()
    for t in km.tensors.values():
        if t.origin == "view" and t.api in ("view.broadcast_to", "view.broadcast") and t.alias_of is not None:
            out.add(km.root(t.alias_of).id)
    for op in km.ops:
        if op.kind == "broadcast":  # nl.broadcast_to(row, shape=(128, n))
            out.update(km.root(t).id for t in op.inputs)
        parts = [(km.root(a.tensor).id, a.partitions) for a in op.reads if a.partitions is not None]
        if len(parts) >= 2:
            widest = max(p for _, p in parts)
            out.update(tid for tid, p in parts if p == 1 and widest > 1)
    return out


@rule(PART_UNDER_128)
def partitions_under_128(view: KernelView) -> Iterator[Finding]:
    km = view.kernel
    groups: dict[int | None, list[tuple[Op, int, int, str]]] = {}
    rows = _broadcast_rows(km)
    for op in km.ops:
        if not is_dma(op):
            continue
        hbm, chip, _ = dma_sides(km, op)
        if hbm is None or hbm.part_dim is None or hbm.part_dim >= len(hbm.dims):
            continue
        if chip is not None and km.root(chip.tensor).id in rows:
            continue
        p = chip.partitions if chip is not None and chip.partitions is not None else hbm.partitions
        if p is None or p >= PMAX or p <= 0:
            continue
        part_dim = hbm.part_dim
        if op.kind in ("dma_load_transpose", "dma_transpose"):
            # A transposing DMA puts the HBM row's elements (its last axis) on the partitions.
            free_dims = [i for i, d in enumerate(hbm.dims) if d.kind != "int"]
            if not free_dims:
                continue
            part_dim = free_dims[-1]
        pd = hbm.dims[part_dim]
        if pd.bounded:
            continue
        tensor = km.tensors[hbm.tensor]  # the view the DMA indexes (a reshape defines the layout)
        size = known_int(dim_size(km, tensor, part_dim))
        syms = tiling_symbols(km, pd.deps)
        if size is not None:
            best = min(size, PMAX)
            axis = f"{size} rows along that axis"
        elif syms:
            trips = [loop_trip(km, s, view.context) for s in syms]
            known = [t for t in trips if t is not None]
            if len(known) == len(trips):
                total = p
                for t in known:
                    total *= t
                best = min(total, PMAX)
                axis = f"{total} rows walked by the loop"
            else:
                best = PMAX
                axis = "an axis the loop walks tile by tile"
        else:
            continue
        if best <= p:
            continue
        groups.setdefault(op.loops[-1] if op.loops else None, []).append((op, p, best, axis))
    for loop_id, items in groups.items():
        p = min(i[1] for i in items)
        best = max(i[2] for i in items)
        axis = items[0][3]
        lines = [op.line for op, *_ in items]
        # One partition where most of 128 would fit is the row-by-row transliteration; smaller gaps are
        # throughput left on the table.
        severity: Severity = "high" if p == 1 and best >= 64 else "medium" if best >= 2 * p else "low"
        where = f" inside {loop_phrase(km.loops[loop_id])}" if loop_id is not None else ""
        share = 100.0 * p / PMAX
        yield view.finding(
            PART_UNDER_128, severity=severity,
            title=f"Tiles use {p} partition{'s' if p != 1 else ''} where {best} fit ({lines_phrase(lines)})",
            line=min(lines), end_line=max(lines),
            message=(
                f"The DMA at {lines_phrase(lines)}{where} fills tiles of {p} partition{'s' if p != 1 else ''} "
                f"(`{items[0][0].text}`) although the axis mapped to partitions has {axis}, so {best} would fit. "
                "Vector, Scalar and GpSimd engines process all active partitions in parallel: an instruction on "
                f"{p} partition{'s' if p != 1 else ''} costs the same time as on 128, so this port uses {share:.1f}% "
                f"of each engine and issues {PMAX // p if p else PMAX}x more instructions (and DMAs) than needed. "
                f"Put {best} rows on the partition axis (e.g. `nl.tile_size.pmax`), keep the per-row work on the "
                "free axis, and loop over row tiles."
            ),
            data={"lines": sorted(set(lines)), "partitions": p, "fits": best},
        )



"""Partial last tiles: unmasked overruns, dropped remainders, off-by-one masks (nki-spec §2.2, §5 C13/C16).

Each dimension of each HBM tensor the kernel moves gets at most one defect, the first of these that holds
(`tile_defect`); three rules then report the defects of their kind:

* with the task's sizes: the last tile runs past the end unguarded (NKI-PARTIAL-NO-MASK), or guarded by a
  bound that admits too much (NKI-PARTIAL-MASK); the tiles stop short of the end, because a guard stops
  short (NKI-PARTIAL-MASK) or the trip count rounds down (NKI-PARTIAL-DROPPED); they start late; or an
  output is written only at fixed indices (NKI-PARTIAL-DROPPED);
* without sizes: a guard ends off by a constant whatever the size (NKI-PARTIAL-MASK), or a rounded-up tile
  loop moves whole tiles with no guard (NKI-PARTIAL-NO-MASK).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from nkitui.analysis.coverage import AccessSpan, DimCoverage
from nkitui.analysis.nki.model import KernelModel, Loop, Tensor
from nkitui.analysis.nki.values import Mask
from nkitui.analysis.rules.phrases import cap, lines_phrase, loop_phrase
from nkitui.analysis.rules.registry import RuleSpec, rule
from nkitui.analysis.rules.view import KernelView
from nkitui.common.findings import Finding

PARTIAL_NO_MASK = RuleSpec(
    id="NKI-PARTIAL-NO-MASK",
    title="Partial last tile without a mask or bound",
    category="fidelity",
    severity="high",
    summary=(
        "A loop covers a dimension in whole tiles that run past its end, and the DMAs in it carry no `mask=` "
        "(legacy) or `min()`-bounded slice (new namespace). The last tile reads or writes rows that do not "
        "exist: an out-of-bounds access on hardware. High when the task's shapes show the overrun; medium when "
        "the loop rounds up (ceil division) and the sizes are unknown."
    ),
)

PARTIAL_DROPPED = RuleSpec(
    id="NKI-PARTIAL-DROPPED",
    title="Last partial tile never processed",
    category="fidelity",
    severity="high",
    summary=(
        "The tiles a loop visits stop short of the end of a dimension — typically a trip count `n // 128` "
        "when n is not a multiple of 128 — so the remaining rows are never read (input) or never written "
        "(output, left as garbage). Needs the task's shapes to see."
    ),
)

PARTIAL_MASK = RuleSpec(
    id="NKI-PARTIAL-MASK",
    title="Partial-tile mask or bound off by one",
    category="fidelity",
    severity="high",
    summary=(
        "The `mask=` predicate or `min()` bound that guards the last partial tile does not end exactly at the "
        "dimension's size: `<=` where `<` is meant, or a bound one row short or long. Detected from the "
        "task's shapes or symbolically when the bound and the size use the same symbol."
    ),
)


def _role(km: KernelModel, t: Tensor) -> str:
    for p in km.params:
        if p.tid == t.id:
            return p.role or ("output" if any(t.id in tids for _, tids in km.returns) else "input")
    if any(t.id in tids for _, tids in km.returns):
        return "output"
    return "scratch"


def _dim_name(cov: DimCoverage) -> str:
    return f"dimension {cov.dim} of {cov.tensor.label()}"


def _loops_text(km: KernelModel, spans: list[AccessSpan]) -> str:
    loop_ids = sorted({lid for s in spans for lid in s.tiling_loops})
    if not loop_ids:
        return ""
    return " (tiled by " + ", ".join(loop_phrase(km.loops[lid]) for lid in loop_ids) + ")"


def _rows(first: int, last: int) -> str:
    return f"Row {first}" if first == last else f"Rows {first}..{last}"


def _guard_text(span: AccessSpan) -> str:
    mask = span.op.mask
    where = f" (line {span.guard_line})" if span.guard_line and span.guard_line != span.op.line else ""
    if isinstance(mask, Mask) and mask.text:
        return f"`mask={mask.text}`{where}"
    if span.guarded:
        return f"the bounded slice `{span.access.text}`{where}"
    return "no guard"


def _guard_location(spans: list[AccessSpan]) -> tuple[int, int | None]:
    """Where to mark a guard finding: the guard's own line when known, else the DMA lines."""
    guards = sorted({s.guard_line for s in spans if s.guard_line})
    lines = [s.op.line for s in spans]
    if guards:
        return guards[0], None
    return min(lines), max(lines)


def _divisibility_asserted(km: KernelModel, spans: list[AccessSpan]) -> bool:
    for s in spans:
        for lid in s.tiling_loops:
            loop = km.loops[lid]
            num = loop.div_numerator_text
            if num and any(num in text and "%" in text for _, text, _ in km.asserts):
                return True
    return False


# -- which defect a dimension has ----------------------------------------------------------------------

DefectKind = Literal["overrun", "guard-overrun", "guard-short", "remainder-dropped", "late-start",
                     "fixed-output", "guard-off", "rounded-unguarded"]


@dataclass(frozen=True)
class TileDefect:
    """What is wrong with how the tiles of one dimension cover it, and the DMAs that show it."""

    kind: DefectKind
    cov: DimCoverage
    spans: list[AccessSpan]  # the DMAs the finding is about
    role: str  # "input" | "output" | "scratch" (what the tensor is to the kernel)

    @property
    def size(self) -> int:
        size = self.cov.size_int
        assert size is not None  # only the symbolic kinds have no size, and they do not read it
        return size

    @property
    def verb(self) -> str:
        return "read" if self.role == "input" else "written" if self.role == "output" else "touched"


# A detector looks at one dimension (its non-gappy spans) and returns the defect it finds, if any.
Detector = Callable[[KernelModel, DimCoverage, list[AccessSpan], str], TileDefect | None]


def _over(cov: DimCoverage, spans: list[AccessSpan], guarded: bool) -> list[AccessSpan]:
    size = cov.size_int
    assert size is not None
    return [s for s in spans if s.hi is not None and s.hi > size and s.guarded == guarded]


def _unguarded_overrun(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan], role: str) -> TileDefect | None:
    over = _over(cov, spans, guarded=False)
    return TileDefect("overrun", cov, over, role) if over else None


def _guard_overrun(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan], role: str) -> TileDefect | None:
    over = _over(cov, spans, guarded=True)
    return TileDefect("guard-overrun", cov, over, role) if over else None


def _ends_short(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan], role: str) -> TileDefect | None:
    _, hi = cov.union()
    if hi is None or hi >= (cov.size_int or 0) or not any(s.tiling_loops for s in spans):
        return None
    guarded = any(s.guarded for s in spans if s.hi is not None and s.hi == hi)
    return TileDefect("guard-short" if guarded else "remainder-dropped", cov, spans, role)


def _starts_late(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan], role: str) -> TileDefect | None:
    lo, _ = cov.union()
    if lo is None or lo <= 0 or not any(s.tiling_loops for s in spans):
        return None
    return TileDefect("late-start", cov, spans, role)


def _fixed_output(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan], role: str) -> TileDefect | None:
    lo, hi = cov.union()
    size = cov.size_int
    if role != "output" or lo is None or hi is None or size is None or not (lo > 0 or hi < size):
        return None
    if any(s.tiling_loops for s in spans) or any(s.gappy for s in cov.spans):
        return None
    return TileDefect("fixed-output", cov, spans, role)


def _guard_off_symbolically(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan],
                            role: str) -> TileDefect | None:
    off = [s for s in spans if s.guarded and s.rel_end not in (None, 0)]
    return TileDefect("guard-off", cov, off, role) if off else None


def _rounded_up_unguarded(km: KernelModel, cov: DimCoverage, spans: list[AccessSpan],
                          role: str) -> TileDefect | None:
    ceil_spans = [s for s in spans if not s.guarded and any(
        km.loops[lid].division in ("ceil", "step", "ceil-suspect") for lid in s.tiling_loops)]
    if not ceil_spans or _divisibility_asserted(km, ceil_spans):
        return None
    return TileDefect("rounded-unguarded", cov, ceil_spans, role)


# In order of precedence: the first that holds is the dimension's defect.
WITH_SIZES: tuple[Detector, ...] = (_unguarded_overrun, _guard_overrun, _ends_short, _starts_late, _fixed_output)
WITHOUT_SIZES: tuple[Detector, ...] = (_guard_off_symbolically, _rounded_up_unguarded)


def tile_defect(km: KernelModel, cov: DimCoverage) -> TileDefect | None:
    spans = [s for s in cov.spans if not s.gappy]
    if not spans:
        return None
    role = _role(km, cov.tensor)
    for detect in WITH_SIZES if cov.size_int is not None else WITHOUT_SIZES:
        defect = detect(km, cov, spans, role)
        if defect is not None:
            return defect
    return None


# -- the rules -----------------------------------------------------------------------------------------

@rule(PARTIAL_NO_MASK)
def unguarded_partial_tiles(view: KernelView) -> Iterator[Finding]:
    """The last tile runs past the end, and nothing limits it."""
    yield from _report(view, {"overrun", "rounded-unguarded"})


@rule(PARTIAL_DROPPED)
def dropped_rows(view: KernelView) -> Iterator[Finding]:
    """Rows of a dimension no tile ever reaches."""
    yield from _report(view, {"remainder-dropped", "late-start", "fixed-output"})


@rule(PARTIAL_MASK)
def off_by_one_guards(view: KernelView) -> Iterator[Finding]:
    """The guard of the last tile admits too much or too little."""
    yield from _report(view, {"guard-overrun", "guard-short", "guard-off"})


def _report(view: KernelView, kinds: set[DefectKind]) -> Iterator[Finding]:
    for cov in view.coverage:
        defect = tile_defect(view.kernel, cov)
        if defect is not None and defect.kind in kinds:
            yield _WORDING[defect.kind](view, defect)


# -- what each finding says ------------------------------------------------------------------------------

_GUARD_ADVICE = ("Iterate over ceil(n / P) tiles and guard the last one (a mask in legacy NKI, a "
                 "`min(P, n - i*P)`-sized slice in the new namespace).")


def _overrun(view: KernelView, d: TileDefect) -> Finding:
    km, cov, size = view.kernel, d.cov, d.size
    worst = max(s.hi or 0 for s in d.spans)
    lines = [s.op.line for s in d.spans]
    return view.finding(
        PARTIAL_NO_MASK, severity="high",
        title=f"Last tile runs {worst - size} rows past the end of {cov.tensor.label()} "
              f"({lines_phrase(lines)})",
        line=min(lines), end_line=max(lines),
        message=(
            f"{cap(_dim_name(cov))} has {size} elements, but the DMAs at {lines_phrase(lines)}"
            f"{_loops_text(km, d.spans)} reach index {worst - 1}: the last tile is partial and "
            f"nothing limits it (`{d.spans[0].op.text}`). On hardware this reads/writes "
            f"{worst - size} rows beyond the tensor. Guard the last tile: legacy NKI passes "
            "`mask=(i * P + i_p < n)` to every load/store/compute of that tile; the new namespace "
            "slices `x[i*P : i*P + rows]` with `rows = min(P, n - i*P)` (or `nl.ds(i*P, rows)`)."
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "reach": worst},
    )


def _guard_overrun_finding(view: KernelView, d: TileDefect) -> Finding:
    cov, size = d.cov, d.size
    worst = max(s.hi or 0 for s in d.spans)
    lines = [s.op.line for s in d.spans]
    line, end = _guard_location(d.spans)
    return view.finding(
        PARTIAL_MASK, severity="high",
        title=f"Partial-tile guard admits {worst - size} row(s) past the end of "
              f"{cov.tensor.label()} ({lines_phrase(lines)})",
        line=line, end_line=end,
        message=(
            f"{cap(_dim_name(cov))} has {size} elements, but the guard on the last tile at "
            f"{lines_phrase(lines)} ({_guard_text(d.spans[0])}) lets index {worst - 1} through: an "
            "off-by-one that reads/writes memory past the tensor. The guard must admit exactly the "
            f"indices below the size: `i * P + i_p < n` (here n = {size}), not `<=`."
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "reach": worst,
              "lines": sorted(set(lines))},
    )


def _short_finding(view: KernelView, d: TileDefect) -> Finding:
    """The tiles stop short of the end: a guard that stops short (MASK) or a remainder dropped (DROPPED)."""
    km, cov, size, spans = view.kernel, d.cov, d.size, d.spans
    _, union_hi = cov.union()
    hi = union_hi or 0
    short = [s for s in spans if s.hi is not None and s.hi == hi]
    lines = [s.op.line for s in spans]
    guarded = [s for s in short if s.guarded]
    loop_ids = sorted({lid for s in spans for lid in s.tiling_loops})
    floor: list[Loop] = [km.loops[lid] for lid in loop_ids if km.loops[lid].division == "floor"]
    if guarded:
        cause = (f" The guard on the last tile, {_guard_text(guarded[0])}, stops {size - hi} "
                 f"{'index' if size - hi == 1 else 'indices'} short: it must admit every index below {size} "
                 "(`i * P + i_p < n`, not `< n - 1`).")
        fix = "Fix the guard so the last partial tile covers the dimension exactly."
    elif floor:
        lp = floor[0]
        cause = (f" The trip count `{lp.stop_text}` rounds down: with {lp.div_numerator_text} = "
                 f"{size} and tiles of {lp.div_denominator}, the last {size - hi} rows are left over.")
        fix = _GUARD_ADVICE
    else:
        cause = ""
        fix = _GUARD_ADVICE
    line, end = _guard_location(guarded) if guarded else (min(lines), max(lines))
    return view.finding(
        PARTIAL_MASK if guarded else PARTIAL_DROPPED, severity="high",
        title=f"{_rows(hi, size - 1)} of {cov.tensor.label()} {'is' if hi == size - 1 else 'are'} never "
              f"{d.verb} ({lines_phrase(lines)})",
        line=line, end_line=end,
        message=(
            f"{cap(_dim_name(cov))} has {size} elements, but the DMAs at {lines_phrase(lines)}"
            f"{_loops_text(km, spans)} only reach index {hi - 1}.{cause} "
            + ("Those output rows are never written and come back as whatever HBM held. "
               if d.role == "output" else "Those input rows never influence the result. ")
            + fix
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "reach": hi,
              "lines": sorted(set(lines))},
    )


def _late_start_finding(view: KernelView, d: TileDefect) -> Finding:
    cov, size = d.cov, d.size
    union_lo, _ = cov.union()
    lo = union_lo or 0
    lines = [s.op.line for s in d.spans]
    return view.finding(
        PARTIAL_DROPPED, severity="high",
        title=f"{_rows(0, lo - 1)} of {cov.tensor.label()} {'is' if lo == 1 else 'are'} never {d.verb}",
        line=min(lines), end_line=max(lines),
        message=(
            f"{cap(_dim_name(cov))} has {size} elements, but the tiles visited at "
            f"{lines_phrase(lines)}{_loops_text(view.kernel, d.spans)} start at index {lo}, so the first "
            f"{lo} rows are never {d.verb}."
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "start": lo},
    )


def _fixed_output_finding(view: KernelView, d: TileDefect) -> Finding:
    """Fixed indices only (no loop moves the store): part of the output is never written at all."""
    cov, size, spans = d.cov, d.size, d.spans
    union_lo, union_hi = cov.union()
    lo, hi = union_lo or 0, union_hi or 0
    lines = [s.op.line for s in spans]
    return view.finding(
        PARTIAL_DROPPED, severity="high",
        title=f"Only indices {lo}..{hi - 1} of {cov.tensor.label()} (dimension {cov.dim}, size {size}) "
              f"are written ({lines_phrase(lines)})",
        line=min(lines), end_line=max(lines),
        message=(
            f"{cap(_dim_name(cov))} has {size} elements, but the DMAs at {lines_phrase(lines)} write it "
            f"only at the fixed indices {lo}..{hi - 1} (`{spans[0].op.text}`), and no loop moves them "
            "over the rest. The other elements of the output are never written and come back as "
            "whatever HBM held; a test passes only if it happens to check the written part. Write "
            "every tile of the output (index the store with the tile loop's variable)."
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "written": [lo, hi],
              "lines": sorted(set(lines))},
    )


def _guard_off_finding(view: KernelView, d: TileDefect) -> Finding:
    """Sizes unknown: the guard ends a constant away from the size, whatever it is."""
    cov = d.cov
    s = d.spans[0]
    direction = (f"{s.rel_end} row(s) past the end" if (s.rel_end or 0) > 0
                 else f"{-(s.rel_end or 0)} row(s) short of the end")
    lines = [x.op.line for x in d.spans]
    line, end = _guard_location(d.spans)
    return view.finding(
        PARTIAL_MASK, severity="high",
        title=f"Partial-tile guard ends {direction} of {cov.tensor.label()} ({lines_phrase(lines)})",
        line=line, end_line=end,
        message=(
            f"The guard on the last tile at {lines_phrase(lines)} ({_guard_text(s)}, on `{s.op.text}`) ends "
            f"{direction} of {_dim_name(cov)}, whatever its size: an off-by-one. The guard must admit "
            "exactly the indices below the size (`i * P + i_p < n`; `min(P, n - i*P)` rows)."
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "offset": s.rel_end, "lines": sorted(set(lines))},
    )


def _rounded_up(view: KernelView, d: TileDefect) -> Finding:
    """Sizes unknown: a loop rounds the tile count up, and its DMAs move whole tiles with no guard."""
    km, cov = view.kernel, d.cov
    loop = next(km.loops[lid] for s in d.spans for lid in s.tiling_loops
                if km.loops[lid].division in ("ceil", "step", "ceil-suspect"))
    lines = [s.op.line for s in d.spans]
    suspect = " (and its rounding constant is not tile-1)" if loop.division == "ceil-suspect" else ""
    return view.finding(
        PARTIAL_NO_MASK, severity="medium",
        title=f"Rounded-up tile loop at line {loop.line} has no partial-tile guard ({lines_phrase(lines)})",
        line=min(lines), end_line=max(lines),
        message=(
            f"{cap(loop_phrase(loop))} rounds the tile count up{suspect}, so when "
            f"{loop.div_numerator_text or 'the size'} is not a multiple of {loop.div_denominator} the last "
            f"tile is partial — but the DMAs at {lines_phrase(lines)} (`{d.spans[0].op.text}`) move full "
            "tiles with no mask or min()-bounded slice, so they read/write past the end of the tensor. "
            "Guard the last tile (legacy `mask=(i * P + i_p < n)`; new namespace `rows = min(P, n - i*P)`)."
        ),
        data={"tensor": cov.tensor.label(), "dim": cov.dim, "loop_line": loop.line},
    )


# How each defect is worded (the rule id follows from the kind: see the three rules above).
_WORDING: dict[DefectKind, Callable[[KernelView, TileDefect], Finding]] = {
    "overrun": _overrun,
    "rounded-unguarded": _rounded_up,
    "remainder-dropped": _short_finding,
    "late-start": _late_start_finding,
    "fixed-output": _fixed_output_finding,
    "guard-overrun": _guard_overrun_finding,
    "guard-short": _short_finding,
    "guard-off": _guard_off_finding,
}

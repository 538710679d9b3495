"""Partial last tiles: unmasked overruns, dropped remainders, off-by-one masks (nki-spec §2.2, §5 C13/C16)."""

from __future__ import annotations

from collections.abc import Iterator

from nkitui.analysis.coverage import AccessSpan, DimCoverage, coverage
from nkitui.analysis.nki.model import KernelModel, Tensor
from nkitui.analysis.nki.values import Mask
from nkitui.analysis.rules.base import RuleInput, RuleSpec, cap, lines_phrase, loop_phrase
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


def check_partial(inp: RuleInput, km: KernelModel) -> Iterator[Finding]:
    covs = inp.cache.setdefault(f"coverage:{km.name}", coverage(km, inp.context))
    for cov in covs:
        spans = [s for s in cov.spans if not s.gappy]
        if not spans:
            continue
        role = _role(km, cov.tensor)
        verb = "read" if role == "input" else "written" if role == "output" else "touched"
        size = cov.size_int
        reported = False
        if size is not None:
            over = [s for s in spans if s.hi is not None and s.hi > size]
            bad_guard = [s for s in over if s.guarded]
            unguarded = [s for s in over if not s.guarded]
            if unguarded:
                worst = max(s.hi for s in unguarded)  # type: ignore[type-var]
                lines = [s.op.line for s in unguarded]
                yield inp.finding(
                    PARTIAL_NO_MASK, severity="high",
                    title=f"Last tile runs {worst - size} rows past the end of {cov.tensor.label()} "
                          f"({lines_phrase(lines)})",
                    line=min(lines), end_line=max(lines),
                    message=(
                        f"{cap(_dim_name(cov))} has {size} elements, but the DMAs at {lines_phrase(lines)}"
                        f"{_loops_text(km, unguarded)} reach index {worst - 1}: the last tile is partial and "
                        f"nothing limits it (`{unguarded[0].op.text}`). On hardware this reads/writes "
                        f"{worst - size} rows beyond the tensor. Guard the last tile: legacy NKI passes "
                        "`mask=(i * P + i_p < n)` to every load/store/compute of that tile; the new namespace "
                        "slices `x[i*P : i*P + rows]` with `rows = min(P, n - i*P)` (or `nl.ds(i*P, rows)`)."
                    ),
                    data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "reach": worst},
                )
                reported = True
            if bad_guard and not reported:
                worst = max(s.hi for s in bad_guard)  # type: ignore[type-var]
                lines = [s.op.line for s in bad_guard]
                line, end = _guard_location(bad_guard)
                yield inp.finding(
                    PARTIAL_MASK, severity="high",
                    title=f"Partial-tile guard admits {worst - size} row(s) past the end of "
                          f"{cov.tensor.label()} ({lines_phrase(lines)})",
                    line=line, end_line=end,
                    message=(
                        f"{cap(_dim_name(cov))} has {size} elements, but the guard on the last tile at "
                        f"{lines_phrase(lines)} ({_guard_text(bad_guard[0])}) lets index {worst - 1} through: an "
                        "off-by-one that reads/writes memory past the tensor. The guard must admit exactly the "
                        f"indices below the size: `i * P + i_p < n` (here n = {size}), not `<=`."
                    ),
                    data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "reach": worst,
                          "lines": sorted(set(lines))},
                )
                reported = True
            lo, hi = cov.union()
            if not reported and hi is not None and hi < size and any(s.tiling_loops for s in spans):
                short = [s for s in spans if s.hi is not None and s.hi == hi]
                lines = [s.op.line for s in spans]
                guarded = [s for s in short if s.guarded]
                rule = PARTIAL_MASK if guarded else PARTIAL_DROPPED
                loop_ids = sorted({lid for s in spans for lid in s.tiling_loops})
                floor = [km.loops[lid] for lid in loop_ids if km.loops[lid].division == "floor"]
                if guarded:
                    cause = (f" The guard on the last tile, {_guard_text(guarded[0])}, stops {size - hi} "
                             f"{'index' if size - hi == 1 else 'indices'} short: it must admit every index below {size} (`i * P + i_p < n`, not "
                             "`< n - 1`).")
                    fix = "Fix the guard so the last partial tile covers the dimension exactly."
                elif floor:
                    lp = floor[0]
                    cause = (f" The trip count `{lp.stop_text}` rounds down: with {lp.div_numerator_text} = "
                             f"{size} and tiles of {lp.div_denominator}, the last {size - hi} rows are left over.")
                    fix = ("Iterate over ceil(n / P) tiles and guard the last one (a mask in legacy NKI, a "
                           "`min(P, n - i*P)`-sized slice in the new namespace).")
                else:
                    cause = ""
                    fix = ("Iterate over ceil(n / P) tiles and guard the last one (a mask in legacy NKI, a "
                           "`min(P, n - i*P)`-sized slice in the new namespace).")
                line, end = _guard_location(guarded) if guarded else (min(lines), max(lines))
                yield inp.finding(
                    rule, severity="high",
                    title=f"{_rows(hi, size - 1)} of {cov.tensor.label()} {'is' if hi == size - 1 else 'are'} never "
                          f"{verb} ({lines_phrase(lines)})",
                    line=line, end_line=end,
                    message=(
                        f"{cap(_dim_name(cov))} has {size} elements, but the DMAs at {lines_phrase(lines)}"
                        f"{_loops_text(km, spans)} only reach index {hi - 1}.{cause} "
                        + ("Those output rows are never written and come back as whatever HBM held. "
                           if role == "output" else "Those input rows never influence the result. ")
                        + fix
                    ),
                    data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "reach": hi,
                          "lines": sorted(set(lines))},
                )
                reported = True
            if not reported and lo is not None and lo > 0 and any(s.tiling_loops for s in spans):
                lines = [s.op.line for s in spans]
                yield inp.finding(
                    PARTIAL_DROPPED, severity="high",
                    title=f"{_rows(0, lo - 1)} of {cov.tensor.label()} {'is' if lo == 1 else 'are'} never {verb}",
                    line=min(lines), end_line=max(lines),
                    message=(
                        f"{cap(_dim_name(cov))} has {size} elements, but the tiles visited at "
                        f"{lines_phrase(lines)}{_loops_text(km, spans)} start at index {lo}, so the first "
                        f"{lo} rows are never {verb}."
                    ),
                    data={"tensor": cov.tensor.label(), "dim": cov.dim, "size": size, "start": lo},
                )
                reported = True
            if not reported and role == "output" and lo is not None and hi is not None and (lo > 0 or hi < size) \
                    and not any(s.tiling_loops for s in spans) and not any(s.gappy for s in cov.spans):
                # Fixed indices only (no loop moves the store): part of the output is never written at all.
                lines = [s.op.line for s in spans]
                yield inp.finding(
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
            continue
        # Sizes unknown: symbolic off-by-one, and ceil-division loops without guards.
        off = [s for s in spans if s.guarded and s.rel_end not in (None, 0)]
        if off:
            s = off[0]
            direction = (f"{s.rel_end} row(s) past the end" if (s.rel_end or 0) > 0
                         else f"{-(s.rel_end or 0)} row(s) short of the end")
            lines = [x.op.line for x in off]
            line, end = _guard_location(off)
            yield inp.finding(
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
            continue
        ceil_spans = [s for s in spans if not s.guarded and any(
            km.loops[lid].division in ("ceil", "step", "ceil-suspect") for lid in s.tiling_loops)]
        if ceil_spans and not _divisibility_asserted(km, ceil_spans):
            loop = next(km.loops[lid] for s in ceil_spans for lid in s.tiling_loops
                        if km.loops[lid].division in ("ceil", "step", "ceil-suspect"))
            lines = [s.op.line for s in ceil_spans]
            suspect = " (and its rounding constant is not tile-1)" if loop.division == "ceil-suspect" else ""
            yield inp.finding(
                PARTIAL_NO_MASK, severity="medium",
                title=f"Rounded-up tile loop at line {loop.line} has no partial-tile guard ({lines_phrase(lines)})",
                line=min(lines), end_line=max(lines),
                message=(
                    f"{cap(loop_phrase(loop))} rounds the tile count up{suspect}, so when "
                    f"{loop.div_numerator_text or 'the size'} is not a multiple of {loop.div_denominator} the last "
                    f"tile is partial — but the DMAs at {lines_phrase(lines)} (`{ceil_spans[0].op.text}`) move full "
                    "tiles with no mask or min()-bounded slice, so they read/write past the end of the tensor. "
                    "Guard the last tile (legacy `mask=(i * P + i_p < n)`; new namespace `rows = min(P, n - i*P)`)."
                ),
                data={"tensor": cov.tensor.label(), "dim": cov.dim, "loop_line": loop.line},
            )


SPECS = [PARTIAL_NO_MASK, PARTIAL_DROPPED, PARTIAL_MASK]
CHECKS = [check_partial]

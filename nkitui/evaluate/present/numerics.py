"""Rich renderables of the numerics results, for `nkitui check` (text) and the UI's panels.

    console.print(render_audit(audit))               # everything, in reading order
    text = audit_text(audit, width=100)              # the same as plain text (no colour)

Every function takes the result objects (rebuild them from JSON with `from_dict`).
"""

from __future__ import annotations

import io
import math
from typing import Iterable, Sequence

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from nkitui.common.findings import Finding
from nkitui.common import units
from nkitui.common.textfit import FitText
from nkitui.evaluate.numerics.advisor import ToleranceAdvice
from nkitui.evaluate.numerics.audit import NumericsAudit
from nkitui.evaluate.numerics.findings import g
from nkitui.evaluate.numerics.goldens import GoldenReport
from nkitui.evaluate.numerics.heatmap import TileHeatmap
from nkitui.evaluate.numerics.metrics import OutputMetrics
from nkitui.evaluate.numerics.mutants import MutationReport
from nkitui.evaluate.numerics.precision import PrecisionReport
from nkitui.evaluate.numerics.trials import TrialsReport

HEAT_RAMP = " .:-=+*#%@"
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
STATUS_STYLE = {
    "pass": "green", "caught": "green", "agree": "green", "consistent": "green",
    "fail": "bold red", "survived": "bold red", "error": "red", "crashed": "yellow",
    "tolerance-only": "yellow", "equivalent": "dim", "undetectable": "dim",
}


def _t(value: object, style: str = "") -> Text:
    """Plain text: kernel sources and messages are full of [brackets] that Rich would read as markup."""
    return Text(str(value), style=style)


def _verdict(passed: bool) -> Text:
    return Text("PASS", style="bold green") if passed else Text("FAIL", style="bold red")


def render_metrics(m: OutputMetrics) -> RenderableType:
    head = Text.assemble(
        (f"{m.name}", "bold"), f" {m.dtype} {list(m.shape)}  ", _verdict(m.passed),
        f"  under {m.policy.describe()}: {units.count(m.mismatches)} of {units.count(m.count)} mismatch "
        f"({m.mismatch_fraction:.2%})",
    )
    stats = Table.grid(padding=(0, 2))
    stats.add_column(style="dim")
    stats.add_column()
    stats.add_row("max abs / max rel", f"{g(m.max_abs)} / {g(m.max_rel)}")
    stats.add_row("relative L2", g(m.rel_l2))
    # a ULP distance beyond 2^mantissa says what it means (opposite signs, or more than 2x apart)
    stats.add_row("ULP (max / mean)", f"{units.ulp(m.max_ulp, m.dtype)} / {g(m.mean_ulp)}"
                  if m.max_ulp is not None else "n/a")
    stats.add_row("reference max|.| / rms", f"{g(m.ref_max_abs)} / {g(m.ref_rms)}")
    nf = m.nonfinite
    if nf.any or nf.mismatched:
        stats.add_row(
            "NaN/Inf",
            _t(f"result {nf.actual_nan} NaN, {nf.actual_posinf}+{nf.actual_neginf} inf; reference {nf.expected_nan} NaN, "
            f"{nf.expected_posinf}+{nf.expected_neginf} inf; {nf.matched} matched, {nf.mismatched} disagree"),
        )
    conv = Table(title="conventions", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("convention", "parameters", "from", "mismatches", "verdict"):
        conv.add_column(col)
    for c in m.conventions:
        stat = f" ({g(c.statistic)})" if c.statistic is not None else ""
        conv.add_row(_t(c.policy.kind), _t(c.policy.describe().split(" ", 1)[-1] if c.policy.kind != "exact" else "-"),
                     _t(c.source), _t(f"{c.mismatches} ({c.fraction:.2%}){stat}"), _verdict(c.passed))
    worst = Table(title="worst elements", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("index", "result", "reference", "abs err", "rel err", "ULP", ""):
        worst.add_column(col)
    for w in m.worst:
        worst.add_row(_t(list(w.index)), _t(g(w.actual, 6)), _t(g(w.expected, 6)), _t(g(w.abs_error)),
                      _t(g(w.rel_error)), _t(g(w.ulp)), Text("x", style="red") if w.mismatch else _t(""))
    parts: list[RenderableType] = [head, stats, conv, worst]
    if m.localisation is not None:
        parts.append(Text(f"where: {m.localisation.summary}", style="yellow" if m.localisation.concentrated else ""))
    parts.append(render_heatmap(m.heatmap))
    return Group(*parts)


def render_heatmap(h: TileHeatmap, max_width: int = 64) -> RenderableType:
    """One character per cell: the ramp shows max abs error (log scale), a red x marks mismatches."""
    rows, cols = h.grid
    if rows == 0 or cols == 0:
        return Text("(empty output)")
    finite = [v for row in h.max_abs for v in row if math.isfinite(v) and v > 0]
    top = max(finite) if finite else 0.0
    low = max(min(finite), top * 1e-8) if finite else 0.0
    text = Text()
    text.append(
        f"per-tile error: {rows}x{cols} cells of {h.cell[0]}x{h.cell[1]} elements "
        f"(tile {h.tile[0]}x{h.tile[1]}); ramp '{HEAT_RAMP.strip()}' = max abs error up to {g(top)}, x = mismatches\n",
        style="dim",
    )
    for r in range(rows):
        text.append(f"{h.row_edges[r]:>7} ", style="dim")
        for c in range(min(cols, max_width)):
            v = h.max_abs[r][c]
            if h.mismatches[r][c]:
                text.append("x", style="bold red")
            elif not math.isfinite(v):
                text.append("!", style="bold red")
            elif v <= 0 or top <= 0:
                text.append(" ")
            else:
                frac = 0.0 if top == low else (math.log(max(v, low)) - math.log(low)) / (math.log(top) - math.log(low))
                text.append(HEAT_RAMP[min(len(HEAT_RAMP) - 1, 1 + int(frac * (len(HEAT_RAMP) - 2)))], style="cyan")
        text.append("\n")
    return text


def render_advice(a: ToleranceAdvice) -> RenderableType:
    # each reason a bullet whose wrapped lines stay under its text (nkitui.common.textfit)
    body = Group(*(FitText(line, indent="- ", subsequent="  ") for line in a.reasoning))
    return Panel(body, title=_t(f"tolerance advice for `{a.name}`: {a.policy.describe()}"), title_align="left")


def render_trials(r: TrialsReport) -> RenderableType:
    t = Table(title="trials", title_justify="left")
    for col in ("trial", "inputs", "status", "max abs", "rel L2", "NaN/Inf disagree"):
        t.add_column(col)
    for tr in r.trials:
        if tr.outputs:
            max_abs = max(o.max_abs for o in tr.outputs)
            rel = max(o.rel_l2 for o in tr.outputs)
            nf = sum(o.nonfinite_mismatched for o in tr.outputs)
            cells = (_t(g(max_abs)), _t(g(rel)), _t(nf))
        else:
            cells = (_t(tr.error or ""), _t(""), _t(""))
        t.add_row(_t(tr.name), _t(tr.description), _t(tr.status, STATUS_STYLE.get(tr.status, "")), *cells)
    return t


def render_precision(r: PrecisionReport) -> RenderableType:
    if r.error:
        return Text(f"precision isolation did not run: {r.error}", style="red")
    t = Table(title="precision isolation (precise off = all fp32, on = real dtypes)", title_justify="left")
    for col in ("output", "algorithm error", "dtype error", "excess over 1 rounding", "total", "verdict"):
        t.add_column(col)
    for o in r.outputs:
        t.add_row(
            _t(o.name),
            _t(f"{g(o.algorithm_rel_l2)} (expect {g(o.expected_algorithm_rel_l2)})"),
            _t(f"{g(o.dtype_rel_l2)} (expect {g(o.expected_dtype_rel_l2)})"),
            _t(f"{g(o.excess_rel_l2)} (<= {g(o.allowed_excess_rel_l2)}); {o.excess_ulp_fraction:.1%} >= 3 ULP"),
            _t(g(o.total_rel_l2)),
            _t(o.verdict, STATUS_STYLE.get(o.verdict, "bold red")),
        )
    notes = [Text(f"{o.name}: matches {o.best_hypothesis.cause}", style="yellow") for o in r.outputs if o.best_hypothesis]
    return Group(t, *notes)


def render_mutants(r: MutationReport) -> RenderableType:
    if r.error:
        return Text(f"mutation testing did not run: {r.error}", style="red")
    score = "n/a" if r.score is None else f"{r.score:.0%}"
    t = Table(title=_t(f"test strength: {r.count('caught')} caught, {r.count('crashed')} crashed, "
                    f"{r.count('survived')} survived, {r.count('equivalent')} equivalent, "
                    f"{r.count('undetectable')} undetectable (score {score})"),
              title_justify="left")
    for col in ("mutant", "line", "change", "status", "detail"):
        t.add_column(col)
    for m in r.results:
        t.add_row(_t(m.id), _t(f"{m.file}:{m.line}"), _t(m.description), _t(m.status, STATUS_STYLE.get(m.status, "")),
                  _t(m.detail))
    return t


def render_goldens(r: GoldenReport) -> RenderableType:
    if r.error:
        return Text(f"GPU goldens not compared: {r.error}", style="red")
    t = Table(title=_t(f"GPU goldens ({r.path})"), title_justify="left")
    for col in ("output", "port~ref", "port~GPU", "GPU~ref", "verdict"):
        t.add_column(col)
    for o in r.outputs:
        cells = [f"{g(p.rel_l2)} {'ok' if p.passed else 'FAIL'}" for p in (o.port_vs_reference, o.port_vs_gpu,
                                                                         o.gpu_vs_reference)]
        t.add_row(_t(o.name), *[_t(c) for c in cells], _t(o.verdict, STATUS_STYLE.get(o.verdict, "yellow")))
    return Group(t, *[Text(o.explanation) for o in r.outputs if o.verdict != "agree"])


def render_findings(findings: Sequence[Finding]) -> RenderableType:
    if not findings:
        return Text("numerics findings: none", style="green")
    parts: list[RenderableType] = [Text(f"numerics findings ({len(findings)})", style="bold")]
    for f in findings:
        where = f" {f.location}" if f.file else ""
        parts.append(Text.assemble((f"[{f.severity}] ", SEVERITY_STYLE.get(f.severity, "")), (f.rule, "bold"),
                                   where, f"  {f.title}"))
        parts.append(FitText(f.message, indent="    "))
    return Group(*parts)


def render_audit(audit: NumericsAudit) -> RenderableType:
    if audit.error:
        return Group(Text(f"numerics: the first run failed: {audit.error}", style="bold red"))
    parts: list[RenderableType] = []
    for m in audit.outputs:
        parts.append(render_metrics(m))
        adv = audit.advice_for(m.name)
        if adv is not None:
            parts.append(render_advice(adv))
    if audit.trials is not None:
        parts.append(render_trials(audit.trials))
    if audit.precision is not None:
        parts.append(render_precision(audit.precision))
    if audit.mutants is not None:
        parts.append(render_mutants(audit.mutants))
    if audit.goldens is not None:
        parts.append(render_goldens(audit.goldens))
    parts.append(render_findings(audit.findings))
    return Group(*parts)


def to_text(renderables: Iterable[RenderableType] | RenderableType, width: int = 100) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False)
    items = renderables if isinstance(renderables, (list, tuple)) else [renderables]
    for r in items:
        console.print(r)
    return buf.getvalue()


def audit_text(audit: NumericsAudit, width: int = 100) -> str:
    """The whole audit as plain text."""
    return to_text(render_audit(audit), width)

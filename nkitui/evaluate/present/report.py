"""The Rich report of one run, for `nkitui check` (and any text view of a stored run).

    console.print(render_result(result))
    text = result_text(result, width=100)     # plain text, no colour

Reading order: what ran and where (backend and why), what went wrong if anything, phases with
durations, checks, per-output metrics per seed, the numerics audit (nkitui.evaluate's own
renderers), timing, engine utilisation as text bars (labelled estimated or measured), findings.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from nkitui.common import units
from nkitui.common.textfit import FitText
from nkitui.evaluate.run.result import RunResult

STATUS_STYLE = {"passed": "bold green", "failed": "bold red", "invalid": "bold magenta"}
PHASE_STYLE = {"ok": "green", "failed": "red", "skipped": "dim", "interrupted": "yellow"}
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
BAR_WIDTH = 30


def _num(x: Any, fmt: str = "") -> str:
    """A number through the one formatter (nkitui.common.units); `fmt` only for fixed decimals."""
    if isinstance(x, bool) or x is None:
        return "-"
    if isinstance(x, (int, float)):
        return format(x, fmt) if fmt else units.error(x)
    return str(x)


def _mark(passed: bool | None) -> Text:
    if passed is None:
        return Text("–", style="dim")
    return Text("PASS", style="green") if passed else Text("FAIL", style="bold red")


def render_header(r: RunResult) -> RenderableType:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("task", f"{r.task_id} — {r.task_title}" if r.task_title else r.task_id)
    t.add_row("run", f"{r.run_id}  ({r.created_at}, {_num(r.duration_s, '.1f')} s)")
    t.add_row("status", Text(r.status.upper(), style=STATUS_STYLE.get(r.status, "bold yellow")))
    t.add_row("backend", f"{r.backend or 'none'} on {r.target} — {r.backend_reason or 'not chosen'}")
    if r.task_commit:
        dirty = " (uncommitted changes)" if r.task_dirty else ""
        t.add_row("commit", f"{r.task_commit[:12]}{dirty}")
    t.add_row("seeds", ", ".join(map(str, r.seeds)) or "-")
    summary = r.sandbox.summary
    if summary:  # what confined the task's processes (kernel, reference), checked against /proc by the evaluator
        t.add_row("isolation", Text(summary, style="yellow" if "degraded" in summary or "not reported" in summary else ""))
    versions = ", ".join(f"{k} {v}" for k, v in r.versions.items() if isinstance(v, str))
    if versions:
        t.add_row("versions", versions)
    sdk = r.versions.get("sdk")
    if isinstance(sdk, dict):
        t.add_row("sdk", ", ".join(f"{k} {v}" for k, v in sdk.items() if k != "fake") + (" (fake SDK)" if sdk.get("fake") else ""))
    return t


def render_error(r: RunResult) -> RenderableType | None:
    if not r.error:
        return None
    e = r.error
    where = f" at {e.location}" if e.line else (f" in {e.file}" if e.file else "")
    return FitText(f"error ({e.kind}){where}: {e.message}", style="red", subsequent="  ")


def render_phases(r: RunResult) -> RenderableType:
    t = Table(title="phases", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("phase")
    t.add_column("status")
    t.add_column("time", justify="right")
    t.add_column("detail")
    for p in r.phases:
        dur = p.duration_s
        # FitText: a path (file.py::kernel) breaks after / or ::, never mid-word
        t.add_row(p.name, Text(p.status, style=PHASE_STYLE.get(p.status, "")),
                  f"{dur:.3f} s" if isinstance(dur, (int, float)) else "-", FitText(p.detail))
    return t


def render_checks(r: RunResult) -> RenderableType:
    t = Table(title="checks", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("")
    t.add_column("check")
    t.add_column("detail")
    for c in r.checks:
        t.add_row(_mark(c.passed), c.title, FitText(c.detail))
    if not r.checks:
        t.add_row(_mark(None), "no checks ran", "")
    return t


def render_seed_metrics(r: RunResult) -> RenderableType | None:
    rows = [(s, o) for s in r.seed_results for o in s.outputs]
    if not rows and not any(s.error for s in r.seed_results):
        return None

    def nonfinite_of(o: Any) -> int:
        nf = o.nonfinite
        count: int = nf.actual_nan + nf.actual_posinf + nf.actual_neginf
        return count

    # A number is never broken across lines (2.1004 / 7e+09): the numeric columns do not wrap, and the
    # NaN/Inf column is there only when a result has one (the title says so otherwise), so the table
    # fits 80 columns.
    with_nonfinite = any(nonfinite_of(o) for _, o in rows)
    title = "outputs per seed (float64 comparison)" + ("" if with_nonfinite else "; no NaN/Inf in any result")
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    columns = ("output", "seed", "", "max abs", "max rel", "max ULP", "rel L2", "mismatches",
               *(("NaN/Inf",) if with_nonfinite else ()))
    for col in columns:
        if col in ("output", ""):
            t.add_column(col, overflow="fold")
        else:
            t.add_column(col, justify="right", no_wrap=True)
    blanks = [""] * (len(columns) - 4)
    for s in r.seed_results:
        if s.error and not s.outputs:
            t.add_row("-", str(s.seed), _mark(False), Text(s.error.message[:80], style="red"), *blanks)
        for o in s.outputs:
            t.add_row(o.name, str(s.seed), _mark(o.passed), _num(o.max_abs), _num(o.max_rel),
                      units.ulp(o.max_ulp, note=False), _num(o.rel_l2), f"{o.mismatches}/{o.count}",
                      *((str(nonfinite_of(o)),) if with_nonfinite else ()))
    return t


def render_numerics(r: RunResult) -> RenderableType | None:
    if r.numerics is None:
        return None
    from nkitui.evaluate.present.numerics import render_audit

    return render_audit(r.numerics)


def bar(percent: float, width: int = BAR_WIDTH) -> str:
    p = max(0.0, min(100.0, percent))
    full = int(round(p / 100 * width))
    return "█" * full + "░" * (width - full)


def render_timing(r: RunResult) -> RenderableType | None:
    t = r.timing
    if t is None:
        return None
    lines: list[RenderableType] = [Text("timing", style="bold")]
    if t.kind == "estimated":
        lines.append(FitText(f"estimated {units.time_us(t.median_us)} ({t.source or 'cost model'}; {t.note})",
                             indent="  ", subsequent="    "))
        from nkitui.perf.uncertainty import describe_record  # the band the perf record carries

        band = describe_record(r.utilisation.to_json() if r.utilisation is not None else None, units.time_s)
        if band:
            lines.append(FitText(band, indent="  ", subsequent="    "))
    else:
        ci = t.ci95_us or (None, None)
        lines.append(FitText(
            f"measured median {units.time_us(t.median_us)}, IQR {units.time_us(t.iqr_us)}, "
            f"min {units.time_us(t.min_us)}, 95% CI of the median [{units.time_us(ci[0])}, {units.time_us(ci[1])}]",
            indent="  ", subsequent="    "))
        lines.append(FitText(f"{t.samples} timed launches after {t.warmup} warm-up; {t.stopped}",
                             indent="  ", subsequent="    "))
        lines.append(FitText(f"method: {t.method}; {t.rechecked} launches re-checked, {t.recheck_failure_count} differed",
                             indent="  ", subsequent="    "))
        if t.device is not None:
            lines.append(Text(f"  device (nki.benchmark) p50 {units.time_us(t.device.median_us)}"))
        if t.profile_total_time_us is not None:
            lines.append(Text(f"  profiler total_time {units.time_us(t.profile_total_time_us)}"))
    return Group(*lines)


def render_utilisation(r: RunResult) -> RenderableType | None:
    u = r.utilisation
    if u is None:
        return None
    parts: list[RenderableType] = [Text.assemble(("engine utilisation ", "bold"), (f"({u.source}", "italic"),
                                                 (f", {u.tool})" if u.tool else ")", "italic"))]
    for lane, stats in u.engines.items():
        pct = float(stats.active_time_percent)
        parts.append(Text(f"  {lane:<7} {bar(pct)} {pct:5.1f}%"))
    extra = [(k, u.summary.get(k)) for k in ("mfu_estimated_percent", "mbu_estimated_percent", "hfu_estimated_percent")]
    shown = ", ".join(f"{k.split('_')[0].upper()} {units.percent(v)}" for k, v in extra if isinstance(v, (int, float)))
    if isinstance(u.total_time, (int, float)):
        shown = f"total {units.time_s(u.total_time)}" + (f", {shown}" if shown else "")
    if shown:
        parts.append(Text(f"  {shown}"))
    return Group(*parts)


def render_findings(r: RunResult) -> RenderableType | None:
    others = [f for f in r.findings if f.source != "numerics"]
    if not others:
        return None
    parts: list[RenderableType] = [Text(f"findings ({len(others)})", style="bold")]
    for f in others:
        where = f" {f.file}:{f.line}" if f.file and f.line else ""
        parts.append(Text.assemble((f"[{f.severity}] ", SEVERITY_STYLE.get(f.severity, "")),
                                   (f.rule, "bold"), where, f"  {f.title}"))
        parts.append(FitText(f.message, indent="    "))
    return Group(*parts)


def render_result(r: RunResult, *, numerics: bool = True, log_lines: int = 15) -> RenderableType:
    parts: list[RenderableType | None] = [
        render_header(r), render_error(r), render_phases(r), render_checks(r), render_seed_metrics(r),
        render_numerics(r) if numerics else None, render_timing(r), render_utilisation(r), render_findings(r),
    ]
    if r.notes:
        parts.append(Group(Text("notes", style="bold"), *[FitText(n, indent="  ", subsequent="    ") for n in r.notes]))
    if not r.finished or r.status == "failed" and r.error:
        tail = r.log_excerpt[-log_lines:]
        if tail:
            parts.append(Group(Text("log (last lines)", style="bold"),
                               *[FitText(line, style="dim", indent="  ", subsequent="    ") for line in tail]))
    return Group(*(p for p in parts if p is not None))


# -- A/B comparison -------------------------------------------------------------------------------

CHANGE_STYLE = {"better": "green", "worse": "bold red", "same": "dim", "n/a": "dim"}


def _run_line(label: str, r: RunResult | None, run_id: str) -> Text:
    if r is None:
        return Text(f"{label}  {run_id}")
    return Text.assemble((f"{label}  ", "bold"), f"{r.run_id}  ", (r.status, STATUS_STYLE.get(r.status, "bold yellow")),
                         f"  {r.backend or 'no backend'}/{r.target}  {r.created_at}"
                         + (f"  commit {r.task_commit[:12]}" if r.task_commit else ""))


def render_comparison(cmp: Any, a: RunResult | None = None, b: RunResult | None = None) -> RenderableType:
    """A/B comparison of two runs (nkitui.evaluate.run.store.RunComparison: b against a)."""
    parts: list[RenderableType] = [Text("A/B comparison (B against A)", style="bold"), _run_line("A", a, cmp.a),
                                   _run_line("B", b, cmp.b)]
    same = ("same task" if cmp.same_task else "different tasks") + (", same commit" if cmp.same_commit else "")
    parts.append(Text(f"   {same}", style="dim"))
    for note in cmp.notes:
        parts.append(Text(f"   note: {note}", style="yellow"))

    checks = Table(title="checks", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("check", "A", "B", "A→B"):
        checks.add_column(col)
    for c in cmp.checks:
        changed = c["a"] != c["b"]
        checks.add_row(c["id"], _mark(c["a"]), _mark(c["b"]), Text("changed", style="bold yellow") if changed else "")
    if not cmp.checks:
        checks.add_row("no checks in either run", "", "", "")
    parts.append(checks)

    if cmp.metrics:
        metrics = Table(title="worst metric over seeds", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("output", "metric", "A", "B", "change"):
            metrics.add_column(col, justify="right" if col in ("A", "B") else "left")
        for m in cmp.metrics:
            metrics.add_row(m.output, m.metric, _num(m.a), _num(m.b), Text(m.change, style=CHANGE_STYLE.get(m.change, "")))
        parts.append(metrics)

    t = cmp.timing or {}
    line = Text("timing  ", style="bold")
    if isinstance(t.get("a_us"), (int, float)) and isinstance(t.get("b_us"), (int, float)):
        line.append(f"A {units.time_us(t['a_us'])} ({t.get('a_kind', '?')}) → B {units.time_us(t['b_us'])} "
                    f"({t.get('b_kind', '?')})")
        if isinstance(t.get("speedup"), (int, float)):
            line.append(f", speed-up {units.ratio(t['speedup'])}")
    line.append(f"  — {t.get('verdict', 'no timing to compare')}")
    parts.append(line)

    if cmp.utilisation:
        util = Table(title="engine utilisation (active time %)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("engine", "A", "B", "B - A"):
            util.add_column(col, justify="left" if col == "engine" else "right")
        for u in cmp.utilisation:
            delta = u["b"] - u["a"] if isinstance(u["a"], (int, float)) and isinstance(u["b"], (int, float)) else None
            util.add_row(u["lane"], _num(u["a"], ".1f"), _num(u["b"], ".1f"), _num(delta, "+.1f"))
        parts.append(util)

    perf = cmp.performance or {}
    if perf:
        parts.append(Text.assemble(("cost model / profile  ", "bold"), str(perf.get("headline", ""))))
        for w in perf.get("warnings") or []:
            parts.append(Text(f"   note: {w}", style="yellow"))
    return Group(*parts)


def comparison_text(cmp: Any, a: RunResult | None = None, b: RunResult | None = None, width: int = 100) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False).print(render_comparison(cmp, a, b))
    return buf.getvalue()


def result_text(r: RunResult, width: int = 100, **kwargs: Any) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False).print(render_result(r, **kwargs))
    return buf.getvalue()

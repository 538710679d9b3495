"""The Engines area: utilisation per engine, latency, MFU/HFU/MBU, timeline, roofline, hot lines."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Static

from nkitui.app import keymap
from nkitui.app.evidence import Evidence
from nkitui.app.messages import ShowSource
from nkitui.app.widgets.status import StatusLine
from nkitui.app.widgets.engines.charts import LANE_TITLES, EngineBars, TimelineStrip, lanes_of
from nkitui.common import units

BOUND_SOURCE = "lower bound"  # how speed-of-light rows are labelled before a run (never "measured")


class MetricsTable(DataTable):
    """Headline numbers of the run; the highlighted row is what `a` attaches as evidence."""

    HELP = """\
## Engines: metrics

Latency and utilisation of the last (or reopened) run. Every number is labelled **estimated** (nkitui's
cost model on the emulator's instruction trace) or **measured** (the Neuron profiler's summary). MFU and
HFU are model and hardware FLOP utilisation, MBU memory-bandwidth utilisation; speed of light is the
fastest any kernel could run this task on the target. Before a run the table holds the speed of light
alone, labelled **lower bound**: computed from the task's op, shapes and dtypes, not measured.
**a** attaches the highlighted metric as evidence.
"""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.metrics: list[tuple[str, str, str]] = []  # (key, label, value)
        self.source = ""
        self.run_id = ""

    def on_mount(self) -> None:
        self.add_columns("metric", "value")

    def set_metrics(self, metrics: list[tuple[str, str, str]], source: str, run_id: str) -> None:
        self.metrics, self.source, self.run_id = metrics, source, run_id
        self.clear(columns=True)  # columns fit the new rows, not the widest value ever shown
        # explicit widths: DataTable measures auto columns lazily, so a table filled before its first
        # layout could keep header-wide columns and cut every label ("latenc")
        self.add_column("metric", width=max([len("metric"), *(len(label) for _, label, _ in metrics)]))
        self.add_column("value", width=max([len("value"), *(len(value) for _, _, value in metrics)]))
        for key, label, value in metrics:
            self.add_row(label, value, key=key)

    def evidence_at_cursor(self) -> Evidence | None:
        if not self.metrics or not 0 <= self.cursor_row < len(self.metrics):
            return None
        key, label, value = self.metrics[self.cursor_row]
        return Evidence("metric", f"{label} = {value} ({self.source})", metric=key, value=value,
                        run_id=self.run_id or None, data={"source": self.source})


class HotLinesTable(DataTable):
    """Kernel source lines ranked by engine time; Enter shows the line in the Source area."""

    HELP = """\
## Engines: hot lines

The NKI source lines that kept the engines busiest, with the share of all engine time, the engines
involved and the instructions issued. **Enter** shows the line in the Source area; **a** attaches it
as evidence.
"""

    BINDINGS = keymap.bindings("engines")

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.lines: list = []
        self.source = ""
        self.run_id = ""

    def on_mount(self) -> None:
        self.add_columns("line", "time", "engines", "instr", "opcodes")

    def set_lines(self, lines: list, source: str, run_id: str) -> None:
        self.lines, self.source, self.run_id = lines, source, run_id
        self.clear()
        for index, h in enumerate(lines):
            engines = ", ".join(
                f"{LANE_TITLES.get(lane, lane)} {units.percent(100 * t / h.time, 0)}"
                for lane, t in sorted(h.by_engine.items(), key=lambda kv: -kv[1]) if h.time and t > 0
            )
            opcodes = ", ".join(name for name, _ in sorted(h.opcodes.items(), key=lambda kv: -kv[1])[:3])
            self.add_row(h.location, units.percent(h.percent), engines, units.count(h.instructions), opcodes,
                         key=str(index))

    def current(self):
        if not self.lines or not 0 <= self.cursor_row < len(self.lines):
            return None
        return self.lines[self.cursor_row]

    def action_jump_to_line(self) -> None:
        h = self.current()
        if h is not None and h.line:
            self.post_message(ShowSource(h.file, h.line))

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_jump_to_line()

    def evidence_at_cursor(self) -> Evidence | None:
        h = self.current()
        if h is None:
            return None
        return Evidence("metric", f"hot line {h.location}: {units.percent(h.percent)} of engine time ({self.source})",
                        file=h.file or None, line=h.line or None, metric="hot_line_percent",
                        value=units.percent(h.percent), run_id=self.run_id or None, data={"source": self.source})


class EnginesArea(VerticalScroll):
    ALLOW_MAXIMIZE = True  # z zooms the area to the whole screen

    HELP = """\
## Engines area

Per-engine utilisation (Tensor, Vector, Scalar, GpSimd, DMA) as bars and as a timeline, headline
metrics, the roofline and the hottest source lines of the shown run. On the emulator these numbers
are **estimates** from nkitui's cost model; on Trainium hardware they are **measured** by the profiler.
The label says which, everywhere.
"""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "3 Engines"
        self.bound = None  # the task's speed of light before any run (perf SpeedOfLight), once known
        self.bound_reason = ""  # why there is none
        self.record = None
        self._run_id = ""
        self._message = ""

    def compose(self) -> ComposeResult:
        yield StatusLine(id="engines-head", classes="bar")
        yield StatusLine(id="sol-note", classes="strip needs-bound")
        yield Static("Speed of light from the task's shapes", classes="section needs-bound", id="sol-title")
        yield EngineBars(id="engine-bars", classes="needs-record")
        yield Static("Timeline", classes="section needs-record")
        yield TimelineStrip(id="timeline", classes="needs-record")
        yield Static("Metrics", classes="section needs-record")
        yield MetricsTable(id="metrics", classes="needs-record needs-bound")
        yield Static("Hot source lines", classes="section needs-record")
        yield HotLinesTable(id="hot-lines", classes="needs-record")
        yield Static("Roofline", classes="section needs-record", id="roofline-title")
        # The roofline plot (plotext) is mounted with the first record: it is slow to import.
        yield Static(id="engines-notes", classes="notes needs-record needs-bound")

    def on_mount(self) -> None:
        self.show_record(None, "")

    def _roofline(self):
        from nkitui.app.widgets.engines.roofline import RooflinePlot

        found = self.query(RooflinePlot)
        if found:
            return found.first()
        plot = RooflinePlot(id="roofline", classes="needs-record")
        self.mount(plot, after=self.query_one("#roofline-title"))
        return plot

    def focus_primary(self) -> None:
        table = self.query_one(MetricsTable)
        if table.display:
            table.focus(scroll_visible=False)
        else:
            self.focus(scroll_visible=False)
        self.call_after_refresh(self.scroll_home, animate=False)

    def set_speed_of_light(self, sol, reason: str = "") -> None:
        """The task's speed of light (perf SpeedOfLight) known before any run, or None and why not."""
        self.bound, self.bound_reason = sol, reason
        self.show_record(self.record, self._run_id, self._message)

    def show_record(self, record, run_id: str, message: str = "") -> None:
        """Show a perf PerfRecord (or None, with an explanation and the speed of light if known)."""
        self.record, self._run_id, self._message = record, run_id, message
        head = self.query_one("#engines-head", StatusLine)
        self.query_one(EngineBars).record = record
        self.query_one(TimelineStrip).record = record
        notes = self.query_one("#engines-notes", Static)
        bound_only = record is None and self.bound is not None
        for widget in self.query(".needs-record"):
            widget.display = record is not None
        for widget in self.query(".needs-bound"):
            widget.display = bound_only or (record is not None and widget.has_class("needs-record"))
        if record is None:
            self.query_one(HotLinesTable).set_lines([], "", "")
            if self.bound is None:
                head.update(Content.styled(message or "No performance data yet: run the task (r).", "$text-muted"))
                self.query_one(MetricsTable).set_metrics([], "", "")
                notes.display = bool(self.bound_reason)
                notes.update(f"No speed of light before a run: {self.bound_reason}." if self.bound_reason else "")
                return
            sol = self.bound
            head.update(*(_bound_head(sol) if not message else (Content.styled(message, "$text-muted"),)))
            run = keymap.app_key(self, "app.run")
            self.query_one("#sol-note", StatusLine).update(
                Content.styled("A lower bound from the task's shapes, not a measurement: no kernel runs faster. "
                               f"{run} runs the task to see how close the port comes.", "$text-muted"),
                Content.styled(f"A lower bound from the shapes, not a measurement; {run} runs the task.", "$text-muted"),
                Content.styled(f"Lower bound, not measured; {run} runs the task.", "$text-muted"),
            )
            self.query_one(MetricsTable).set_metrics(bound_rows(sol), BOUND_SOURCE, "")
            notes.update(Content("\n").join(Content(n) for n in _bound_notes(sol)))
            return
        source = record.source
        label = (source.upper(), "bold reverse $text-warning" if source == "estimated" else "bold reverse $text-success")
        latency = units.time_s(record.total_time)
        band = _band(record)
        spread = (f" {band.band_text()}", "$text-warning") if band is not None else ("", "")
        head.update(
            Content.assemble(label, " ", (record.tool or "", "$text-muted"), "  ", (record.target, "bold"),
                             "  latency ", (latency, "bold"), spread),
            Content.assemble(label, "  ", (record.target, "bold"), "  latency ", (latency, "bold"), spread),
            Content.assemble(label, "  ", (latency, "bold"), spread),
        )
        sol = record.speed_of_light
        if sol is None and self.bound is not None and self.bound.target == record.target and record.total_time:
            # the record carries no bound (a profile without the task's work): compare with the task's own
            sol = self.bound.against(record.total_time)
        self.query_one(MetricsTable).set_metrics(metric_rows(record, sol), source, run_id)
        self.query_one(HotLinesTable).set_lines(list(record.hotspots), source, run_id)
        self._roofline().show_point(record.roofline, source)
        notes.update(Content("\n").join(Content(n) for n in _notes(record, sol)))


def _bound_head(sol) -> tuple[Content, ...]:
    """The head line before a run: the bound, what binds it, and that it is a bound (longest first)."""
    label = ("SPEED OF LIGHT", "bold reverse $text-accent")
    time = (f"≥ {units.time_s(sol.bound_s)}", "bold")
    return (
        Content.assemble(label, "  ", (sol.target, "bold"), "  ", time, f"  {sol.bound}-bound",
                         ("  ·  lower bound, not a measurement", "$text-muted")),
        Content.assemble(label, "  ", (sol.target, "bold"), "  ", time, f"  {sol.bound}-bound",
                         ("  ·  lower bound", "$text-muted")),
        Content.assemble(label, "  ", (sol.target, "bold"), "  ", time, f"  {sol.bound}-bound"),
    )


def bound_rows(sol) -> list[tuple[str, str, str]]:
    """Metric rows of a speed of light on its own (before a run): the bounds and the work behind them."""
    work = sol.work
    rows = [
        ("speed_of_light_s", f"speed of light ({sol.bound}-bound)", units.time_s(sol.bound_s)),
        ("speed_of_light_memory_s", "bandwidth bound (HBM bytes)", units.time_s(sol.memory_s)),
        ("speed_of_light_compute_s", "compute bound (TensorE FLOPs)",
         units.time_s(sol.compute_s) if work.flops else "0 (no TensorE work)"),
    ]
    if work.vector_ops:
        rows.append(("speed_of_light_vector_s", "vector bound (element ops)", units.time_s(sol.vector_s)))
    rows += [
        ("work_flops", "work: TensorE FLOPs", units.si(work.flops, "FLOP")),
        ("work_hbm_bytes", "work: HBM bytes (minimal)", units.bytes_(work.hbm_bytes)),
    ]
    if work.vector_ops:
        rows.append(("work_vector_ops", "work: element operations", units.si(work.vector_ops, "ops")))
    rows.append(("work_dtype", "matmul dtype" if work.flops else "dtype", work.dtype))
    return rows


def _bound_notes(sol) -> list[str]:
    notes = [f"work: {sol.work.description}"] if sol.work.description else []
    return notes + [f"speed of light: {a}" for a in sol.assumptions]


def _pct(value) -> str:
    return units.percent(value)


def _band(record):
    """The record's uncertainty band (perf Uncertainty), or None (a measurement, or an old record)."""
    if record.source != "estimated":
        return None
    from nkitui.perf.uncertainty import Uncertainty

    return Uncertainty.from_json(record.uncertainty)


def metric_rows(record, sol=None) -> list[tuple[str, str, str]]:
    """The metrics of a run's record; `sol` is its speed of light (by default the record's own)."""
    s = record.summary
    rows = [("total_time", f"latency ({record.source})", units.time_s(record.total_time))]
    band = _band(record)
    if band is not None:
        lo, hi = band.bounds(record.total_time)
        rows.append(("uncertainty", "uncertainty (calibrated families)",
                     f"{band.band_text()}: {units.time_s(lo)} to {units.time_s(hi)}"))
    if record.core_time is not None and record.launch_overhead:
        rows.append(("core_time", "kernel core time", units.time_s(record.core_time)))
        rows.append(("launch_overhead", "launch overhead", units.time_s(record.launch_overhead)))
    rows += [
        ("mfu_estimated_percent", "MFU", _pct(s.get("mfu_estimated_percent"))),
        ("hfu_estimated_percent", "HFU", _pct(s.get("hfu_estimated_percent"))),
        ("mbu_estimated_percent", "MBU", _pct(s.get("mbu_estimated_percent"))),
    ]
    sol = sol if sol is not None else record.speed_of_light
    if sol is not None:
        rows.append(("speed_of_light_s", f"speed of light ({sol.bound}-bound)", units.time_s(sol.bound_s)))
        if sol.achieved_percent is not None:
            rows.append(("speed_of_light_percent", "achieved % of speed of light", _pct(sol.achieved_percent)))
    for lane in lanes_of(record):
        rows.append((f"{lane}_active_percent", f"{LANE_TITLES[lane]} active", _pct(record.engine_percent(lane))))
    if "mm_arithmetic_intensity" in s:
        rows.append(("mm_arithmetic_intensity", "arithmetic intensity", f"{units.number(float(s['mm_arithmetic_intensity']))} FLOP/B"))
    for key, label in (("hbm_read_bytes", "HBM read"), ("hbm_write_bytes", "HBM write"),
                       ("dma_transfer_average_bytes", "average DMA size")):
        if key in s:
            rows.append((key, label, units.bytes_(float(s[key]))))
    if "dma_transfer_count" in s:
        rows.append(("dma_transfer_count", "DMA transfers", units.count(s['dma_transfer_count'])))
    return rows


def _notes(record, sol=None) -> list[str]:
    band = _band(record)
    notes = [band.describe(record.total_time, units.time_s)] if band is not None else []
    notes += list(record.notes)
    sol = sol if sol is not None else record.speed_of_light
    if sol is not None:
        notes += [f"speed of light: {a}" for a in sol.assumptions]
    return notes

"""Engine utilisation bars and the timeline strip, drawn to the widget's width."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

ENGINE_LANES = ("tensor", "vector", "scalar", "gpsimd", "dma")
LANE_TITLES = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd", "dma": "DMA",
               "sync": "Sync"}
_PARTIAL = " ▏▎▍▌▋▊▉"
_LEVELS = " ▁▂▃▄▅▆▇█"
_LABEL = 8


def lanes_of(record) -> list[str]:
    """The five engines of the issue, plus Sync when it did anything."""
    lanes = list(ENGINE_LANES)
    if record is not None and record.engine_percent("sync") > 0:
        lanes.insert(4, "sync")
    return lanes


def bar(fraction: float, width: int) -> str:
    fraction = max(0.0, min(1.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_PARTIAL[part] if part and full < width else "")
    return text.ljust(width)


class EngineBars(Widget):
    """Active time per engine as a percent of the kernel's total time."""

    DEFAULT_CSS = """
    EngineBars { height: auto; }
    """

    record = reactive(None, layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(lanes_of(self.record)) if self.record is not None else 1

    def render(self) -> Content:
        record = self.record
        if record is None:
            return Content.styled("No utilisation yet: run the task (r).", "$text-muted")
        width = max(4, self.size.width - _LABEL - 8)
        lines: list[Content] = []
        for lane in lanes_of(record):
            pct = record.engine_percent(lane)
            lines.append(Content.assemble(
                (f"{LANE_TITLES[lane]:<{_LABEL}}", "bold"),
                (bar(pct / 100.0, width), f"$nk-engine-{lane}"),
                (f" {pct:5.1f}%", ""),
            ))
        return Content("\n").join(lines)


class TimelineStrip(Widget):
    """When each engine was busy: one row per engine, one cell per time slice, taller = busier."""

    DEFAULT_CSS = """
    TimelineStrip { height: auto; }
    """

    record = reactive(None, layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(lanes_of(self.record)) + 1 if self.record is not None and self.record.timeline else 1

    def render(self) -> Content:
        record = self.record
        if record is None:
            return Content.styled("No timeline yet.", "$text-muted")
        if not record.timeline:
            return Content.styled(f"This {record.source} record has no per-engine timeline.", "$text-muted")
        lanes = lanes_of(record)
        bins = max(4, self.size.width - _LABEL)
        busy = record.utilisation_bins(bins, tuple(lanes))
        lines: list[Content] = []
        for lane in lanes:
            cells = "".join(_LEVELS[min(8, round(f * 8))] for f in busy.get(lane, [0.0] * bins))
            lines.append(Content.assemble((f"{LANE_TITLES[lane]:<{_LABEL}}", "bold"),
                                          (cells, f"$nk-engine-{lane} on $boost")))
        end = format_seconds(record.total_time)
        axis = "0".ljust(bins - len(end)) + end
        lines.append(Content.assemble(" " * _LABEL, (axis, "$text-muted")))
        return Content("\n").join(lines)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def format_si(n: float | None, unit: str) -> str:
    """A count with an SI prefix: 537M FLOP, 76.8k ops, 0 FLOP."""
    if n is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.3g}{prefix} {unit}"
    return f"{n:.0f} {unit}"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"

"""Engine utilisation bars and the timeline strip, drawn to the widget's width."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from nkitui.common import units

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
                (f" {units.percent(pct):>6}", ""),
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
        # the timeline spans the kernel's core time (a launch overhead, when the record has one, is not on it)
        span = record.core_time if record.core_time else record.total_time
        end = units.time_s(span) + (" core" if record.core_time and record.launch_overhead else "")
        axis = "0".ljust(bins - len(end)) + end
        lines.append(Content.assemble(" " * _LABEL, (axis, "$text-muted")))
        return Content("\n").join(lines)



"""The roofline: the target's memory and compute ceilings, and where the kernel sits (log-log).

Axes are drawn in log10 units with labelled powers of ten (plotext's own log scale fails on some
ranges), and a drawing failure shows a line of text instead of taking the app down.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual_plotext import PlotextPlot


def _label(exponent: int) -> str:
    value = 10.0 ** exponent
    return f"{value:g}"


class RooflinePlot(PlotextPlot):
    DEFAULT_CSS = """
    RooflinePlot { height: 16; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.point = None
        self.label = "estimated"

    def show_point(self, point, label: str) -> None:
        """`point` is a perf RooflinePoint (or None to clear)."""
        self.point = point
        self.label = label
        self.replot()

    def on_mount(self) -> None:
        self.replot()

    def render(self):
        try:
            return super().render()
        except Exception as exc:  # plotext can fail on degenerate ranges: say so, keep running
            return Text(f"The roofline could not be drawn ({type(exc).__name__}: {exc}).", style="italic")

    def replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        p = self.point
        if p is None:
            plt.title("Roofline: no run yet")
            self.refresh()
            return
        peak, bandwidth = p.peak_flops_per_s, p.memory_bytes_per_s
        ridge = peak / bandwidth
        ai = p.arithmetic_intensity
        has_point = ai > 0 and p.achieved_flops_per_s > 0
        lo = math.floor(math.log10(min(ai, ridge) if has_point else ridge)) - 1
        hi = math.ceil(math.log10(max(ai, ridge) if has_point else ridge)) + 1
        steps = 64
        xs = [lo + (hi - lo) * i / (steps - 1) for i in range(steps)]
        roof = [math.log10(min(peak, 10.0 ** x * bandwidth) / 1e12) for x in xs]
        plt.plot(xs, roof, label="roof", marker="braille")
        plt.vline(math.log10(ridge))
        ys = list(roof)
        if has_point:
            y = math.log10(p.achieved_flops_per_s / 1e12)
            ys.append(y)
            plt.scatter([math.log10(ai)], [y], label=f"kernel ({self.label})", marker="●")
            plt.title(f"{p.target} {p.dtype}: {p.bound}-bound, {p.achieved_percent_of_attainable:.0f}% of attainable")
        else:
            # No TensorE FLOPs (elementwise, reductions): the kernel sits at AI = 0, off the log axis.
            plt.title(f"{p.target}: no TensorE FLOPs, so bandwidth is the only roof that applies")
        x_ticks = list(range(lo, hi + 1))
        plt.xticks(x_ticks, [_label(t) for t in x_ticks])
        y_ticks = list(range(math.floor(min(ys)), math.ceil(max(ys)) + 1))
        plt.yticks(y_ticks, [_label(t) for t in y_ticks])
        plt.xlabel("FLOP/byte (log)")
        plt.ylabel("TFLOP/s (log)")
        self.refresh()

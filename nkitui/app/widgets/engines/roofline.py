"""The roofline: the target's memory and compute ceilings, and where the kernel sits (log-log)."""

from __future__ import annotations

from textual_plotext import PlotextPlot


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
        low = (min(ai, ridge) if ai > 0 else ridge) / 16
        high = (max(ai, ridge) if ai > 0 else ridge) * 16
        steps = 48
        xs = [low * (high / low) ** (i / (steps - 1)) for i in range(steps)]
        roof = [min(peak, x * bandwidth) / 1e12 for x in xs]
        plt.xscale("log")
        plt.yscale("log")
        plt.plot(xs, roof, label="roof (TFLOP/s)", marker="braille")
        plt.vline(ridge)
        if ai > 0 and p.achieved_flops_per_s > 0:
            plt.scatter([ai], [p.achieved_flops_per_s / 1e12], label=f"kernel ({self.label})", marker="●")
            plt.title(f"{p.target} {p.dtype}: {p.bound}-bound, {p.achieved_percent_of_attainable:.0f}% of attainable")
        else:
            # No TensorE FLOPs (elementwise, reductions): the kernel sits at AI = 0, off the log axis.
            plt.title(f"{p.target}: no TensorE FLOPs, so bandwidth is the only roof that applies")
        plt.xlabel("arithmetic intensity (FLOP/byte)")
        self.refresh()

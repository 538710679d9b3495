"""Performance of NKI kernels: an engine-utilisation cost model on the emulator's instruction trace,
measured-profile parsing, roofline and speed of light (see docs/costmodel.md).

Everything returns a `PerfRecord` labelled `source="estimated"` or `source="measured"`.
"""

from nkitui.perf.compare import Comparison, MetricDelta, compare
from nkitui.perf.estimate import estimate, estimate_latency
from nkitui.perf.hardware import TARGETS, TargetSpec, get_target
from nkitui.perf.profiles import ProfileError, load_profile, parse_profile
from nkitui.perf.roofline import (
    RooflinePoint,
    SpeedOfLight,
    Work,
    minimal_work,
    roofline_point,
    speed_of_light,
    speed_of_light_for,
)
from nkitui.perf.summary import SUMMARY_KEYS, EngineStats, HotLine, PerfRecord

__all__ = [
    "TARGETS", "SUMMARY_KEYS", "Comparison", "EngineStats", "HotLine", "MetricDelta", "PerfRecord",
    "ProfileError", "RooflinePoint", "SpeedOfLight", "TargetSpec", "Work", "compare", "estimate", "estimate_latency",
    "get_target", "load_profile", "minimal_work", "parse_profile", "roofline_point", "speed_of_light",
    "speed_of_light_for",
]

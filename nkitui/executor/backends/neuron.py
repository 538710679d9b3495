"""The `neuron` backend: a Trainium/Inferentia device runs the kernel through the Neuron SDK.

  compile   legacy: neuronxcc.nki.baremetal(kernel, save_neff_name=..., artifacts_dir=...)
            new:    the @nki.jit kernel itself (numpy arguments -> compile and run standalone);
                    NEURON_FRAMEWORK_DEBUG=1 keeps the NEFF for the profiler
  run       one launch per seed, outputs compared with the reference like every backend
  profile   host wall-clock timing of repeated launches (warm-up, adaptive stopping, median and
            spread, every timed launch re-checked), legacy nki.benchmark device-latency
            percentiles where available, then a profile of the NEFF captured with Neuron Explorer
            (or neuron-profile) and its summary parsed into the cost model's PerfRecord fields.

Written from the documented APIs (nki-spec.md §1.2-1.3, §8) and tested against the fake SDK and
fake tools in tests/fakes/; it has not been run on a real device by nkitui's developers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nkitui.executor.backends.base import Backend, ProfileOutcome, launch_target
from nkitui.executor.backends.detect import Probe
from nkitui.executor.backends.sdk import sdk_module, sdk_namespace, target_env
from nkitui.executor.timing import TimingPolicy, measure
from nkitui.task.model import Task

BENCHMARK_PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)


class NeuronBackend(Backend):
    name = "neuron"
    allows_subprocess = True  # the compiler and the profiler are separate programs

    def __init__(self, task: Task, target: str, reason: str = "", probe: Probe | None = None,
                 timing: TimingPolicy | None = None) -> None:
        super().__init__(task, target, reason)
        self.probe = probe or Probe()
        self.namespace = sdk_namespace(task.kernel.namespace if task.kernel else None, self.probe)
        self.timing_policy = timing or TimingPolicy()
        self.artifacts = Path.cwd() / "nkitui-artifacts"
        self.sdk: Any = None
        self.device_info: Any = None
        self._compile_started = 0.0

    def versions(self) -> dict[str, Any]:
        pkg = self.probe.new if self.namespace == "new" else self.probe.legacy
        out: dict[str, Any] = {"sdk": {pkg.module: pkg.version, "fake": pkg.fake}, "devices": list(self.probe.devices),
                               "tools": {k: v for k, v in self.probe.tools.items() if v}}
        if self.device_info is not None:
            out["neuron_ls"] = self.device_info
        return out

    def _read_device_info(self) -> Any:
        """`neuron-ls --json-output` (device count, cores, memory), when the tool is there."""
        import json
        import subprocess

        exe = self.probe.tools.get("neuron-ls")
        if not exe:
            return None
        try:
            proc = subprocess.run([exe, "--json-output"], capture_output=True, text=True, timeout=30)
            return json.loads(proc.stdout) if proc.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None

    def preload(self) -> None:
        self.sdk = sdk_module(self.namespace, self.probe)
        self.device_info = self._read_device_info()

    def prepare(self) -> None:
        self.ensure_preloaded()
        self.artifacts.mkdir(parents=True, exist_ok=True)
        os.environ["NEURON_FRAMEWORK_DEBUG"] = "1"  # keep the NEFF for the profiler
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target_env(self.target)
        self._compile_started = time.time()
        super().prepare()

    def wrap(self, kernel: Any) -> Callable[..., Any]:
        if self.namespace == "legacy":
            compiled = self.sdk.baremetal(kernel, save_neff_name=str(self.artifacts / "kernel.neff"),
                                          artifacts_dir=str(self.artifacts))
            return launch_target(compiled, self.task)
        return launch_target(kernel, self.task)  # new namespace: @nki.jit on numpy runs standalone

    # -- profile ---------------------------------------------------------------------------------
    def profile(self, args: list[np.ndarray], reference_outputs: dict[str, np.ndarray] | None,
                recheck: Callable[[dict[str, np.ndarray]], str | None], trace: Any, log: Callable[[str], None]) -> ProfileOutcome:
        notes: list[str] = []
        stats = measure(lambda: self._call(self._launch, args)[0], self.timing_policy, recheck=recheck)
        timing = stats.to_dict("host wall-clock per launch (includes host-device transfers)")
        timing["policy"] = self.timing_policy.to_dict()
        log(f"timed {stats.n} launches after {stats.warmup} warm-up: median {timing['median_us']:.1f} µs, "
            f"IQR {timing['iqr_us']:.1f} µs ({stats.stopped})")
        if self.namespace == "legacy":
            try:
                timing["device"] = self._benchmark(args)
            except Exception as exc:  # noqa: BLE001 - optional extra
                notes.append(f"nki.benchmark failed: {type(exc).__name__}: {exc}")
        utilisation = None
        try:
            utilisation = self._capture_profile(log)
        except Exception as exc:  # noqa: BLE001 - timing still stands without a profile
            notes.append(f"no hardware profile: {exc}")
        if utilisation is not None:
            total = utilisation.get("total_time")
            if isinstance(total, (int, float)) and total > 0:
                timing["profile_total_time_us"] = total * 1e6
        return ProfileOutcome(timing=timing, utilisation=utilisation, notes=notes)

    def _benchmark(self, args: list[np.ndarray]) -> dict[str, Any]:
        """Legacy nki.benchmark: neuron-bench latency percentiles (µs) of the device."""
        warmup, iters = self.timing_policy.warmup, max(self.timing_policy.min_repeats, 10)
        bench = self.sdk.benchmark(warmup=warmup, iters=iters, save_neff_name=str(self.artifacts / "bench.neff"))(self.kernel)
        self._call(launch_target(bench, self.task), args)
        result: Any = getattr(bench, "benchmark_result", None)  # the SDK's untyped record (None fails below, noted)
        latency = result.nc_latency
        pct = {f"p{p}": float(latency.get_latency_percentile(p)) for p in BENCHMARK_PERCENTILES}
        return {"method": "nki.benchmark (neuron-bench device latency; includes host-device transfer)",
                "warmup": warmup, "iters": iters, "percentiles_us": pct, "median_us": pct["p50"]}

    def _capture_profile(self, log: Callable[[str], None]) -> dict[str, Any] | None:
        from nkitui.executor.backends.profiler import ProfileCaptureError, capture, find_neff

        neff = find_neff(Path.cwd(), self._compile_started)
        if neff is None:
            raise ProfileCaptureError("the compiler left no .neff file to profile (NEURON_FRAMEWORK_DEBUG=1 was set)")
        cap = capture(neff, Path.cwd() / "nkitui-profile", self.probe.tools)
        log(f"captured a profile with {cap.tool} in {cap.duration_s:.1f} s")
        record = parse_measured_summary(cap.summary, cap.tool, self.target, self.kernel_label)
        record.setdefault("notes", []).append(f"captured with: {'; '.join(cap.commands)}")
        return record


def parse_measured_summary(summary: Any, tool: str, target: str, kernel: str) -> dict[str, Any]:
    """A profiler summary document as PerfRecord JSON (nkitui.perf's parser, source="measured")."""
    from nkitui.perf.profiles import parse_profile

    return parse_profile(summary, source_name=f"{tool} summary-json", target=target, kernel=kernel).to_json()

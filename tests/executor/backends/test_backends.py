"""The simulator and neuron backends against the fake Neuron SDK and fake profiler tools (real
worker processes), and `auto`'s choice with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nkitui.evaluate.run import start_evaluation

from tests.helpers.evaluation import FAKE_PLACEHOLDER, FAKE_SDK, fake_sdk_env, quick_request, write_task

NEW_KERNEL = """\
import numpy as np
import nki


@nki.jit
def add_kernel(a, b):
    return a + b
"""

LEGACY_KERNEL = """\
import numpy as np
import neuronxcc.nki as nki


@nki.jit
def add_kernel(a, b):
    return a + b
"""

CHEATING_KERNEL = """\
import numpy as np
import nki

CALLS = {"n": 0}


@nki.jit
def add_kernel(a, b):
    # Correct for the verified launches, then returns a cached/zero result once it is being timed.
    CALLS["n"] += 1
    return a + b if CALLS["n"] <= 2 else np.zeros_like(a)
"""

FAST_TIMING = {"warmup": 1, "min_repeats": 5, "max_repeats": 30, "max_time_s": 1.0, "target_rel_ci": 0.5}


def run(task_dir, *, env, **overrides):
    overrides.setdefault("python_path", [str(FAKE_SDK)])
    handle = start_evaluation(quick_request(task_dir, extra_env=env, timing=FAST_TIMING, **overrides))
    for _ in handle.events():
        pass
    return handle.result


def test_auto_uses_the_sdk_simulator_when_there_is_no_device(tmp_path):
    task = write_task(tmp_path / "sim", kernel=NEW_KERNEL)
    result = run(task, env=fake_sdk_env(), precision=True)
    assert result.status == "passed", result.error
    assert result.backend == "simulator"
    assert "fake SDK" in result.backend_reason and "no Neuron device" in result.backend_reason
    assert result.versions["sdk"] == {"nki": "0.6.0+fake", "fake": True}
    phases = {p.name: p for p in result.phases}
    assert phases["precision"].status == "ok", "nki.simulate has the NKI_PRECISE_FP switch"
    if phases["profile"].status == "skipped":
        assert "emulator" in phases["profile"].detail
    else:
        assert result.utilisation.source == "estimated"


def test_neuron_backend_times_rechecks_and_profiles_with_neuron_explorer(tmp_path):
    log = tmp_path / "tools.log"
    task = write_task(tmp_path / "hw", kernel=NEW_KERNEL)
    result = run(task, env=fake_sdk_env(device="trn2", log=log))
    assert result.status == "passed", result.error
    assert result.backend == "neuron" and "running on hardware" in result.backend_reason
    assert result.versions["neuron_ls"][0]["nc_count"] == 8
    t = result.timing
    assert t.kind == "measured" and t.samples >= 5 and t.warmup == 1
    assert t.min_us <= t.median_us <= t.max_us
    assert t.ci95_us[0] <= t.median_us <= t.ci95_us[1]
    assert t.rechecked == t.samples and t.recheck_failure_count == 0
    assert t.stopped
    assert next(c for c in result.checks if c.id == "timed-recheck").passed is True
    u = result.utilisation
    assert u.source == "measured" and u.tool == "neuron-explorer summary-json"
    assert abs(u.engines["tensor"].active_time_percent - 24.6) < 1e-9
    assert abs(t.profile_total_time_us - 182.4) < 1e-6
    commands = log.read_text().splitlines()
    assert any(c.startswith("neuron-explorer capture -n ") and "--profile-nth-exec=2" in c for c in commands)
    assert any(c.startswith("neuron-explorer view -d ") and c.endswith("--output-format summary-json") for c in commands)


def test_legacy_neuron_backend_with_neuron_profile_and_nki_benchmark(tmp_path):
    task = write_task(tmp_path / "legacy", kernel=LEGACY_KERNEL)
    result = run(task, env=fake_sdk_env(device="trn1", tools=("legacy",)), backend="neuron", target="trn1")
    assert result.status == "passed", result.error
    assert result.versions["sdk"]["neuronxcc.nki"] == "2.26.0+fake"
    device = result.timing.device
    assert device.percentiles_us["p50"] == 2309.0 and device.median_us == 2309.0
    u = result.utilisation
    assert u.tool == "neuron-profile summary-json"
    assert abs(u.engines["tensor"].active_time_percent - 21.0) < 1e-9, "fractions read as 0-1"
    assert any("fractions" in n for n in u.notes)


def test_timed_launches_that_change_their_outputs_fail_the_recheck(tmp_path):
    task = write_task(tmp_path / "cheat", kernel=CHEATING_KERNEL)
    result = run(task, env=fake_sdk_env(device="trn2"), backend="neuron")
    check = next(c for c in result.checks if c.id == "timed-recheck")
    assert check.passed is False and "differs from the verified launch" in check.detail
    assert result.status == "failed"
    assert next(c for c in result.checks if c.id == "output:out").passed is True


def test_without_profiler_tools_timing_still_stands(tmp_path):
    task = write_task(tmp_path / "notools", kernel=NEW_KERNEL)
    result = run(task, env=fake_sdk_env(device="trn2", tools=()), backend="neuron")
    assert result.status == "passed"
    assert result.timing.kind == "measured"
    assert result.utilisation is None
    assert any("neither neuron-explorer nor neuron-profile is on PATH" in n for n in result.notes)


def test_asking_for_hardware_without_a_device_is_an_invalid_request(tmp_path):
    task = write_task(tmp_path / "nodev", kernel=NEW_KERNEL)
    result = run(task, env=fake_sdk_env(), backend="neuron")
    assert result.status == "invalid" and result.exit_code == 2
    assert result.error.kind == "backend-unavailable"
    assert "needs a Neuron device" in result.error.message and "/dev/neuron* absent" in result.error.message


def test_the_fake_device_switch_is_ignored_without_the_fake_sdk(tmp_path):
    task = write_task(tmp_path / "nosdk")
    result = run(task, env=fake_sdk_env(device="trn2"), python_path=[])
    assert result.backend == "emulator"
    assert "ignored without the fake SDK" in result.backend_reason
    assert result.status == "passed", (result.error, [c for c in result.checks if not c.passed], result.sandbox)


def _probe(pythonpath: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-P", "-m", "nkitui.executor.backends.detect"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_detection_tells_the_pypi_placeholder_from_a_real_package():
    here = os.pathsep.join([str(FAKE_PLACEHOLDER), os.environ.get("PYTHONPATH", "")])
    probe = _probe(here)
    assert probe["new"]["available"] is False
    assert "placeholder" in probe["new"]["note"]
    assert probe["legacy"] == {"module": "neuronxcc.nki", "available": False, "version": None, "fake": False,
                               "note": "not installed"}
    fake = _probe(str(FAKE_SDK))
    assert fake["new"]["available"] and fake["new"]["fake"] and fake["new"]["version"] == "0.6.0+fake"


def test_an_isolated_probe_sees_what_a_worker_sees(monkeypatch):
    from nkitui.executor.backends.detect import probe_isolated

    monkeypatch.delenv("PYTHONPATH", raising=False)
    probe = probe_isolated(extra_env=fake_sdk_env(device="trn2"), python_path=[str(FAKE_SDK)])
    assert probe.has_device and probe.new.fake and probe.legacy.version == "2.26.0+fake"
    assert probe.tools["neuron-explorer"].endswith("neuron-explorer")
    assert "nki" not in sys.modules or getattr(sys.modules["nki"], "__nkitui_fake__", False) is False

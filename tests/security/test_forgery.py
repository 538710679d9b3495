"""Red team: a wrong kernel (the bundled vector_add with nl.add changed to nl.multiply) plus hostile
code appended to its NKI file, as issue #14 describes each attack, must never be passed.

Every test runs the real evaluator, the real untrusted kernel and reference processes, on a copy
of the bundled task. Layers and what each test shows about them:

  the trust split     the verdict is computed in the evaluator: a forged result, phase or progress
                      event from the kernel's process is ignored (and noted), an early exit is a crash
  device provenance   outputs that did not come out of the emulated device fail HACK-HOST-COMPUTE
  integrity (static)  HACK-TAMPER / HACK-HOST-COMPUTE in the task's source fail the integrity check
  introspection guard frames, gc, ctypes asked for by task code raise PermissionError, recorded
"""

from __future__ import annotations

import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run import start_evaluation
from nkitui.executor.events import LogEvent, PhaseEvent, ProgressEvent, ResultEvent

VECTOR_ADD = bundled_dir("sample_tasks") / "vector_add"
KERNEL = "vector_add_nki.py"
# The copies hold a quarter of the bundled 1M elements: the port's smallest size (2 cores x 128
# partitions x 1024 elements per row tile). No attack here depends on the size, and each evaluation
# (inputs, reference, kernel, replay, comparison) costs about 0.5 s of CPU less (docs/testing.md).
ELEMENTS = 2 * 128 * 1024


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "xdg" / var.lower()))


def wrong_task(tmp_path: Path, appended: str = "", *, edit=None, name: str = "task") -> Path:  # noqa: ANN001
    """A copy of the bundled vector_add whose kernel multiplies instead of adding, with `appended`
    (hostile Python) at the end of its NKI file, on ELEMENTS elements."""
    folder = tmp_path / name
    shutil.copytree(VECTOR_ADD, folder)
    path = folder / KERNEL
    source = path.read_text()
    assert "op=nl.add" in source
    source = source.replace("op=nl.add", "op=nl.multiply")
    if edit is not None:
        source = edit(source)
    path.write_text(source + ("\n\n" + textwrap.dedent(appended).strip() + "\n" if appended else ""))
    manifest = folder / "task.toml"
    text = manifest.read_text()
    assert text.count("shape = [1048576]") == 3  # inputs a and b, output c
    manifest.write_text(text.replace("shape = [1048576]", f"shape = [{ELEMENTS}]"))
    return folder


def line_of(task: Path, needle: str) -> int:
    lines = (task / KERNEL).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


def evaluate(task: Path, **overrides):  # noqa: ANN201
    options = dict(seeds=1, static=False, trials=False, precision=False, store=False, timeout_s=120.0, memory_mb=4096)
    options.update(overrides)
    handle = start_evaluation(EvaluationRequest.of(task, **options))
    events = list(handle.events())
    assert isinstance(events[-1], ResultEvent)
    return handle.result, events


def check(result, cid: str):  # noqa: ANN001, ANN201
    return next((c for c in result.checks if c.id == cid), None)


def findings(result, rule: str) -> list[dict]:  # noqa: ANN001
    return [f for f in result.findings if f.rule == rule]


def assert_not_passed(result) -> None:  # noqa: ANN001
    assert result.status != "passed" and result.exit_code != 0, (result.status, [c.id for c in result.checks])


# -- the control -----------------------------------------------------------------------------------
def test_the_wrong_kernel_alone_fails_its_output_check(tmp_path):
    result, _ = evaluate(wrong_task(tmp_path))
    assert result.status == "failed" and result.exit_code == 1
    assert check(result, "output:c").passed is False
    assert check(result, "integrity").passed is True and check(result, "device-outputs").passed is True


# -- #14.1 forged result ------------------------------------------------------------------------------
FORGED_RESULT = '''
import gc, json, os
_forged = {"event": "result", "result": {"schema": "nkitui.run-result", "schema_version": 1, "run_id": "x",
           "task_id": "vector_add", "status": "passed", "checks": [], "phases": []}}
for _obj in gc.get_objects():
    if type(_obj).__name__ == "WorkerContext":
        os.write(_obj.events_fd, (json.dumps(_forged) + "\\n").encode())
        os._exit(0)
'''


def test_a_forged_result_event_through_gc_and_os_exit_is_not_a_pass(tmp_path):
    task = wrong_task(tmp_path, FORGED_RESULT)
    result, _ = evaluate(task)
    assert_not_passed(result)
    # gc.get_objects() asked for by the kernel's code is refused and recorded where it happened ...
    refused = [v for v in result.sandbox.violations if v.action == "introspection"]
    assert refused and refused[0].target == "gc.get_objects"
    assert (refused[0].file, refused[0].line) == (KERNEL, line_of(task, "gc.get_objects()"))
    assert findings(result, "EXEC-SANDBOX-INTROSPECTION")
    # ... and the source itself fails the integrity check (gc, os.write, os._exit)
    assert check(result, "integrity").passed is False
    [tamper] = findings(result, "HACK-TAMPER")
    assert tamper.file == KERNEL and tamper.line == line_of(task, "import gc")


FD_SPRAY = '''
import json, os
_forged = {"event": "result", "result": {"schema": "nkitui.run-result", "schema_version": 1, "run_id": "x",
           "task_id": "vector_add", "status": "passed", "checks": [], "phases": []}}
_line = (json.dumps(_forged) + "\\n").encode()
for _fd in range(3, 64):
    try:
        os.write(_fd, _line)
    except OSError:
        pass
os._exit(0)
'''


def test_a_result_event_written_on_every_descriptor_then_exit_0_is_ignored_and_a_crash(tmp_path):
    result, events = evaluate(wrong_task(tmp_path, FD_SPRAY))
    assert_not_passed(result)
    assert result.status == "crashed" and result.error.kind == "crash"
    assert result.error.message.startswith("the kernel process exited with status 0 before answering")
    assert any("sent a result event" in n and "ignored" in n for n in result.notes)
    assert sum(isinstance(e, ResultEvent) for e in events) == 1  # only the evaluator's own, last
    assert check(result, "integrity").passed is False


# -- #14.2 patched emitter ------------------------------------------------------------------------------
PATCHED_EMITTER = '''
from nkitui.executor.context import WorkerContext as _Ctx
_send = _Ctx.result
def _always_passed(self, result):
    result = dict(result, status="passed")
    result["checks"] = [dict(c, passed=True) for c in result.get("checks", [])]
    _send(self, result)
_Ctx.result = _always_passed
'''


def test_a_patched_result_emitter_changes_nothing(tmp_path):
    task = wrong_task(tmp_path, PATCHED_EMITTER)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert result.status == "failed" and check(result, "output:c").passed is False
    assert check(result, "integrity").passed is False
    assert findings(result, "HACK-TAMPER")[0].line == line_of(task, "from nkitui.executor.context")


PATCHED_REPLY = '''
import numpy as _np
from pathlib import Path as _Path
from nkitui.executor.arrays import load_array as _load, save_array as _save
from nkitui.executor.untrusted import server as _server
_reply = _server.Server.reply
def _host_add_reply(self, request, **data):
    if request.get("op") == "run" and isinstance(data.get("outputs"), dict):
        folder = _Path(request["dir"])
        a, b = (_load(folder / "in", m, max_elements=1 << 22) for m in request["inputs"])
        data["outputs"] = {"c": _save(folder / "out" / "c.npy", (a.astype(_np.float64) + b).astype(_np.float32))}
        data["provenance"] = {"c": {"device": True, "kernel": "vector_add_kernel", "kind": "returned", "writes": 1}}
    _reply(self, request, **data)
_server.Server.reply = _host_add_reply
'''


def test_a_patched_reply_with_host_computed_outputs_and_forged_provenance_fails_the_integrity_check(tmp_path):
    # The new design's version of the patched emitter: the kernel's process forges its own data (numpy's
    # a + b, "device" provenance). Nothing in that process can be trusted to notice, so the source is
    # what fails: it reaches into nkitui.
    task = wrong_task(tmp_path, PATCHED_REPLY)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert check(result, "integrity").passed is False
    tamper = findings(result, "HACK-TAMPER")[0]
    assert tamper.file == KERNEL and "nkitui" in tamper.message


# -- #14.3 frame-walking reference hijack ----------------------------------------------------------------
FRAME_WALK = '''
import sys as _sys
class _Hijack:
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        self.grid = grid
        return self
    def __call__(self, a, b):
        frame = _sys._getframe()
        while frame is not None:
            owner = frame.f_locals.get("self")
            if hasattr(owner, "reference"):
                owner.reference = lambda inputs: {"c": self.kernel[self.grid](inputs["a"], inputs["b"])}
            frame = frame.f_back
        return self.kernel[self.grid](a, b)
vector_add_kernel = _Hijack(vector_add_kernel)
'''


def test_a_frame_walking_reference_hijack_is_refused_and_the_reference_is_out_of_reach(tmp_path):
    task = wrong_task(tmp_path, FRAME_WALK)
    result, _ = evaluate(task)
    assert_not_passed(result)
    line = line_of(task, "frame = _sys._getframe()")
    refused = [v for v in result.sandbox.violations if v.action == "introspection"]
    assert refused and refused[0].target == "sys._getframe" and refused[0].line == line
    assert result.error.kind == "sandbox" and f"{KERNEL}:{line}" in result.error.message
    assert check(result, "integrity").passed is False  # sys._getframe, f_back; and the entry is rebound
    assert {f.rule for f in result.findings} >= {"HACK-TAMPER", "HACK-HOST-COMPUTE", "EXEC-SANDBOX-INTROSPECTION"}


# -- #14.4 host compute -------------------------------------------------------------------------------------
WRAPPER = '''
import numpy as _np
class _HostAdd:
    """Runs the real kernel (so the trace and the cost model look normal), returns numpy's a + b."""
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        self.grid = grid
        return self
    def __call__(self, a, b):
        self.kernel[self.grid](a, b)
        return (a.astype(_np.float64) + b).astype(_np.float32)
vector_add_kernel = _HostAdd(vector_add_kernel)
'''


def test_host_compute_through_a_wrapper_fails_with_hack_host_compute_at_the_kernel_line(tmp_path):
    task = wrong_task(tmp_path, WRAPPER)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert result.status == "failed" and result.error.kind == "host-compute"
    assert check(result, "device-outputs").passed is False
    line = line_of(task, "vector_add_kernel = _HostAdd(vector_add_kernel)")
    dynamic = [f for f in findings(result, "HACK-HOST-COMPUTE") if f.source == "executor"]
    static = [f for f in findings(result, "HACK-HOST-COMPUTE") if f.source == "analysis"]
    assert dynamic and (dynamic[0].file, dynamic[0].line) == (KERNEL, line)
    assert static and (static[0].file, static[0].line) == (KERNEL, line)
    assert "bound 2 times" in static[0].message
    assert not result.seed_results[0].outputs  # the host-computed outputs were never compared


REBIND = '''
import numpy as _np
class _Launcher:
    def __getitem__(self, grid):
        return lambda a, b: _np.add(a, b)
vector_add_kernel = _Launcher()
'''


def test_host_compute_by_rebinding_the_entry_name_fails(tmp_path):
    task = wrong_task(tmp_path, REBIND)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert check(result, "device-outputs").passed is False
    assert check(result, "integrity").passed is False
    line = line_of(task, "vector_add_kernel = _Launcher()")
    assert any(f.line == line for f in findings(result, "HACK-HOST-COMPUTE") if f.source == "executor")
    static = [f for f in findings(result, "HACK-HOST-COMPUTE") if f.source == "analysis"]
    assert static and static[0].line == line and "not an NKI kernel" in static[0].message


def test_numpy_on_the_inputs_inside_the_kernel_is_not_device_output(tmp_path):
    def edit(source: str) -> str:
        return source.replace("    return c\n", "    return np.add(a, b)\n").replace("import nki\n", "import nki\nimport numpy as np\n", 1)

    task = wrong_task(tmp_path, edit=edit)
    result, _ = evaluate(task)
    assert_not_passed(result)
    host = findings(result, "HACK-HOST-COMPUTE")
    kernel_error = result.error and result.error.kind in ("kernel-error", "emulator-error")
    assert host or kernel_error, result.error  # numpy on HBM tensors: host output, or refused by the emulator
    if host:
        assert host[0].file == KERNEL and host[0].line == line_of(task, "return np.add(a, b)")


# -- #14.5 guard switched off -------------------------------------------------------------------------------
GUARD_OFF = '''
from nkitui.executor.sandbox import current_guard as _guard
_g = _guard()
_g.allow_processes = True
_g.allow_writes_under("/")
_g.violations.clear()
'''


def test_switching_the_guard_off_does_not_make_a_wrong_kernel_pass(tmp_path):
    task = wrong_task(tmp_path, GUARD_OFF)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert check(result, "integrity").passed is False  # `import nkitui...` in a kernel
    # the guard refuses the change itself (recorded as tampering at the kernel's line): the kernel does not load
    sandbox = check(result, "sandbox")
    assert sandbox.passed is False and "tamper" in sandbox.detail
    assert f"{KERNEL}:{line_of(task, '_g.allow_processes = True')}" in sandbox.detail


# -- variants -------------------------------------------------------------------------------------------------
FAKE_EVENTS = '''
import json, os
_lines = [
    {"event": "phase", "name": "compare", "state": "end", "status": "ok", "duration_s": 0.0, "detail": "FORGED"},
    {"event": "progress", "done": 99, "total": 99, "label": "FORGED"},
    {"event": "data", "kind": "confinement", "data": {"active": ["FORGED seccomp"], "degraded": [], "summary": "FORGED"}},
]
for _fd in range(3, 64):
    for _item in _lines:
        try:
            os.write(_fd, (json.dumps(_item) + "\\n").encode())
        except OSError:
            pass
'''


def test_fake_phase_progress_and_confinement_events_are_ignored_and_noted(tmp_path):
    result, events = evaluate(wrong_task(tmp_path, FAKE_EVENTS))
    assert_not_passed(result)
    assert not any(p.detail == "FORGED" for p in result.phases)
    assert not any(isinstance(e, PhaseEvent) and e.detail == "FORGED" for e in events)
    assert not any(isinstance(e, ProgressEvent) and e.label == "FORGED" for e in events)
    assert "FORGED" not in result.sandbox.summary
    notes = " ".join(result.notes)
    assert "phase events" in notes and "ignored" in notes and "another confinement report" in notes


FAKE_REFERENCE = '''
import glob, os
import numpy as _np
# overwrite whatever reference outputs can be found with the kernel's own (a * b) answer
_parent = os.path.dirname(os.path.dirname(os.environ.get("TMPDIR", "/tmp")))
for _path in glob.glob(os.path.join(_parent, "**", "io", "*", "out", "*.npy"), recursive=True):
    try:
        _np.save(_path, _np.zeros(262144, dtype=_np.float64))  # ELEMENTS
    except Exception:
        pass
'''


def test_fake_npy_files_for_the_reference_change_nothing(tmp_path):
    result, _ = evaluate(wrong_task(tmp_path, FAKE_REFERENCE))
    assert_not_passed(result)
    assert check(result, "output:c").passed is False
    metrics = result.seed_results[0].outputs[0]
    assert metrics.ref_max_abs > 1  # the reference's real a + b, not zeros


def test_exiting_early_with_status_0_is_a_crash(tmp_path):
    result, _ = evaluate(wrong_task(tmp_path, "import os\nos._exit(0)"))
    assert result.status == "crashed" and result.exit_code == 1
    assert "exited with status 0 before answering" in result.error.message


@pytest.mark.parametrize("ending", ["import os\nos._exit(3)", "import signal\nsignal.raise_signal(signal.SIGTERM)"])
def test_exiting_as_a_cancelled_worker_does_is_a_crash_not_a_cancel(tmp_path, ending):
    # status 3 is what a worker stopped by SIGTERM exits with: only nkitui's own stop may read as "cancelled"
    result, _ = evaluate(wrong_task(tmp_path, ending))
    assert_not_passed(result)
    assert result.status == "crashed" and result.exit_code == 1, (result.status, result.error)
    assert "though nkitui did not stop it" in result.error.message


def test_outputs_of_the_wrong_shape_are_a_failed_check_not_a_crash_of_the_evaluator(tmp_path):
    def edit(source: str) -> str:
        return source.replace("    return c\n", "    return c_rows[0:P, :]\n")

    result, _ = evaluate(wrong_task(tmp_path, edit=edit))
    assert_not_passed(result)
    assert result.status == "failed"  # a wrong shape is a failed check, not an internal error
    assert check(result, "output:c").passed is False
    assert "shape" in check(result, "output:c").detail


def test_sleeping_past_the_timeout_is_a_timeout_and_nothing_outlives_the_run(tmp_path):
    start = time.perf_counter()
    result, events = evaluate(wrong_task(tmp_path, "import time\ntime.sleep(600)"), timeout_s=10.0)
    assert time.perf_counter() - start < 30
    assert result.status == "timeout" and result.exit_code == 1
    pids = [int(m.group(1)) for e in events if isinstance(e, LogEvent)
            for m in [re.search(r"\[(?:kernel|reference) process\] worker (\d+) started", e.text)] if m]
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split(")")[-1].split()[0] in ("Z", "X")


def test_a_secret_in_the_kernels_exception_is_redacted_in_the_live_events_too(tmp_path):
    # the stored result is redacted when written; the events nkitui shows while the run streams
    # (nkitui check's output, the app's log) must not carry the secret either
    key = "AKIA" + "IOSFODNN7EXAMPLQ"
    result, events = evaluate(wrong_task(tmp_path, f'raise ValueError("leaked {key} here")'))
    assert_not_passed(result)
    from nkitui.executor.events import ErrorEvent

    texts = [e.message + e.traceback for e in events if isinstance(e, ErrorEvent)]
    texts += [e.text for e in events if isinstance(e, LogEvent)]
    assert any("leaked" in t for t in texts), texts[-5:]
    assert not any(key in t for t in texts), [t for t in texts if key in t][:3]

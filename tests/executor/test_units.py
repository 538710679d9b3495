"""Pieces of the executor that need no child process: protocol, log bounds, environment, exit
words, timing statistics, backend choice."""

from __future__ import annotations

import math
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkitui.executor.backends.base import BackendUnavailable
from nkitui.executor.backends.detect import Probe, SdkPackage
from nkitui.executor.backends.select import choose_backend
from nkitui.executor.env import scrubbed_env
from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, ProgressEvent, ResultEvent, decode_line, encode
from nkitui.executor.exitstatus import describe_exit
from nkitui.executor.limits import Limits
from nkitui.executor.logbuffer import BoundedLog, StreamLimiter
from nkitui.executor.timing import TimingPolicy, measure, median_ci


@pytest.mark.parametrize("event", [
    LogEvent("stdout", "hello ü", "info"),
    PhaseEvent("compile", "start"),
    PhaseEvent("compile", "end", "ok", 0.25, "emulator"),
    ProgressEvent(2, 3, "seed 1"),
    ErrorEvent("kernel-error", "boom", "k.py", 12, "Traceback ..."),
    ResultEvent({"status": "passed", "x": [1, 2]}),
])
def test_events_survive_the_wire(event):
    line = encode(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line) == event


@pytest.mark.parametrize("line", ["plain text", "{not json", '{"event": "unknown"}', '{"event": "progress"}', "[1, 2]", ""])
def test_anything_else_is_a_log_line(line):
    ev = decode_line(line.encode())
    assert ev == LogEvent("worker", line)


def test_nan_cannot_slip_into_an_event():
    with pytest.raises(ValueError):
        encode(ResultEvent({"x": math.nan}))


def _feed_all(limiter: StreamLimiter, data: bytes, chunk: int) -> list[LogEvent]:
    out = []
    for i in range(0, len(data), chunk):
        out += limiter.feed(data[i:i + chunk])
    return out + limiter.finish()


def test_short_output_passes_through_unchanged():
    lim = StreamLimiter("stdout")
    events = _feed_all(lim, b"a\nb\nc", 2)
    assert [e.text for e in events] == ["a", "b", "c"]


def test_long_output_keeps_head_marker_and_tail():
    lim = StreamLimiter("stdout", head_lines=5, tail_lines=3)
    data = b"".join(b"line %d\n" % i for i in range(1000))
    events = _feed_all(lim, data, 777)
    texts = [e.text for e in events]
    assert texts[:5] == [f"line {i}" for i in range(5)]
    assert texts[-3:] == ["line 997", "line 998", "line 999"]
    assert "further output is elided" in texts[5]
    assert "992 lines" in texts[-4] and "elided" in texts[-4]


def test_a_huge_line_without_newline_is_wrapped_and_bounded():
    lim = StreamLimiter("stderr", head_lines=10, max_line=100)
    events = _feed_all(lim, b"x" * 1_000_000, 65536)
    kept = [e for e in events if e.stream == "stderr"]
    assert all(len(e.text) <= 100 for e in kept)
    assert len(kept) <= 10 + lim.tail_lines
    marker = next(e.text for e in events if e.stream == "executor" and e.text.endswith("elided …"))
    assert " 1 line (" in marker  # not "1 lines"


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab\u00e9", max_size=30), max_size=80), chunk=st.integers(1, 50),
       head=st.integers(1, 20), tail=st.integers(1, 10))
def test_limiter_shows_every_line_or_a_head_and_the_true_tail(lines, chunk, head, tail):
    data = "".join(line + "\n" for line in lines).encode()
    lim = StreamLimiter("stdout", head_lines=head, tail_lines=tail, max_line=1000)
    events = _feed_all(lim, data, chunk)
    shown = [e.text for e in events if e.stream == "stdout"]
    if len(lines) <= head:
        assert shown == lines
    else:
        assert shown[:head] == lines[:head]
        assert shown[head:] == lines[-min(tail, len(lines) - head):]
        marker = [e.text for e in events if e.stream == "executor" and "elided …" in e.text][0]
        elided = len(lines) - head - len(shown[head:])
        assert f" {elided:,} {'line' if elided == 1 else 'lines'} (" in marker


def test_bounded_log_drops_the_middle():
    log = BoundedLog(head=3, tail=2)
    for i in range(10):
        log.append(LogEvent("stdout", str(i)))
    texts = [e.text for e in log.entries()]
    assert texts[:3] == ["0", "1", "2"] and texts[-2:] == ["8", "9"]
    assert "5 log lines dropped" in texts[3]


def test_the_environment_is_scrubbed(tmp_path):
    source = {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/home/me", "TERM": "xterm",
        "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t", "GITHUB_TOKEN": "g",
        "SSH_AUTH_SOCK": "/tmp/agent", "GIT_DIR": "/repo/.git", "MY_API_KEY": "k", "DB_PASSWORD": "p",
        "NEURON_RT_VISIBLE_CORES": "0-1", "NEURON_API_TOKEN": "x", "NKI_PRECISE_FP": "1", "RANDOM_VAR": "r",
        "PYTHONPATH": "/extra",
    }
    env = scrubbed_env(source, scratch=tmp_path, extra={"PATH": "/fake/bin:/usr/bin", "AWS_REGION": "x"},
                       python_path=["/nkitui"])
    for gone in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "SSH_AUTH_SOCK",
                 "GIT_DIR", "MY_API_KEY", "DB_PASSWORD", "NEURON_API_TOKEN", "RANDOM_VAR", "AWS_REGION"):
        assert gone not in env, gone
    assert env["PATH"] == "/fake/bin:/usr/bin"
    assert env["LANG"] == "C.UTF-8" and env["LC_ALL"] == "C" and env["NEURON_RT_VISIBLE_CORES"] == "0-1"
    assert env["HOME"] == str(tmp_path / "home") and env["TMPDIR"] == str(tmp_path / "tmp")
    assert env["PYTHONPATH"] == "/nkitui:/extra"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["NKITUI_LATENCY_ESTIMATOR"] == "nkitui.perf"  # nki.benchmark reports cost-model estimates


@pytest.mark.parametrize("rc, flags, kind, words", [
    (-signal.SIGABRT, {}, "crash", "aborted (SIGABRT)"),
    (-signal.SIGSEGV, {}, "crash", "segmentation fault"),
    (-signal.SIGXCPU, {}, "cpu-limit", "CPU-time limit of 21 s"),
    (-signal.SIGKILL, {"memory_error_seen": True}, "memory-limit", "memory limit of 512 MB"),
    (-signal.SIGKILL, {}, "killed", "SIGKILL from outside nkitui"),
    (-signal.SIGTERM, {"timed_out": True}, "timeout", "timed out after 10 s"),
    (3, {"cancelled": True}, "cancelled", "cancelled"),
    (0, {}, "ok", "finished"),
    (4, {}, "internal", "internal error"),
    (77, {}, "crash", "exited with status 77"),
])
def test_exits_are_told_in_words(rc, flags, kind, words):
    report = describe_exit(rc, Limits(timeout_s=10, memory_mb=512), elapsed_s=1.0, **flags)
    assert report.kind == kind
    assert words in report.message


def test_timing_stops_when_the_median_is_pinned_down():
    ticks = iter(range(10**6))
    clock = lambda: next(ticks) * 1e-3  # noqa: E731 - every launch takes exactly 1 ms
    stats = measure(lambda: None, TimingPolicy(warmup=2, min_repeats=10, max_repeats=100), clock=clock)
    assert stats.n == 10 and "converged" in stats.stopped
    assert stats.median == pytest.approx(1e-3)
    d = stats.to_dict("test")
    assert d["median_us"] == pytest.approx(1000) and d["iqr_us"] == pytest.approx(0, abs=1e-6)


def test_timing_respects_the_repeat_and_time_budgets_and_counts_rechecks():
    import random

    rng = random.Random(1)
    now = [0.0]

    def clock():
        return now[0]

    def launch():
        now[0] += rng.uniform(0.5e-3, 3e-3)  # noisy: the CI never gets within 0.1%
        return "out"

    stats = measure(launch, TimingPolicy(warmup=0, min_repeats=5, max_repeats=40, max_time_s=100, target_rel_ci=0.001),
                    clock=clock, recheck=lambda out: None if rng.random() > 0.2 else "differs")
    assert stats.n == 40 and "maximum of 40" in stats.stopped
    assert stats.rechecked == 40 and 0 < len(stats.recheck_failures) < 40
    stats = measure(launch, TimingPolicy(warmup=0, min_repeats=5, max_repeats=10**6, max_time_s=0.05, target_rel_ci=0.001),
                    clock=clock)
    assert "time budget" in stats.stopped and stats.n < 100


def test_median_ci_brackets_the_median():
    xs = [float(i) for i in range(101)]
    lo, hi = median_ci(xs)
    assert lo < 50 < hi and hi - lo < 25


def _probe(device=False, new=None, legacy=None) -> Probe:
    return Probe(
        devices=["/dev/neuron0"] if device else [],
        device_note="1 Neuron device(s): /dev/neuron0" if device else "no Neuron device (/dev/neuron* absent)",
        new=SdkPackage("nki", True, "0.6.0") if new else SdkPackage("nki", False, note="not installed"),
        legacy=SdkPackage("neuronxcc.nki", True, "2.26.0") if legacy else SdkPackage("neuronxcc.nki", False, note="not installed"),
    )


def test_auto_explains_its_choice():
    c = choose_backend("auto", _probe(), "legacy")
    assert c.name == "emulator"
    assert c.reason == ("auto: no Neuron device (/dev/neuron* absent) and no usable neuronxcc.nki from the Neuron "
                        "SDK (not installed): using the built-in emulator")
    assert choose_backend("auto", _probe(new=True), "new").name == "simulator"
    assert choose_backend("auto", _probe(device=True, new=True), None).name == "neuron"
    c = choose_backend("auto", _probe(device=True, new=True), "legacy")
    assert c.name == "emulator" and "only nki is" in c.reason
    with pytest.raises(BackendUnavailable, match="needs a Neuron device"):
        choose_backend("neuron", _probe(new=True), "new")
    with pytest.raises(BackendUnavailable, match="simulator backend needs"):
        choose_backend("simulator", _probe(), "new")
    with pytest.raises(ValueError, match="unknown backend"):
        choose_backend("gpu", _probe(), None)


def test_kernel_location_is_the_innermost_frame_in_the_task(tmp_path):
    from nkitui.executor.context import WorkerContext

    ctx = WorkerContext(events_fd=-1, run_id="r", scratch=tmp_path, workspace=tmp_path / "work")
    namespace: dict = {}
    exec(compile("def f():\n    x = 1\n    import no_such_module_xyz\n", str(tmp_path / "work" / "k.py"), "exec"), namespace)
    with pytest.raises(ImportError) as info:
        namespace["f"]()
    assert ctx.kernel_location(info.value) == ("k.py", 3)
    assert ctx.scrub(f"see {tmp_path}/work/k.py:3") == "see k.py:3"


def test_backend_and_data_events_round_trip_and_a_malformed_one_is_only_text():
    from nkitui.executor.events import BackendEvent, DataEvent, LogEvent, decode_line, encode

    for ev in (BackendEvent("emulator", "auto: no device", "auto"), DataEvent("reply", {"id": "1-ab", "outputs": {}})):
        assert decode_line(encode(ev)) == ev
    assert isinstance(decode_line('{"event": "data", "kind": "reply", "data": [1]}'), LogEvent)
    assert isinstance(decode_line('{"event": "backend"}'), LogEvent)


def test_events_from_two_threads_arrive_as_whole_lines(tmp_path):
    """The evaluator drives its reference process from a thread while its main thread reports phases:
    each event reaches the descriptor whole, even one longer than a pipe writes atomically."""
    import os
    import threading

    from nkitui.executor.context import WorkerContext

    read_fd, write_fd = os.pipe()
    ctx = WorkerContext(events_fd=write_fd, run_id="r", scratch=tmp_path, workspace=tmp_path)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read_fd, 1 << 16), b"")))
    reader.start()

    def say(letter: str) -> None:
        for _ in range(30):
            ctx.emit(LogEvent("worker", letter * 70_000, "info"))

    writers = [threading.Thread(target=say, args=(c,)) for c in "ab"]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    os.close(write_fd)
    reader.join()
    os.close(read_fd)
    events = [decode_line(line) for line in b"".join(chunks).splitlines()]
    assert len(events) == 60
    assert all(isinstance(e, LogEvent) and len(set(e.text)) == 1 and len(e.text) == 70_000 for e in events)


def test_the_collector_is_paused_for_a_traced_launch_only_and_restored_after():
    import gc

    from nkitui.executor.untrusted.kernel import _collector_paused

    assert gc.isenabled()
    with _collector_paused(False):
        assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with _collector_paused(True):
            assert not gc.isenabled()
            raise RuntimeError("the launch failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with _collector_paused(True):
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()

"""The peer-suite runner (benchmarks/peer_suites) on a tiny fake peer suite made here: a real child
pytest with the runner's plugin, the emulator installed by a shim, one test per failure cause."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.peer_suites import common
from benchmarks.peer_suites.common import (
    ACCEPTED,
    HOST_LIMITS,
    MISSING_API,
    NEEDS_HARDWARE,
    OTHER,
    REJECTED,
    WRONG_NUMBERS,
    KnownCause,
    PeerSuite,
    PeerResult,
    classify,
    fold_records,
)

# one worker runs every test of this file (pytest-xdist's loadgroup): the fake peer suite, a pytest
# run in a child process, runs once and not once per worker
pytestmark = pytest.mark.xdist_group("peer-runner")

REPO = Path(__file__).resolve().parents[2]

SHIM = '''
import os


def install():
    from nkitui import emulator
    emulator.install()


def fix():  # runs after the suite's conftest (which sets FAKE_CONFTEST)
    if os.environ.get("FAKE_CONFTEST") == "1":
        os.environ["FAKE_HARNESS_FIXED"] = "1"
'''

CONFTEST = '''
import os

os.environ["FAKE_CONFTEST"] = "1"
'''

TESTS = '''
import time

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def copy(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


class InferenceException(Exception):  # the way suites wrap the simulator's errors
    pass


def test_passes():
    import os

    from benchmarks.peer_suites.nki_library import emulator_cpu
    assert os.environ.get("FAKE_HARNESS_FIXED") == "1"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with emulator_cpu():  # what the nki-library adapter wraps around the suite's kernel launch
        start = time.process_time()
        while time.process_time() - start < 0.3:
            pass
        np.testing.assert_allclose(copy(x), x)


def test_wrong_numbers():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(copy(x), x + 1, rtol=1e-3)


@pytest.mark.needs_compiler_here
def test_marked_for_the_compiler():
    raise RuntimeError("the compiler is not here")


def test_rejected_and_wrapped():
    try:
        copy(np.zeros((256, 4), np.float32))  # 256 partitions
    except Exception as e:
        raise InferenceException(str(e)) from e


def test_missing_api():
    nl.a_function_nki_does_not_have()


def test_unsupported_is_missing_api():
    import nki.isa as nisa
    nisa.sequence_bounds(None, None)  # documented, but not emulated: UnsupportedError


def test_host_memory():
    raise MemoryError("Unable to allocate 64.0 GiB")


def test_too_slow():
    start = time.process_time()
    while time.process_time() - start < 0.3:  # some CPU time for the runner to measure
        pass
    time.sleep(30)


def test_needs_hardware():
    raise FileNotFoundError("/sys/devices/virtual/neuron_device/neuron0/product_name")


def test_invalid_code_accepted():
    assert False, "Test case was expected to fail, but it hasn't!"


def test_suite_bug():
    {}["missing"]


@pytest.mark.skip(reason="too large for simulation (the suite's own policy)")
def test_skipped():
    pass
'''

BROKEN_MODULE = '''
import nki.compiler.frontend_that_does_not_exist  # noqa: F401


def test_never_runs():
    pass
'''


@pytest.fixture(scope="module")
def fake_suite(tmp_path_factory) -> tuple[PeerSuite, Path]:
    root = tmp_path_factory.mktemp("fake-peer")
    (root / "fake_peer_marker").write_text("a fake peer suite\n")
    (root / "fake_shim.py").write_text(SHIM)
    tests = root / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_kernels.py").write_text(textwrap.dedent(TESTS))
    (tests / "test_broken_import.py").write_text(textwrap.dedent(BROKEN_MODULE))
    suite = PeerSuite(
        name="fake", repo="example/fake-peer", marker="fake_peer_marker", pytest_args=("tests",),
        shim="fake_shim:install", harness_fix="fake_shim:fix", python_path=(".",),
        known=(KnownCause(NEEDS_HARDWARE, "reads the device's product name", message=r"/sys/.*product_name"),
               KnownCause(NEEDS_HARDWARE, "marked for the compiler", marker="needs_compiler_here")),
    )
    return suite, root


@pytest.fixture(scope="module")
def report(fake_suite):
    suite, root = fake_suite
    return common.run(suite, root, python=sys.executable, timeout_s=3.0)


def test_counts_and_causes_of_a_fake_peer_suite(report):
    causes = {r.nodeid.rsplit("::", 1)[-1]: r.cause for r in report.failures()}
    assert causes == {
        "test_wrong_numbers": WRONG_NUMBERS,
        "test_rejected_and_wrapped": REJECTED,
        "test_missing_api": MISSING_API,
        "test_unsupported_is_missing_api": MISSING_API,
        "test_host_memory": HOST_LIMITS,
        "test_too_slow": HOST_LIMITS,
        "test_needs_hardware": NEEDS_HARDWARE,
        "test_marked_for_the_compiler": NEEDS_HARDWARE,
        "test_invalid_code_accepted": ACCEPTED,
        "test_suite_bug": OTHER,
        "tests/test_broken_import.py": MISSING_API,  # a collection error
    }
    assert report.counts == {"passed": 1, "failed": 10, "errors": 1, "skipped": 1}
    rejected = next(r for r in report.failures() if r.cause == REJECTED)
    assert "PartitionDimError" in rejected.detail and "256" in rejected.detail


def test_report_table_and_json(report, tmp_path):
    text = report.format()
    assert text.splitlines()[0].startswith("fake: 1 passed, 11 failed (1 of them errors), 1 skipped")
    for cause in (WRONG_NUMBERS, REJECTED, MISSING_API, HOST_LIMITS, NEEDS_HARDWARE, ACCEPTED, OTHER):
        assert cause in text
    assert "too large for simulation" in text
    data = report.to_json()
    json.dumps(data)
    assert data["by_cause"][MISSING_API] == 3 and data["counts"]["passed"] == 1


def test_each_result_has_its_cpu_time_and_the_peak_memory(report):
    # on a loaded host wall time says little: the CPU seconds of the test process (all threads) are
    # kept per test, with the process's peak RSS by its end
    by_name = {r.nodeid.rsplit("::", 1)[-1]: r for r in report.results}
    slow = by_name["test_too_slow"]  # spins for 0.3 s of CPU, then sleeps until the 3 s limit stops it
    assert 0.25 <= slow.cpu_s < 2.0 <= slow.duration
    assert by_name["test_skipped"].cpu_s < 0.5
    assert all(r.max_rss_mb > 10 for r in report.results if not r.nodeid.endswith(".py"))
    assert {"cpu_s", "emu_cpu_s", "max_rss_mb"} <= set(report.to_json()["results"][0])


def test_each_result_says_how_much_of_its_cpu_time_was_the_emulators(report):
    # a slow peer test is slow either in the emulator or in the suite's own input generation and
    # reference: the adapter measures its kernel launches, and only those count as the emulator's
    by_name = {r.nodeid.rsplit("::", 1)[-1]: r for r in report.results}
    passed = by_name["test_passes"]
    assert 0.25 <= passed.emu_cpu_s <= passed.cpu_s
    assert by_name["test_too_slow"].emu_cpu_s == 0.0  # its 0.3 s of CPU are outside any launch


def test_the_checkout_must_be_the_suite_and_outside_the_repository(fake_suite, tmp_path):
    suite, _ = fake_suite
    with pytest.raises(SystemExit, match="fake_peer_marker is missing"):
        suite.check_checkout(tmp_path)
    inside = REPO / "fake_peer_marker"
    with pytest.raises(SystemExit, match="inside this repository"):
        PeerSuite(name="x", repo="x/x", marker="pyproject.toml", pytest_args=(), shim="").check_checkout(REPO)
    assert not inside.exists()


def test_known_causes_match_marks():
    r = PeerResult("t::a", "failed", markers=["fast", "trace_only"], chain=[
        {"type": "builtins.ModuleNotFoundError", "mro": ["ModuleNotFoundError", "ImportError"],
         "message": "No module named 'nki.compiler.frontend'", "frames": []}])
    assert classify(r)[0] == MISSING_API
    known = (KnownCause(NEEDS_HARDWARE, "traces with the compiler", marker="trace_only"),)
    assert classify(r, known) == (NEEDS_HARDWARE, "traces with the compiler")
    r.markers = ["fast"]
    assert classify(r, known)[0] == MISSING_API


def test_known_causes_override_and_match_node_ids():
    r = PeerResult("tests/test_a.py::test_x", "failed", chain=[
        {"type": "builtins.AssertionError", "mro": ["AssertionError"], "message": "Validation failed for ['out']",
         "frames": []}])
    assert classify(r, wrong_numbers=(r"Validation failed for",))[0] == WRONG_NUMBERS
    assert classify(r)[0] == OTHER
    known = (KnownCause(NEEDS_HARDWARE, "needs the compiler", nodeid="tests/test_a.py::*"),)
    assert classify(r, known) == (NEEDS_HARDWARE, "needs the compiler")


def test_a_test_whose_process_died_inside_it_is_an_error_not_a_pass():
    # only its setup was recorded: the worker was killed (OOM killer) or crashed during the call
    recs = [{"nodeid": "t::big", "when": "setup", "outcome": "passed", "duration": 0.1},
            {"nodeid": "t::ok", "when": "setup", "outcome": "passed", "duration": 0.1},
            {"nodeid": "t::ok", "when": "call", "outcome": "passed", "duration": 0.2}]
    got = {r.nodeid: r for r in fold_records(recs)}
    assert got["t::ok"].outcome == "passed"
    assert got["t::big"].outcome == "error"
    assert "ended during the test" in got["t::big"].failure_text()
    assert classify(got["t::big"])[0] == OTHER


def test_folding_phases_into_one_result():
    recs = [
        {"nodeid": "t::a", "when": "setup", "outcome": "passed", "duration": 0.1},
        {"nodeid": "t::a", "when": "call", "outcome": "failed", "duration": 0.2, "chain": [{"type": "X"}]},
        {"nodeid": "t::a", "when": "teardown", "outcome": "passed", "duration": 0.0},
        {"nodeid": "t::b", "when": "setup", "outcome": "failed", "duration": 0.0, "chain": [{"type": "Y"}]},
        {"nodeid": "t::c", "when": "setup", "outcome": "skipped", "duration": 0.0, "skip_reason": "no"},
        {"nodeid": "t::d", "when": "call", "outcome": "passed", "duration": 0.0},
    ]
    got = {r.nodeid: (r.outcome, round(r.duration, 3)) for r in fold_records(recs)}
    assert got == {"t::a": ("failed", 0.3), "t::b": ("error", 0.0), "t::c": ("skipped", 0.0), "t::d": ("passed", 0.0)}


def test_command_line_lists_adapters_and_refuses_unknown_suites():
    done = subprocess.run([sys.executable, "-m", "benchmarks.peer_suites", "no_such_suite"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "nki_library" in done.stderr
    done = subprocess.run([sys.executable, "-m", "benchmarks.peer_suites", "nki_library", "--checkout",
                           str(REPO / "no-such-checkout"), "--quiet"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "is not a checkout of aws-neuron/nki-library" in done.stderr



def test_a_short_pass_of_an_old_report_is_not_counted(fake_suite, tmp_path):
    # reports written before results kept their CPU time were folded without checking that a test was
    # called: a test whose process died inside it (the OOM killer) became a pass lasting only its setup
    # (round 1's qwen3 cross_entropy case: 0.016 s for 2.1 billion logits). Merged, such a pass counts as
    # an error until a later report replaces it; longer passes and passes of checked reports stay.
    suite, _ = fake_suite
    old = {"suite": "fake", "wall_s": 1.0, "results": [
        {"nodeid": "t.py::died", "outcome": "passed", "duration": 0.016},
        {"nodeid": "t.py::ran", "outcome": "passed", "duration": 2.5},
        {"nodeid": "t.py::skipped", "outcome": "skipped", "duration": 0.001}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    new = {"suite": "fake", "wall_s": 1.0, "results": [
        {"nodeid": "t.py::quick", "outcome": "passed", "duration": 0.016, "cpu_s": 0.01, "max_rss_mb": 90}]}
    (tmp_path / "new.json").write_text(json.dumps(new))
    merged = common.merge_reports(suite, [tmp_path / "old.json", tmp_path / "new.json"])
    by_id = {r.nodeid: r for r in merged.results}
    assert by_id["t.py::died"].outcome == "error" and "run it again" in by_id["t.py::died"].detail
    assert [by_id[n].outcome for n in ("t.py::ran", "t.py::skipped", "t.py::quick")] == ["passed", "skipped", "passed"]
    rerun = {"suite": "fake", "wall_s": 1.0, "results": [
        {"nodeid": "t.py::died", "outcome": "passed", "duration": 300.0, "cpu_s": 150.0, "max_rss_mb": 20000}]}
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    merged = common.merge_reports(suite, [tmp_path / "old.json", tmp_path / "rerun.json"])
    assert merged.counts == {"passed": 2, "failed": 0, "errors": 0, "skipped": 1}


def test_merging_reports_by_node_id(report, fake_suite, tmp_path, capsys):
    # a re-run replaces the first run's result for its node ids; the rest stay; failures get the
    # suite's current known causes again (matched on the stored detail: JSON keeps no chain)
    suite, _ = fake_suite
    first = report.to_json()
    (tmp_path / "first.json").write_text(json.dumps(first))
    rerun = {"suite": "fake", "wall_s": 5.0, "results": [
        dict(r, outcome="passed", cause="", detail="") for r in first["results"]
        if r["nodeid"].endswith("test_wrong_numbers")]}
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    merged = common.merge_reports(suite, [tmp_path / "first.json", tmp_path / "rerun.json"])
    assert merged.counts == {"passed": 2, "failed": 9, "errors": 1, "skipped": 1}
    assert merged.wall_s == first["wall_s"] + 5.0
    before = {r.nodeid: r.cause for r in report.failures()}
    assert {r.nodeid: r.cause for r in merged.failures()} == {
        k: v for k, v in before.items() if not k.endswith("test_wrong_numbers")}
    out = tmp_path / "all.json"
    assert common.main(suite, ["--merge", str(tmp_path / "first.json"), str(tmp_path / "rerun.json"),
                               "--json", str(out)]) == 0
    assert "merged from 2 reports" in capsys.readouterr().out
    assert json.loads(out.read_text())["counts"]["passed"] == 2
    (tmp_path / "bad.json").write_text("{}")
    assert common.main(suite, ["--merge", str(tmp_path / "bad.json")]) == 2

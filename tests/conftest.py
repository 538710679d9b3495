"""Session-wide reporting: how many of the sandbox's protections this host let the suite verify.

Tests of tests/security record `record_property("protection", NAME)`; at the end of the session the
count of verified (passed) and unverified (skipped, with the reason) protections is printed, also
under pytest-xdist (the reports travel to the controller with their properties).

Every test also starts without the COLUMNS/LINES that pytest-xdist workers inherit (see
`no_inherited_terminal_width`), and with its own XDG folders (see `isolated_user_folders`): no test
reads the user's settings or writes into the user's run store, drafts or caches. A folder's conftest
may set its own on top (a fake HOME, an EDITOR); this one is only the floor.
"""

from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Bytecode, whatever PYTHONDONTWRITEBYTECODE says (docs/testing.md, "Bytecode and threads"): with it set, every
# interpreter the suite starts (each evaluation's evaluator, each `nkitui` child) compiled nkitui from
# source (about 0.35 s of CPU per evaluation), and every pytest worker rewrote the assertions of all
# test modules again (about 6 s of CPU per worker). The files go where Python puts them without the
# variable (`__pycache__/`, git-ignored). NKITUI_TEST_NO_BYTECODE=1 keeps the variable's meaning.
WRITE_BYTECODE = os.environ.get("NKITUI_TEST_NO_BYTECODE") != "1"
if WRITE_BYTECODE:
    sys.dont_write_bytecode = False  # this process: the test modules pytest rewrites, nkitui's modules

# One thread per math library in the test processes, as the executor gives every worker
# (nkitui.executor.env.THREAD_LIMITS) and so every kernel: OpenBLAS's idle threads otherwise spin on
# the two cores after each call (a third of the CPU of the numpy-heavy tests, measured in
# docs/testing.md). Set before numpy is imported here or in a pytest-xdist worker, which inherits it;
# a value the user set is kept.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

_protections: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Once, before any pytest-xdist worker starts: nkitui's bytecode, for the children that never write
    their own (the executor starts every worker with PYTHONDONTWRITEBYTECODE=1, nkitui.executor.env).
    Only what is missing or stale is compiled (a fraction of a second when nothing changed).
    In every process: the watchdog that ends a test pytest-timeout cannot end (tests/helpers/watchdog.py)."""
    from tests.helpers import watchdog

    if not config.pluginmanager.is_registered(watchdog):
        config.pluginmanager.register(watchdog, "nkitui-watchdog")
    if WRITE_BYTECODE and not hasattr(config, "workerinput"):
        try:
            compileall.compile_dir(REPO / "nkitui", quiet=2, workers=1)
        except OSError:  # a read-only checkout: the children compile from source as before
            pass


WORKERS_PER_CPU = 2
GIB_PER_WORKER = 1  # a worker holds 150-250 MB; the evaluations it starts take the rest


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (and `-n logical`): two pytest-xdist workers per CPU this process may run on, not one,
    while the memory gives each at least GIB_PER_WORKER. A worker spends much of its wall time waiting,
    not computing: on a confined child's timeout or grace period, a Ray cluster's start, git, a
    subprocess pytest, Pilot's pauses (docs/testing.md, "Scheduling under pytest-xdist"). A second
    worker per CPU runs tests in those gaps: tests/security on 2 cores took 0.74-0.86x the wall time
    with 4 workers as with 2, for the same CPU (docs/testing.md, Round 7). PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set,
    as pytest-xdist documents."""
    from_env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip()
    if from_env.isdigit() and int(from_env) > 0:
        return int(from_env)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    cpus = max(1, cpus)
    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError, AttributeError):
        gib = float(WORKERS_PER_CPU * cpus * GIB_PER_WORKER)
    return max(cpus, min(WORKERS_PER_CPU * cpus, int(gib // GIB_PER_WORKER)))


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    name = dict(report.user_properties).get("protection")
    if name is None or (report.when != "call" and not (report.skipped or report.failed)):
        return
    if report.when == "call" or name not in _protections:
        _protections[str(name)] = report.outcome


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if not _protections:
        return
    verified = sorted(n for n, o in _protections.items() if o == "passed")
    skipped = sorted(n for n, o in _protections.items() if o == "skipped")
    failed = sorted(n for n, o in _protections.items() if o == "failed")
    line = f"sandbox: {len(verified)} of {len(_protections)} protections verified on this host"
    if skipped:
        line += f"; unverified (layer missing here): {', '.join(skipped)}"
    if failed:
        line += f"; FAILED: {', '.join(failed)}"
    terminalreporter.write_sep("-", line, yellow=bool(skipped), red=bool(failed), green=not (skipped or failed))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked `slow` run first (whole files, in their collected order; the rest keep
    theirs): under pytest-xdist a long test that starts last keeps one worker busy while the other has
    finished, and the suite's wall time is the busier worker's. Whole files, so that a module-scoped
    fixture is not made twice on one worker (once for the slow tests, again for the rest)."""
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_files)


@pytest.fixture(autouse=True)
def no_inherited_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist workers inherit COLUMNS=80/LINES=24; commands fit their output to COLUMNS, so a test
    sees the width it sets itself (a test of 80-column output sets COLUMNS=80), never an accident."""
    for name in ("COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
        # a library may have set it at C level (setenv) without os.environ knowing: children inherit
        # the C environment, so clear that too
        os.unsetenv(name)


XDG_VARS = ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")


@pytest.fixture(autouse=True)
def isolated_user_folders(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fresh XDG folders for every test (outside its tmp_path, which stays the test's own), and no
    fake Neuron device left over from the environment. Returns the folder holding them."""
    base = tmp_path_factory.mktemp("xdg")
    for var in XDG_VARS:
        monkeypatch.setenv(var, str(base / var.lower()))
    monkeypatch.delenv("NKITUI_FAKE_NEURON_DEVICE", raising=False)
    return base


@pytest.fixture
def isolated_dirs(isolated_user_folders: Path) -> Path:
    """The same folder under the name the executor and pipeline tests knew it by (their conftest's)."""
    return isolated_user_folders

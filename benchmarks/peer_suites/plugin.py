"""pytest plugin loaded into a peer suite's pytest (`-p benchmarks.peer_suites.plugin`).

It runs in the peer's process, before the peer's conftests load:
* calls the adapter's shim (`$NKITUI_PEER_SHIM`, "module:function"): emulator.install() and the
  suite's module aliases / stand-ins; and at session start its harness fix
  (`$NKITUI_PEER_HARNESS_FIX`), for upstream harness bugs;
* limits the address space (`$NKITUI_PEER_MEMORY_MB`, 0 = none) and each test's run time
  (`$NKITUI_PEER_TIMEOUT` seconds; the test then fails with PeerTestTimeout);
* writes one JSON line per test phase to `$NKITUI_PEER_RESULTS.<worker>` (format: common.py).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import time
import traceback

import pytest

_RESULTS = os.environ.get("NKITUI_PEER_RESULTS", "")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


class PeerTestTimeout(Exception):
    """The test ran longer than the runner's per-test limit."""


def _call(variable: str, default: str) -> None:
    spec = os.environ.get(variable, "")
    if not spec:
        return
    module, _, func = spec.partition(":")
    getattr(importlib.import_module(module), func or default)()


def _install_shim() -> None:
    _call("NKITUI_PEER_SHIM", "install_shims")


def _limit_memory() -> None:
    mb = int(os.environ.get("NKITUI_PEER_MEMORY_MB", "0") or 0)
    if mb > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))


_limit_memory()
_install_shim()


def _describe(exc: BaseException) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)[-12:]
    mro = [c.__name__ for c in type(exc).__mro__]
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "mro": mro,
            "message": str(exc)[:4000], "frames": [[f.filename, f.lineno, f.name] for f in frames]}


def exception_chain(exc: BaseException | None) -> list[dict]:
    """The exception and what caused it, outermost first (explicit causes, then implicit contexts)."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen and len(chain) < 8:
        seen.add(id(exc))
        chain.append(_describe(exc))
        exc = exc.__cause__ if exc.__cause__ is not None else (None if exc.__suppress_context__ else exc.__context__)
    return chain


def _write(record: dict) -> None:
    if not _RESULTS:
        return
    with open(f"{_RESULTS}.{_WORKER}", "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")[:300]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _call("NKITUI_PEER_HARNESS_FIX", "fix_harness")  # the suite's conftests are loaded now


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
              "duration": report.duration, "xfail": hasattr(report, "wasxfail"),
              "markers": sorted({m.name for m in item.iter_markers()}), **_usage()}
    if report.skipped:
        record["skip_reason"] = _skip_reason(report)
    if report.failed and call.excinfo is not None:
        record["chain"] = exception_chain(call.excinfo.value)
    _write(record)


_last_cpu = [time.process_time()]
_emulator_cpu = [0.0]


def add_emulator_cpu(seconds: float) -> None:
    """An adapter's harness fix reports CPU seconds spent inside the emulator's kernel launches (the
    rest of a test's CPU is the suite's own input generation, reference and checks)."""
    _emulator_cpu[0] += seconds


def _usage() -> dict:
    """This phase's CPU seconds (every thread of the test process, user + system: on a loaded host
    the wall time says little), the part of them spent inside the emulator (where the adapter
    measures it) and the process's peak resident memory so far, in MB."""
    now = time.process_time()
    cpu, _last_cpu[0] = now - _last_cpu[0], now
    emulator, _emulator_cpu[0] = _emulator_cpu[0], 0.0
    return {"cpu_s": round(cpu, 3), "emu_cpu_s": round(emulator, 3),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def pytest_runtest_logstart(nodeid, location):
    _last_cpu[0] = time.process_time()  # a test's setup does not count the collection before it
    _emulator_cpu[0] = 0.0


_PARENTS = {"ModuleNotFoundError": ["ImportError"], "_ArrayMemoryError": ["MemoryError"]}


def chain_from_text(text: str) -> list[dict]:
    """Exceptions named in a collection error's text (pytest keeps no exception object for it):
    the `E   Type: message` lines, outermost first."""
    import re

    chain = []
    for m in re.finditer(r"^E\s+([A-Za-z_][\w.]*(?:Error|Exception|Exit|Warning|Timeout)):\s?(.*)$", text, re.M):
        name = m.group(1)
        short = name.rsplit(".", 1)[-1]
        chain.append({"type": name, "mro": [short, *_PARENTS.get(short, []), "Exception"],
                      "message": m.group(2), "frames": []})
    return chain or [{"type": "CollectError", "mro": ["CollectError"], "message": text[-2000:], "frames": []}]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _write({"nodeid": report.nodeid or str(collector.path), "when": "collect", "outcome": "failed",
                "duration": 0.0, "chain": chain_from_text(str(report.longrepr))})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = float(os.environ.get("NKITUI_PEER_TIMEOUT", "0") or 0)
    if seconds <= 0:
        yield
        return

    def on_alarm(signum, frame):
        raise PeerTestTimeout(f"the test ran longer than the runner's limit of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

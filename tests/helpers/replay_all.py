"""A pytest plugin that replays every emulated kernel launch of a test run (the replay's validation sweep).

    .venv/bin/python -m pytest -p tests.helpers.replay_all tests/emulator -q
    NKITUI_REPLAY_SUMMARY=/tmp/replay.json  (optional: each process's counts and one example per reason,
                                             as JSON in /tmp/replay.json.<pid>: pytest-xdist workers too)

Each launch is recorded (nkitui.emulator.replaylog), packed, unpacked and replayed on a copy of its
array arguments as they were before the launch, and its outputs (returned arrays, and arguments the
kernel wrote) compared bit for bit. The launch's own result is returned unchanged: the tests judge the
kernels as always; the summary at the end says how many launches replayed exactly, how many the
replay cannot run yet (and why), and any mismatch or replay error (each a bug of the replay)."""

from __future__ import annotations

import collections
import json
import os
import threading
from typing import Any

import numpy as np

STATS: collections.Counter[str] = collections.Counter()
EXAMPLES: dict[str, str] = {}
ALL: dict[str, list[str]] = {}  # every example of a reason that is not "exact" (the first few are shown)
CURRENT = [""]  # the test running now (named in the examples)


def _classify(key: str, example: str) -> None:
    STATS[key] += 1
    EXAMPLES.setdefault(key, example)
    if not key.startswith(("exact", "not recorded")):
        ALL.setdefault(key, []).append(example)


def _wrap(original: Any) -> Any:
    from nkitui.emulator import config, launch, replay, replaylog

    def run_kernel(kernel: Any, args: tuple[Any, ...], kwargs: Any, **kw: Any) -> Any:
        # a launch inside a recorded one (ranks), or any launch while another thread records (a test that
        # abandoned a hung launch leaves its recorder open: the recorder is per process)
        if not config.current_options().execute:
            _classify("not recorded: a shape-only run (nothing executes)", f"{getattr(kernel, 'name', '?')} in {CURRENT[0]}")
            return original(kernel, args, kwargs, **kw)
        if threading.current_thread() is not threading.main_thread():  # simulated ranks: one thread each
            _classify("not recorded: a launch on another thread (simulated ranks)", f"{getattr(kernel, 'name', '?')} in {CURRENT[0]}")
            return original(kernel, args, kwargs, **kw)
        if replaylog.active() is not None:
            _classify("not recorded: another launch was recording", f"{getattr(kernel, 'name', '?')} in {CURRENT[0]}")
            return original(kernel, args, kwargs, **kw)
        inputs = launch._arrays_in([*args, *kwargs.values()])
        before = [np.array(a, copy=True) for a in inputs]
        with replaylog.recording(inputs) as rec:
            out = original(kernel, args, kwargs, **kw)
        name = getattr(kernel, "name", "?")
        try:
            reported, views = {}, {}
            flat = out if isinstance(out, (tuple, list)) else [out]
            for i, arr in enumerate([*flat, *inputs]):
                view = rec.output_view(arr) if isinstance(arr, np.ndarray) else None
                if view is not None:
                    reported[f"o{i}"], views[f"o{i}"] = np.array(arr, copy=True), view
            data = replaylog.pack(rec, views if rec.unavailable is None else {})
            log = replay.unpack(data)
            if log.unavailable is not None:
                _classify("unavailable: " + log.unavailable.split(" at ")[0][:120], f"{name}: {log.unavailable}")
                return out
            opts = config.current_options()
            got = replay.replay(log, before, target=opts.target, precise=opts.precise)
            diff = replay.first_difference(reported, got)
            if diff is None:
                _classify("exact", name)
            else:
                _classify("MISMATCH", f"{name} in {CURRENT[0]}: {diff.describe()}")
        except Exception as exc:  # noqa: BLE001 - every failure of the replay is counted, never raised
            _classify(f"ERROR {type(exc).__name__}", f"{name} in {CURRENT[0]}: {str(exc)[:300]}")
        return out

    return run_kernel


_WRAPPED: dict[int, Any] = {}  # id(an original run_kernel) -> its recording wrapper


def _patch_everywhere() -> None:
    """Every module holding an original run_kernel (the front ends import it by name; `install()` may load
    the emulator's modules anew under the SDK's names) gets a recording one."""
    import sys

    for mod in list(sys.modules.values()):
        fn = getattr(mod, "run_kernel", None)
        if getattr(fn, "__module__", "") != "nkitui.emulator.launch" or getattr(fn, "_replay_sweep", False):
            continue
        wrapped = _WRAPPED.get(id(fn))
        if wrapped is None:
            wrapped = _WRAPPED[id(fn)] = _wrap(fn)
            wrapped._replay_sweep = True
            _WRAPPED[id(wrapped)] = wrapped
        mod.run_kernel = wrapped


def pytest_configure(config: Any) -> None:
    import nkitui.emulator.launch  # noqa: F401

    _patch_everywhere()


def pytest_runtest_setup(item: Any) -> None:
    CURRENT[0] = item.nodeid
    _patch_everywhere()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    total = sum(STATS.values())
    terminalreporter.write_sep("=", f"replay sweep: {STATS['exact']}/{total} launches replayed exactly")
    for key, n in STATS.most_common():
        terminalreporter.write_line(f"{n:6d}  {key}    e.g. {EXAMPLES[key][:200]}")
        for other in ALL.get(key, [])[1:5]:
            terminalreporter.write_line(f"{'':6s}  {'':{len(key)}s}    and {other[:200]}")


def pytest_unconfigure(config: Any) -> None:
    """Each process's counts (pytest-xdist workers too) as JSON: NKITUI_REPLAY_SUMMARY.<pid>."""
    path = os.environ.get("NKITUI_REPLAY_SUMMARY")
    if path and STATS:
        with open(f"{path}.{os.getpid()}", "w") as f:
            json.dump({"counts": dict(STATS), "examples": EXAMPLES}, f, indent=1)

"""The evaluator imports the cost model on a background thread while the static analysis and the
reference's thread import their own modules. Two threads importing one package whose __init__ imports
its submodules can hand one of them a half-made module (a run ended as an internal error: "cannot
import name 'estimate' from partially initialized module 'nkitui.perf.estimate'"), so the sets must
not share a module, and the thread must be joined before the phases that follow."""

from __future__ import annotations

import json
import subprocess
import sys

from nkitui.evaluate.pipeline import session

PROBE = """
import importlib, json, sys
from nkitui.evaluate.pipeline.session import BESIDE_WARM_IMPORTS, WARM_IMPORTS, _shared_imports

_shared_imports(False, emulated=True)
first, second = (WARM_IMPORTS, BESIDE_WARM_IMPORTS) if sys.argv[1] == "warm" else (BESIDE_WARM_IMPORTS, WARM_IMPORTS)

def new_modules(names):
    before = set(sys.modules)
    for name in names:
        importlib.import_module(name)
    return sorted(m for m in set(sys.modules) - before if m.startswith("nkitui"))

print(json.dumps([new_modules(first), new_modules(second)]))
"""


def _closures(first: str) -> tuple[set[str], set[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, first], capture_output=True, text=True, timeout=120, check=True)
    a, b = json.loads(out.stdout)
    return (set(a), set(b)) if first == "warm" else (set(b), set(a))


def test_the_warm_thread_imports_no_module_that_another_thread_imports_beside_it():
    # Whichever side goes first, each imports the same nkitui modules: none is shared.
    warm_first, beside_second = _closures("warm")
    warm_second, beside_first = _closures("beside")
    assert warm_first == warm_second and beside_first == beside_second
    assert "nkitui.perf.estimate" in warm_first and "nkitui.analysis" in beside_first
    assert not warm_first & beside_first, sorted(warm_first & beside_first)


def test_what_the_reference_thread_imports_is_listed_beside_the_warm_thread():
    import inspect

    source = inspect.getsource(session.EvaluationSession._ask_reference)
    imported = {line.split()[1] for line in source.splitlines() if line.strip().startswith("from nkitui.")}
    assert imported <= set(session.BESIDE_WARM_IMPORTS), imported - set(session.BESIDE_WARM_IMPORTS)


def test_the_warm_thread_is_joined_before_the_phases_after_the_reference(tmp_path):
    import threading

    evaluation = session.EvaluationSession.__new__(session.EvaluationSession)
    release = threading.Event()
    warm = threading.Thread(target=release.wait, args=(30,), daemon=True)
    warm.start()
    evaluation._warm = warm
    threading.Timer(0.2, release.set).start()
    evaluation._warm_imports_done()
    assert not warm.is_alive() and evaluation._warm is None

"""ast.parse from several threads at once (the session's queue reads tasks in a thread pool).

CPython 3.11 keeps the AST converter's recursion depth per interpreter: a thread switch in the middle
of a parse (here forced by a gc callback that sleeps, as any finalizer can) lets another thread's
parse change it, and the first one then raises "AST constructor recursion depth mismatch".
nkitui.common.pyast.parse serialises the parses; inspect_source goes through it.
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

from nkitui.common import pyast
from nkitui.task.pysource import inspect_source

SOURCE = "\n".join(f"def f{i}(a, b):\n    return (a + b) * (a - b)\n" for i in range(50))


def _parse_in_threads(parse, threads: int = 4, each: int = 40) -> list[str]:
    errors: list[str] = []

    def work() -> None:
        for _ in range(each):
            try:
                parse()
            except SystemError as exc:  # what CPython 3.11 raises on the race
                errors.append(str(exc))

    threshold = gc.get_threshold()
    switch = lambda phase, info: time.sleep(0)  # noqa: E731 - a thread switch inside every collection
    gc.callbacks.append(switch)
    gc.set_threshold(50)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        gc.callbacks.remove(switch)
        gc.set_threshold(*threshold)
    return errors


def test_pyast_parse_is_safe_from_threads() -> None:
    assert _parse_in_threads(lambda: pyast.parse(SOURCE)) == []


def test_inspect_source_is_safe_from_threads(tmp_path: Path) -> None:
    path = tmp_path / "k.py"
    path.write_text(SOURCE, encoding="utf-8")
    infos: list = []

    def read() -> None:
        info = inspect_source(path)
        assert info.syntax_error is None
        infos.append(len(info.functions))

    assert _parse_in_threads(read) == []
    assert set(infos) == {50}

"""Helpers for the UI tests: a real task in a real git repository, the real app, waiting for idle."""

from __future__ import annotations

import atexit
import html
import re
import shutil
import stat
import tempfile
from pathlib import Path

import git

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE_TASKS = Path(__file__).resolve().parents[2] / "sample_tasks"
AUTHOR = git.Actor("Ada Auditor", "ada@example.com")
# Fixed dates make commit shas identical on every run, so snapshots can show them.
DATES = ("2026-01-05T10:00:00", "2026-01-06T11:30:00")

# The first revision of the port forgot the mask on the last, partial tile.
UNMASKED = '''    n_tiles = (n_rows + P - 1) // P
    for t in nl.sequential_range(n_tiles):
        x_tile = nl.load(x[t * P + i_p, i_f])
        y_tile = nl.multiply(x_tile, g_tile)
        nl.store(y[t * P + i_p, i_f], value=y_tile)
'''
MASKED = '''    n_tiles = (n_rows + P - 1) // P
    for t in nl.sequential_range(n_tiles):
        valid = t * P + i_p < n_rows
        x_tile = nl.load(x[t * P + i_p, i_f], mask=valid)
        y_tile = nl.multiply(x_tile, g_tile, mask=valid)
        nl.store(y[t * P + i_p, i_f], value=y_tile, mask=valid)
'''


def _commit(repo: git.Repo, message: str, date: str) -> None:
    repo.git.add(A=True)
    repo.index.commit(message, author=AUTHOR, committer=AUTHOR, author_date=f"{date} +0000", commit_date=f"{date} +0000")


def make_task_repo(dest: Path, source: Path = FIXTURES / "scale_rows") -> Path:
    """Copy a task into dest as a git repository: for scale_rows two commits (the unmasked first port,
    then the final one), for other tasks one. The repository is built once per test process and
    copied (fixed authors and dates make it the same repository, commit shas included)."""
    key = (Path(source), dest.name)  # the first commit's message names the folder
    built = _BUILT.get(key)
    if built is None:
        built = _build_task_repo(Path(tempfile.mkdtemp(prefix="nkitui-test-repo-")) / dest.name, source)
        _BUILT[key] = built
    shutil.copytree(built, dest, symlinks=True)
    return dest


_BUILT: dict[tuple[Path, str], Path] = {}  # (source, folder name) -> its repository, once per test process


@atexit.register
def _remove_built() -> None:
    for built in _BUILT.values():
        shutil.rmtree(built.parent, ignore_errors=True)


def _build_task_repo(dest: Path, source: Path) -> Path:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
    repo = git.Repo.init(dest, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", AUTHOR.name)
        cfg.set_value("user", "email", AUTHOR.email)
    port = dest / "scale_rows_nki.py"
    final = port.read_text() if port.exists() else None
    if final is not None and MASKED in final:
        port.write_text(final.replace(MASKED, UNMASKED))
        _commit(repo, "First port of scale_rows", DATES[0])
        port.write_text(final)
        _commit(repo, "Mask the last partial tile", DATES[1])
    else:
        _commit(repo, f"Import task {dest.name}", DATES[0])
    repo.close()
    return dest


def use_editor_that_writes(tmp_path: Path, monkeypatch, text: str) -> None:
    """$EDITOR becomes a script that replaces the edited file with `text` (a printf format)."""
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\nprintf "{text}" > "$1"\n')
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDITOR", str(editor))


def new_app(task_path: Path, **kwargs):
    from nkitui.app.app import NkituiApp
    from nkitui.task import load_task

    return NkituiApp(load_task(task_path), **kwargs)


async def settle(pilot, delay: float = 0.01, timeout: float = 60.0) -> None:
    """Wait until no worker is pending or running and the screen has caught up (lazygit's busy/idle
    idea: tests wait for idle, never for a fixed time). While workers run it sleeps until they end
    (woken by their ends, not by polling); then it lets the screen process what they posted, twice in
    a row with no worker pending. Failed workers count as done: the app reports them itself."""
    import asyncio
    import time

    from textual.worker import WorkerState

    async def ended(worker) -> None:
        try:
            await worker.wait()
        except Exception:  # noqa: BLE001 - failed or cancelled: ended all the same
            pass

    app = pilot.app
    deadline = time.monotonic() + timeout
    while not getattr(app, "session_started", True):  # the start-up workers are not launched yet
        await pilot.pause(delay)
        if time.monotonic() > deadline:
            raise TimeoutError("the workstation never started")
    quiet = 0
    while quiet < 2:
        await pilot.pause(delay)
        busy = [w for w in app.workers if w.state in (WorkerState.PENDING, WorkerState.RUNNING)]
        quiet = 0 if busy else quiet + 1
        running = [w for w in busy if w.state == WorkerState.RUNNING]
        if running:  # never cancelled here: a cancelled wait would cancel the worker's own task
            await asyncio.wait([asyncio.ensure_future(ended(w)) for w in running],
                               timeout=max(0.0, deadline - time.monotonic()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers still busy: {[w.name for w in app.workers]}")


_SVG_TEXT = re.compile(r'<text[^>]*? x="(?P<x>[\d.]+)"[^>]*?clip-path="url\(#[\w-]*?-line-(?P<row>\d+)\)"[^>]*>'
                       r'(?P<text>[^<]*)</text>')
_SVG_CHAR_WIDTH = 12.2  # Rich's export_svg: 20 px rows, characters 0.61 as wide as high


def screen_text(app) -> str:
    """What the terminal shows now, as plain text (one line per row), read from Textual's public SVG
    screenshot (App.export_screenshot): every fragment is put back at its column."""
    width, height = app.size
    rows = [[" "] * width for _ in range(height)]
    for m in _SVG_TEXT.finditer(app.export_screenshot()):
        row, column = int(m.group("row")), round(float(m.group("x")) / _SVG_CHAR_WIDTH)
        if not 0 <= row < height:
            continue
        for offset, char in enumerate(html.unescape(m.group("text")).replace("\xa0", " ")):
            if 0 <= column + offset < width:
                rows[row][column + offset] = char
    return "\n".join("".join(row) for row in rows)


def recorded_result():
    """A RunResult recorded from a real emulator run of the fixture task (host timings pinned so
    snapshots are stable): lets UI tests show, reopen and compare runs without running one."""
    from nkitui.evaluate.run.result import RunResult

    return RunResult.from_json((FIXTURES / "recorded_run.json").read_text())


def store_run(result, run_id: str, created_at: str = "2026-01-07T09:00:00+00:00", **changes):
    """Save a copy of a real RunResult under another id in the (test's isolated) run store."""
    import copy

    from nkitui.evaluate.run.store import RunStore

    clone = copy.deepcopy(result)
    clone.run_id = run_id
    clone.created_at = created_at
    for key, value in changes.items():
        setattr(clone, key, value)
    RunStore().save(clone)
    return clone

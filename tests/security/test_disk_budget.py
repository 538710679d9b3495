"""Disk fill (issue #14, round 4): RLIMIT_FSIZE caps one file, so a kernel filled the disk with many
files, many folders, files it unlinked while keeping them open, or memfd files. The parent's disk watch
(nkitui.executor.confine.diskwatch) stops the child's process group once its scratch folder holds more
than the run's budget, and says so in words; without Landlock it also watches the free space of the
filesystems the child can reach. Each attack runs in a real confined worker (the same spawn, limits,
guard and confinement as a kernel process), then once through a whole evaluation of a wrong kernel."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from nkitui.executor.confine import diskwatch
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import start_worker

from .conftest import REPO, require, wrong_task

FILL = '''
import os, time
from pathlib import Path

MiB = b"x" * (1 << 20)


def fill(payload, ctx):
    os.chdir(ctx.scratch)
    print("STARTED", flush=True)
    mode = payload["mode"]
    if mode == "many-files":
        Path("many").mkdir()
        for i in range(100_000):
            Path("many", f"f{i}").write_bytes(MiB)
    elif mode == "many-folders":
        for i in range(1_000_000):
            os.mkdir(f"d{i}")
    elif mode == "deep-folders":
        while True:
            os.mkdir("d")
            os.chdir("d")
    elif mode == "hard-links":
        Path("one").write_bytes(MiB)
        for i in range(1_000_000):
            os.link("one", f"link{i}")
    elif mode == "unlinked-open":
        kept = []
        for i in range(10_000):
            fd = os.open(f"u{i}", os.O_RDWR | os.O_CREAT, 0o600)
            os.unlink(f"u{i}")
            for _ in range(16):
                os.write(fd, MiB)
            kept.append(fd)
    elif mode == "memfd":
        kept = []
        for i in range(10_000):
            fd = os.memfd_create(f"m{i}")
            for _ in range(16):
                os.write(fd, MiB)
            kept.append(fd)
    elif mode == "sparse-then-filled":
        fd = os.open("sparse", os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, 900 << 20)  # 900 MiB that use no disk: not counted
        time.sleep(1.0)
        print("SPARSE SURVIVED", flush=True)
        for i in range(900):
            os.pwrite(fd, MiB, i << 20)
    elif mode == "rename-loop":
        Path("a").mkdir()
        Path("b").mkdir()
        with open("a/big", "wb") as f:
            for _ in range(200):
                f.write(MiB)
        where = "a"
        while True:  # hide the big file from a walk by moving it between the folders as fast as possible
            other = "b" if where == "a" else "a"
            os.rename(f"{where}/big", f"{other}/big")
            where = other
    elif mode == "nested-run-name":  # the name an evaluator's watch skips (its children's folders) hides nothing here
        Path("tmp", "nkitui-run-hidden").mkdir(parents=True)
        for i in range(200):
            Path("tmp", "nkitui-run-hidden", f"f{i}").write_bytes(MiB)
    elif mode == "open-files":
        try:
            kept = [os.open("/dev/null", os.O_RDONLY) for _ in range(100_000)]
            print("OPENED", len(kept), flush=True)
        except OSError as exc:
            print("REFUSED", exc.errno, flush=True)
            return 0
    elif mode == "outside":  # the guard refuses open(); os.open with dir_fd is what it cannot see
        folder = os.open(payload["outside"], os.O_RDONLY)
        out = os.open("fill.bin", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=folder)
        for i in range(1000):
            os.write(out, MiB)
        print("WROTE OUTSIDE", flush=True)
    time.sleep(60)
    return 0
'''

NO_LANDLOCK = '''
from nkitui.executor.confine import landlock


def _unavailable(**kwargs):
    raise landlock.LandlockUnavailable("landlock unavailable on kernel 5.4")


landlock.apply = _unavailable
'''


def run_fill(tmp_path: Path, mode: str, *, disk_mb: int = 64, max_entries: int = 500, landlock: bool = True,
             **payload: str):
    helpers = tmp_path / "helpers"
    helpers.mkdir(exist_ok=True)
    (helpers / "diskfill.py").write_text(FILL)
    if not landlock:  # a sitecustomize that makes Landlock unavailable in the worker, as on kernel 5.4
        (helpers / "sitecustomize.py").write_text(NO_LANDLOCK)
    started = time.monotonic()
    handle = start_worker(WorkerJob(entry="diskfill:fill", payload={"mode": mode, **payload},
                                    limits=Limits(timeout_s=90, disk_mb=disk_mb, max_entries=max_entries),
                                    workspace=None, python_path=[str(helpers), str(REPO)]))
    handle.wait(timeout=150)  # the worker's own limit is 90 s: a run still going after 150 s never ends
    assert handle.status not in ("running", "starting"), f"the run never ended ({mode})"
    stdout = [e.text for e in handle.log.entries() if e.stream == "stdout"]
    return handle, stdout, time.monotonic() - started


def assert_stopped(handle, stdout, seconds, *words: str) -> None:
    assert "STARTED" in stdout, stdout
    assert handle.exit.kind == "disk-limit", handle.exit
    for word in words:
        assert word in handle.exit.message, handle.exit.message
    assert any(e.kind == "disk-limit" and "was stopped" in e.message for e in handle.errors), handle.errors
    assert seconds < 60, "the watch took as long as the timeout"
    assert not handle.scratch.root.exists(), "the scratch folder outlived the run"


@pytest.mark.parametrize("mode, words", [
    ("many-files", ("wrote more than 64 MiB to its scratch folder",)),
    ("many-folders", ("created more than 500 files and folders",)),
    ("deep-folders", (f"nested folders more than {diskwatch.MAX_DEPTH} deep",)),
    ("hard-links", ("created more than 500 files and folders",)),
    ("unlinked-open", ("wrote more than 64 MiB", "deleted while open")),
    ("memfd", ("wrote more than 64 MiB", "deleted while open")),
    ("sparse-then-filled", ("wrote more than 64 MiB",)),
    ("rename-loop", ("wrote more than 64 MiB",)),
    ("nested-run-name", ("wrote more than 64 MiB",)),
])
def test_a_worker_that_fills_its_scratch_folder_is_stopped(mode, words, tmp_path, record_property):
    record_property("protection", f"disk:{mode}")
    handle, stdout, seconds = run_fill(tmp_path, mode)
    if mode == "sparse-then-filled":
        assert "SPARSE SURVIVED" in stdout, "a sparse file uses no disk: it is not counted by its apparent size"
    if mode == "hard-links":
        assert "wrote more than" not in handle.exit.message, "a hard link is not counted twice"
    assert_stopped(handle, stdout, seconds, *words)


def test_open_files_are_capped(tmp_path, record_property):
    record_property("protection", "disk:open-files")
    handle, stdout, _ = run_fill(tmp_path, "open-files")
    assert any(line.startswith("REFUSED 24") for line in stdout), stdout  # EMFILE under RLIMIT_NOFILE
    assert not any(line.startswith("OPENED") for line in stdout)


def test_without_landlock_writes_outside_the_scratch_folder_are_still_bounded(tmp_path, record_property):
    """The degraded path: no Landlock, so os.open(..., dir_fd=) writes outside the scratch folder (the guard
    cannot see dir_fd); the parent's watch of the filesystems' free space stops the worker at the budget."""
    record_property("protection", "disk:no-landlock")
    outside = tmp_path / "outside"
    outside.mkdir()
    handle, stdout, seconds = run_fill(tmp_path, "outside", landlock=False, outside=str(outside))
    assert "WROTE OUTSIDE" not in stdout, "the worker wrote its whole 1000 MiB outside"
    assert_stopped(handle, stdout, seconds, "free space of a filesystem it could write to fell by",
                   "Landlock is unavailable here")
    written = (outside / "fill.bin").stat().st_size if (outside / "fill.bin").exists() else 0
    assert written < 1000 << 20


def test_measure_counts_allocated_bytes_once_per_inode(tmp_path):
    tmp_path = tmp_path / "measured"
    tmp_path.mkdir()
    (tmp_path / "one").write_bytes(b"x" * (1 << 20))
    for i in range(5):
        os.link(tmp_path / "one", tmp_path / f"link{i}")
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(1 << 30)
    use = diskwatch.measure(tmp_path, max_entries=100)
    assert use.entries == 7
    assert (1 << 20) <= use.bytes < (1 << 20) + (1 << 18), use  # the file once, the sparse file ~nothing


def test_a_wrong_kernel_that_fills_the_disk_is_not_passed(tmp_path, host, record_property):
    """The whole evaluation: the kernel process creates file after file; the evaluator's watch stops it at
    the default cap of entries, the run is not passed and its error says why in words."""
    record_property("protection", "attack:disk-fill")
    require(host, "landlock")
    from nkitui.evaluate.run import EvaluationRequest, start_evaluation

    task = wrong_task(tmp_path / "filler", prelude="""
        print("CWD", os.getcwd(), flush=True)
        for i in range(1000000):
            with open(f"fill{i}.bin", "wb") as f:
                f.write(b"x")
    """)
    handle = start_evaluation(EvaluationRequest.of(task, static=False, trials=False, precision=False, goldens=False,
                                                timeout_s=120, memory_mb=2048, store=False))
    list(handle.events())
    result = handle.result
    assert result.status != "passed" and result.exit_code != 0
    text = result.to_json()
    assert "the kernel process was stopped" in text and "created more than 10,000 files and folders" in text, \
        textwrap.shorten(text, 3000)

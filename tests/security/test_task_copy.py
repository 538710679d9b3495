"""Device and folder links in a task, links out of it, FIFOs, and the byte cap of the scratch copy
(issue #14: `ln -s /dev/zero data.bin` or a link to /usr made the copy fill the disk before any
limit applied)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nkitui.executor import workspace
from nkitui.executor.workspace import WorkspaceError, copy_task, make_scratch
from nkitui.task import TaskError, load_task
from nkitui.task import contents

from .conftest import REPO, SECRET_VALUE, wrong_task


def _validate(task: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nkitui", "task", "validate", str(task)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"})


@pytest.mark.parametrize("link, what", [("/dev/zero", "a device"), ("/usr", "a folder"), ("/dev/urandom", "a device")])
def test_links_to_devices_and_system_folders_are_refused(tmp_path, link, what, record_property):
    record_property("protection", "task-copy:device-and-folder-links")
    task = wrong_task(tmp_path / "t")
    (task / "data.bin").symlink_to(link)
    with pytest.raises(TaskError) as err:
        load_task(task)
    problem = next(p for p in err.value.problems if p.file.endswith("data.bin"))
    assert what in problem.message and link in problem.message and "rm data.bin" in problem.fix
    started = time.monotonic()
    proc = _validate(task)
    assert proc.returncode == 2 and "data.bin" in proc.stdout and "fix:" in proc.stdout
    assert "[[inputs]]" in proc.stdout, "the fix is printed as text, not eaten as markup"
    assert time.monotonic() - started < 30
    with pytest.raises(WorkspaceError, match="data.bin"):
        make_scratch(task)


def test_a_link_out_of_the_task_is_refused_with_the_copy_command_as_fix(tmp_path, isolated):
    task = wrong_task(tmp_path / "t")
    creds = isolated / ".aws" / "credentials"
    (task / "creds.ini").symlink_to(creds)
    with pytest.raises(TaskError) as err:
        load_task(task)
    problem = next(p for p in err.value.problems if p.file.endswith("creds.ini"))
    assert "outside the task folder" in problem.message and f"cp --remove-destination {creds} creds.ini" in problem.fix
    proc = _validate(task)
    assert proc.returncode == 2 and "creds.ini" in proc.stdout and SECRET_VALUE not in proc.stdout


def test_a_fifo_in_the_task_is_refused_without_blocking(tmp_path):
    task = wrong_task(tmp_path / "t")
    os.mkfifo(task / "pipe")
    started = time.monotonic()
    with pytest.raises(TaskError, match="FIFO"):
        load_task(task)
    with pytest.raises(WorkspaceError, match="pipe"):
        make_scratch(task)
    assert time.monotonic() - started < 10


def test_a_check_of_such_a_task_is_invalid_and_leaves_nothing(tmp_path):
    task = wrong_task(tmp_path / "t")
    (task / "data.bin").symlink_to("/dev/zero")
    # a private TMPDIR: other runs on the machine (xdist workers, other users) make scratch folders in /tmp too
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    proc = subprocess.run([sys.executable, "-m", "nkitui", "check", str(task), "--no-store"], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch_root)})
    assert proc.returncode == 2 and "data.bin" in proc.stderr + proc.stdout
    assert list(scratch_root.iterdir()) == []


def test_links_inside_the_task_to_its_own_files_are_copied_as_files(tmp_path):
    task = wrong_task(tmp_path / "t")
    (task / "data").mkdir()
    (task / "data" / "real.txt").write_text("payload")
    (task / "alias.txt").symlink_to("data/real.txt")
    load_task(task)  # valid
    scratch = make_scratch(task)
    try:
        alias = scratch.work / "alias.txt"
        assert alias.read_text() == "payload" and not alias.is_symlink()
        assert not (scratch.work / ".git").exists()
        assert oct(scratch.root.stat().st_mode & 0o777) == "0o700"
    finally:
        scratch.remove()


def test_a_huge_sparse_file_is_refused_before_anything_is_copied(tmp_path):
    task = wrong_task(tmp_path / "t")
    with open(task / "weights.bin", "wb") as f:
        f.truncate(10 << 30)  # 10 GB of holes: no disk used, but a copy would write 10 GB
    started = time.monotonic()
    with pytest.raises(WorkspaceError, match="more than 2048 MB"):
        make_scratch(task)
    assert time.monotonic() - started < 10


def test_the_cap_holds_while_copying_even_when_sizes_lie(tmp_path, monkeypatch):
    """A file that grows after the scan (or a size the scan got wrong): the copy stops at the cap,
    counting the bytes it actually read."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}.bin").write_bytes(b"x" * 400_000)
    real_scan = contents.scan

    def lying_scan(root, **kw):
        files, problems = real_scan(root, **kw)
        return [contents.TaskFile(f.rel, f.path, 1, f.mode) for f in files], problems

    monkeypatch.setattr(contents, "scan", lying_scan)
    dest = tmp_path / "dest"
    with pytest.raises(WorkspaceError, match="more than 0 MB"):
        copy_task(src, dest, max_bytes=1_000_000)
    copied = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert copied <= 1_000_000


def test_the_scan_never_descends_into_ignored_folders(tmp_path):
    task = wrong_task(tmp_path / "t")
    (task / ".git").mkdir()
    (task / ".git" / "evil").symlink_to("/dev/zero")
    (task / "reviews").mkdir()
    (task / "reviews" / "x.toml").write_text("")
    files, problems = contents.scan(task)
    assert not problems and {f.rel for f in files} == {"add_nki.py", "reference.py", "task.toml"}
    assert workspace.DEFAULT_MAX_COPY_MB == 2048


def test_credential_stores_in_a_task_are_never_copied_and_validate_says_so(tmp_path, isolated):
    task = wrong_task(tmp_path / "t")
    (task / ".aws").mkdir()
    (task / ".aws" / "credentials").write_text(f"secret {SECRET_VALUE}\n")
    (task / ".env.local").write_text(f"TOKEN={SECRET_VALUE}\n")
    scratch = make_scratch(task)
    try:
        copied = sorted(p.name for p in scratch.work.rglob("*"))
        assert "add_nki.py" in copied and ".aws" not in copied and "credentials" not in copied
        assert ".env.local" not in copied
    finally:
        scratch.remove()
    proc = _validate(task)
    assert ".aws" in proc.stdout and ".env.local" in proc.stdout and "holds credentials" in proc.stdout
    assert SECRET_VALUE not in proc.stdout

"""Removing what a hostile child left in its scratch folder, and a run that ends whatever nkitui's own
threads meet (issue #14; the CI hang of round 6).

A kernel nesting folders (`while True: os.mkdir("d"); os.chdir("d")`) gets a few thousand levels deep
before the disk watch's next poll stops it. shutil.rmtree (Python 3.11) recursed once per level: a
RecursionError killed the run's I/O thread before it ended the event stream, and whoever waited for the
run (`nkitui check`, the app, a test) waited for ever. The removal now flattens the tree, and the run's
threads end the stream with an internal error whatever they meet."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from nkitui.executor.confine import removal
from nkitui.executor.confine.diskwatch import DiskWatch
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import start_worker

from .conftest import REPO


def nest(root: Path, depth: int, name: str = "d") -> None:
    """`depth` nested folders under root, made as a kernel would (by descriptor: the path outgrows PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as leaf:
            leaf.write("deepest")
    finally:
        os.close(fd)


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path):
    root = tmp_path / "nkitui-run-deep"
    root.mkdir()
    depth = sys.getrecursionlimit() * 3
    nest(root, depth)
    assert removal.remove_tree(root) is True
    assert not root.exists()


def test_links_are_removed_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    root = tmp_path / "nkitui-run-links"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "to-folder").symlink_to(outside, target_is_directory=True)
    (root / "a" / "to-file").symlink_to(outside / "keep.txt")
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    assert removal.remove_tree(root) is True
    assert not root.exists()
    assert (outside / "keep.txt").read_text() == "the user's"


def test_a_link_in_place_of_the_folder_is_removed_itself(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    (tmp_path / "scratch").symlink_to(outside, target_is_directory=True)
    assert removal.remove_tree(tmp_path / "scratch") is True
    assert not os.path.lexists(tmp_path / "scratch")
    assert (outside / "keep.txt").exists()


def test_folders_the_child_locked_are_removed(tmp_path):
    root = tmp_path / "nkitui-run-locked"
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "f").write_text("x")
    (root / "ro").mkdir()
    (root / "ro" / "g").write_text("y")
    (root / "ro" / "sub").mkdir()
    os.chmod(root / "ro", 0o500)  # entries cannot be unlinked or moved out
    os.chmod(root / "a" / "b" / "c", 0)  # cannot be entered
    os.chmod(root / "a" / "b", 0o300)  # cannot be listed
    assert removal.remove_tree(root) is True
    assert not root.exists()


def test_names_the_flattening_uses_may_already_be_taken(tmp_path):
    root = tmp_path / "nkitui-run-names"
    for i in range(1, 4):
        (root / f".nkitui-rm-{i}" / "inner" / f".nkitui-rm-{i}").mkdir(parents=True)
        (root / f".nkitui-rm-{i}" / "inner" / "file").write_text("z")
    nest(root / ".nkitui-rm-1", 50, name=".nkitui-rm-2")
    assert removal.remove_tree(root) is True
    assert not root.exists()


def test_a_missing_folder_is_already_gone_and_a_file_is_unlinked(tmp_path):
    assert removal.remove_tree(tmp_path / "never-made") is True
    (tmp_path / "file").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert removal.remove_tree("file", dir_fd=fd) is True
    finally:
        os.close(fd)
    assert not (tmp_path / "file").exists()


def test_the_reaper_removes_a_deep_scratch_folder_when_nkitui_dies(tmp_path):
    """The reaper runs isolated (`python -I -S`) and loads the removal by its path: it must clean a deep
    tree too when nkitui died without doing so."""
    scratch = tmp_path / "nkitui-run-orphan"
    scratch.mkdir()
    nest(scratch, sys.getrecursionlimit() * 2)
    reaper = REPO / "nkitui" / "executor" / "confine" / "reaper.py"
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(reaper)], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    watch = json.dumps({"watch": 2 ** 22 + 7, "start": None, "scratch": str(scratch)}) + "\n"
    _, err = proc.communicate(watch.encode(), timeout=60)  # then end-of-file: nkitui "died"
    assert proc.returncode == 0, err.decode()
    assert not scratch.exists()


DIES_AFTER_MAKING_A_SCRATCH = '''
import os, signal, sys
from pathlib import Path
from nkitui.executor.workspace import make_scratch

kept = make_scratch(Path(sys.argv[1]))
kept.remove()  # removed by its maker: the reaper forgets it
left = make_scratch(Path(sys.argv[1]))
print(kept.root, left.root, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed while "copying the task", before any child was watched
'''


def test_a_scratch_folder_is_removed_when_nkitui_dies_before_its_child_starts(tmp_path):
    """A Ray worker killed by its node between making a run's scratch folder and starting the run's child
    left the folder behind (tests/batch/test_ray.py): a scratch folder is held by the reaper from the
    moment it exists."""
    task = tmp_path / "task"
    task.mkdir()
    (task / "kernel.py").write_text("x = 1\n")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", DIES_AFTER_MAKING_A_SCRATCH, str(task)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    kept, left = (Path(p) for p in done.stdout.split())
    assert left.parent == tmp_path and left.name.startswith("nkitui-run-")
    deadline = time.monotonic() + 20
    while left.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left.exists() and not kept.exists()


NEST_THEN_EXIT = '''
import os


def nest(payload, ctx):
    os.chdir(ctx.scratch)
    for _ in range(payload["depth"]):
        os.mkdir("d")
        os.chdir("d")
    print("NESTED", flush=True)
    return 0
'''


def start(tmp_path: Path, source: str, entry: str, payload: dict, limits: Limits):
    helpers = tmp_path / "helpers"
    helpers.mkdir(exist_ok=True)
    (helpers / f"{entry.split(':')[0]}.py").write_text(textwrap.dedent(source))
    return start_worker(WorkerJob(entry=entry, payload=payload, limits=limits, workspace=None,
                                  python_path=[str(helpers), str(REPO)]))


def test_a_run_whose_child_nested_thousands_of_folders_ends_and_leaves_nothing(tmp_path):
    # no disk watch: the child gets as deep as it likes (the watch would stop it at an unknown depth)
    handle = start(tmp_path, NEST_THEN_EXIT, "nest:nest", {"depth": 1500},  # deeper than the recursion limit, within PATH_MAX
                   Limits(timeout_s=120, disk_mb=None, max_entries=None))
    assert handle.wait(timeout=150) is not None or handle.status not in ("running", "starting"), \
        f"the run never ended: {handle.status}"
    assert any(e.text == "NESTED" for e in handle.log.entries()), [e.text for e in handle.log.entries()][-20:]
    assert handle.exit is not None and handle.exit.kind == "ok", handle.exit
    assert not handle.scratch.root.exists(), "the scratch folder outlived the run"


SLEEPER = '''
import time


def sleep(payload, ctx):
    print("SLEEPING", flush=True)
    time.sleep(60)
    return 0
'''


def test_a_failure_of_the_parents_watch_ends_the_run_with_an_internal_error(tmp_path, monkeypatch):
    """Fault injection into nkitui's own code (the parent's disk watch raises): the worker is stopped,
    the stream ends, and the run says what failed; it is never left running with nobody watching."""
    def broken(self, pid):
        raise RuntimeError("the watch broke")

    monkeypatch.setattr(DiskWatch, "check", broken)
    t0 = time.monotonic()
    handle = start(tmp_path, SLEEPER, "sleeper:sleep", {}, Limits(timeout_s=90, disk_mb=64, max_entries=500))
    handle.wait(timeout=60)
    assert handle.status not in ("running", "starting"), "the run never ended"
    assert time.monotonic() - t0 < 45, "the worker was left to its own timeout"
    internal = [e for e in handle.errors if e.kind == "internal"]
    assert internal and "watching the worker: RuntimeError: the watch broke" in internal[0].message, handle.errors
    assert handle.exit is not None and handle.exit.kind != "ok", handle.exit
    assert not handle.scratch.root.exists()


@pytest.mark.parametrize("where", ["read", "cleanup"])
def test_a_failure_of_the_io_thread_still_ends_the_stream(tmp_path, monkeypatch, where):
    from nkitui.executor import runner, workspace

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    if where == "read":
        monkeypatch.setattr(runner._EventStreamParser, "feed", broken)
    else:
        monkeypatch.setattr(workspace.Scratch, "remove", broken)
    handle = start(tmp_path, NEST_THEN_EXIT, "nest:nest", {"depth": 1}, Limits(timeout_s=60))
    handle.wait(timeout=60)
    assert handle.status not in ("running", "starting"), "the run never ended"
    monkeypatch.undo()
    removal.remove_tree(handle.scratch.root)  # what the broken clean-up left
    doing = "reading the worker's output" if where == "read" else "cleaning up after the worker"
    assert any(e.kind == "internal" and doing in e.message for e in handle.errors), handle.errors


UNPRIVILEGED = '''
import os, sys, time
sys.path.insert(0, sys.argv[1])
import removal
root = sys.argv[2]
os.makedirs(root + "/a/b/c/d")
open(root + "/a/b/c/f", "w").write("x")
os.makedirs(root + "/ro/sub/inner")
open(root + "/ro/g", "w").write("y")
os.chmod(root + "/ro/sub", 0o500)  # cannot be moved out (moving a folder rewrites its "..")
os.chmod(root + "/ro", 0o500)  # its entries cannot be unlinked
os.chmod(root + "/a/b/c", 0)  # cannot be entered
os.chmod(root + "/a/b", 0o300)  # cannot be listed
try:
    os.listdir(root + "/a/b")
    sys.exit("not locked: the check would prove nothing")
except PermissionError:
    pass
t0 = time.monotonic()
gone = removal.remove_tree(root)
print("GONE" if gone and not os.path.lexists(root) else "LEFT", round(time.monotonic() - t0, 2))
foreign = sys.argv[3]
t0 = time.monotonic()
print("FOREIGN", removal.remove_tree(foreign), os.path.exists(foreign + "/theirs/file"), round(time.monotonic() - t0, 2))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the locked-folder tests above already run without privileges")
def test_locked_folders_are_removed_by_an_unprivileged_owner():
    """As root every folder can be entered whatever its mode, so the tests above prove nothing about the
    rights taken back; here the same tree is removed by an unprivileged user, as nkitui runs on a Trn host.
    And what that user cannot remove (a folder of another user's inside) ends the removal with False,
    promptly, instead of a loop."""
    runuser = shutil.which("runuser")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        nobody = None
    if runuser is None or nobody is None:
        pytest.skip("runuser or the user nobody is missing")
    home = Path(tempfile.mkdtemp(prefix="nkitui-test-unprivileged-"))  # pytest's tmp_path is root's alone
    os.chmod(home, 0o755)
    try:
        _remove_as_nobody(home, runuser, nobody)
    finally:
        removal.remove_tree(home)


def _remove_as_nobody(home: Path, runuser: str, nobody) -> None:
    (home / "removal.py").write_bytes(Path(removal.__file__).read_bytes())
    (home / "script.py").write_text(UNPRIVILEGED)
    foreign = home / "foreign"
    (foreign / "theirs").mkdir(parents=True)
    (foreign / "theirs" / "file").write_text("root's")  # root's folder: nobody may not unlink in it
    for path in (home, home / "removal.py", home / "script.py", foreign):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    # an interpreter nobody can run (a venv's may live under /root): the removal needs the standard library only
    python = next((p for p in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3") if subprocess.run(
        [runuser, "-u", "nobody", "--", p, "-c", "pass"], capture_output=True, timeout=30).returncode == 0), None)
    if python is None:
        pytest.skip("no Python interpreter the user nobody may run")
    done = subprocess.run([runuser, "-u", "nobody", "--", python, "-I", str(home / "script.py"), str(home),
                           str(home / "tree"), str(foreign)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0].startswith("GONE"), done.stdout
    assert lines[1].startswith("FOREIGN False True"), done.stdout  # left, said so, and did not spin
    assert float(lines[1].split()[-1]) < 10, done.stdout

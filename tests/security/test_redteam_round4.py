"""Red team, round 4: what a confined kernel could still do to processes and files outside its run
with calls the earlier rounds left open. Each attack runs in a real confined worker (spawned, limited,
guarded and confined exactly as a kernel process is) and prints what happened:

  * prctl(PR_SET_DUMPABLE, 0): the parent can no longer read /proc/<child>/fd, so files the child
    unlinked while open vanish from the disk watch;
  * prlimit64 on another process (the evaluator, nkitui, the user's shell): lower its limits;
  * setpriority(PRIO_USER / PRIO_PGRP): renice every process of the user;
  * chmod 000 of a folder in the scratch folder: the watch cannot look inside (a place to hide a disk
    fill) and the removal after the run fails (the scratch folder outlives the run)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import start_worker

from .conftest import REPO, require

ATTACKS = '''
import ctypes, os, resource, time
from pathlib import Path

MiB = b"x" * (1 << 20)


def attack(payload, ctx):
    os.chdir(ctx.scratch)
    mode = payload["mode"]
    print("STARTED", flush=True)
    if mode == "dumpable-then-hide":
        rc = ctypes.pythonapi.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        print("DUMPABLE", rc, flush=True)
        kept = []
        for i in range(200):
            fd = os.open(f"u{i}", os.O_RDWR | os.O_CREAT, 0o600)
            os.unlink(f"u{i}")
            os.write(fd, MiB)
            kept.append(fd)
        print("HIDDEN 200 MiB", flush=True)
    elif mode == "prlimit-parent":
        try:
            resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (3, 3))
            print("LOWERED the parent's limit", flush=True)
        except OSError as exc:
            print("REFUSED", type(exc).__name__, flush=True)
        return 0
    elif mode == "renice-user":
        for which, who in ((os.PRIO_USER, os.getuid()), (os.PRIO_PGRP, os.getpgid(os.getppid())),
                           (os.PRIO_PROCESS, os.getppid())):
            try:
                os.setpriority(which, who, 19)
                print("RENICED", which, flush=True)
            except OSError as exc:
                print("REFUSED", which, type(exc).__name__, flush=True)
        os.setpriority(os.PRIO_PROCESS, 0, 5)  # its own priority stays its own business
        print("OWN OK", flush=True)
        return 0
    elif mode == "chmod-hide":
        # writable, not listable: a walk cannot see what is inside (made so by mkdir: chmod itself is
        # refused where seccomp is active)
        Path("hide").mkdir(mode=0o300)
        for i in range(200):
            Path("hide", f"f{i}").write_bytes(MiB)
        print("WROTE 200 MiB", flush=True)
    elif mode == "chmod-outlive":
        Path("keep/open").mkdir(parents=True)
        Path("keep/open/f").write_bytes(b"x")
        Path("keep/inner").mkdir(mode=0)  # a folder no one may enter, made without chmod
        try:  # where seccomp is active chmod is refused; elsewhere the folders are locked the direct way
            os.chmod("keep/open", 0)
            os.chmod("keep", 0o500)
        except PermissionError:
            print("CHMOD REFUSED", flush=True)
        print("LOCKED", flush=True)
        return 0
    time.sleep(30)
    return 0
'''


def run(tmp_path: Path, mode: str):
    helpers = tmp_path / "helpers"
    helpers.mkdir(exist_ok=True)
    (helpers / "attacks4.py").write_text(textwrap.dedent(ATTACKS))
    handle = start_worker(WorkerJob(entry="attacks4:attack", payload={"mode": mode},
                                    limits=Limits(timeout_s=60, disk_mb=64, max_entries=500),
                                    workspace=None, python_path=[str(helpers), str(REPO)]))
    handle.wait()
    return handle, [e.text for e in handle.log.entries() if e.stream == "stdout"]


def test_the_child_cannot_make_itself_undumpable_to_hide_from_the_disk_watch(tmp_path, host, record_property):
    record_property("protection", "round4:dumpable")
    require(host, "seccomp")
    handle, out = run(tmp_path, "dumpable-then-hide")
    assert "STARTED" in out and "DUMPABLE 0" not in out, out  # prctl refused (-1)
    assert handle.exit.kind == "disk-limit", (handle.exit, out)
    assert not handle.scratch.root.exists()


def test_the_child_cannot_change_another_processs_limits(tmp_path, host, record_property):
    record_property("protection", "round4:prlimit-other")
    require(host, "seccomp")
    soft, hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
    handle, out = run(tmp_path, "prlimit-parent")
    assert "REFUSED PermissionError" in out, out
    assert not any(line.startswith("LOWERED") for line in out)
    assert __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE) == (soft, hard)


def test_the_child_cannot_renice_the_users_other_processes(tmp_path, host, record_property):
    record_property("protection", "round4:renice-others")
    require(host, "seccomp")
    before = os.getpriority(os.PRIO_PROCESS, 0)
    handle, out = run(tmp_path, "renice-user")
    assert not any(line.startswith("RENICED") for line in out), out
    assert "OWN OK" in out, out
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_a_folder_made_unreadable_hides_nothing_from_the_disk_watch(tmp_path, record_property):
    record_property("protection", "round4:chmod-hide")
    handle, out = run(tmp_path, "chmod-hide")
    # The watch polls, so a fast writer may finish its 200 MiB before the kill lands (how far past the
    # budget depends on the machine's speed, never asserted here); what matters is that the hidden
    # files are counted: without that the child sleeps out its 30 s and exits normally.
    assert handle.exit.kind == "disk-limit", (handle.exit, out)
    assert not handle.scratch.root.exists(), "the scratch folder outlived the run"


def test_a_locked_folder_does_not_make_the_scratch_folder_outlive_the_run(tmp_path, record_property):
    record_property("protection", "round4:chmod-outlive")
    handle, out = run(tmp_path, "chmod-outlive")
    assert "LOCKED" in out, out
    assert not handle.scratch.root.exists(), "the scratch folder outlived the run"


def test_removing_a_scratch_folder_never_touches_what_holds_it(tmp_path):
    """The removal takes back rights inside the scratch folder only: a missing or linked scratch root
    must not make it chmod the folder above (/tmp itself, in a real run)."""
    from nkitui.executor.workspace import remove_tree

    holder = tmp_path / "holder"
    holder.mkdir(mode=0o755)
    os.chmod(holder, 0o1777)
    remove_tree(holder / "nkitui-run-gone")
    os.symlink(tmp_path, holder / "nkitui-run-link")
    remove_tree(holder / "nkitui-run-link")
    assert (holder.stat().st_mode & 0o7777) == 0o1777 and (tmp_path / "holder").exists()

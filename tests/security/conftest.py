"""Fixtures of the red-team suite: a fake HOME holding credentials, a folder outside every run
(the canary), a TCP listener, the host's confinement as the self-test proves it, and wrong kernels
(vector add computing a * b) carrying an attack."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.add_task import add_manifest, write_files

REPO = Path(__file__).resolve().parents[2]
SECRET = "AKIAZZZZSECRETCANARY7"  # an AWS access key id shape: redaction must catch it too
SECRET_VALUE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYcanary0000"

WRONG_KERNEL = """\
import os
import sys
import time

import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

{module}

@nki.jit
def add_kernel(a, b):
{prelude}
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), nl.load(b)))
    return out
"""


def wrong_task(root: Path, *, prelude: str = "", module: str = "", task_id: str = "wrong", files: dict | None = None) -> Path:
    """A task whose kernel is wrong (a * b for a + b) and runs `prelude` in its body, `module` at import."""
    body = textwrap.indent(textwrap.dedent(prelude).strip("\n"), "    ") if prelude.strip() else "    pass"
    source = WRONG_KERNEL.format(prelude=body, module=textwrap.dedent(module).strip("\n"))
    manifest = add_manifest(task_id=task_id, header='op = "elementwise"', cuda=False, tolerance="1e-6",
                            tail="[evaluation]\nseeds = [0]")
    return write_files(root, {"add_nki.py": source, "reference.py": "def add(a, b):\n    return a + b\n",
                              "task.toml": manifest, **(files or {})})


def git_commit_all(root: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "task"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """XDG folders in tmp; a fake HOME holding ~/.aws/credentials; secrets in nkitui's environment."""
    for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "xdg" / var.lower()))
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[default]\naws_access_key_id = {SECRET}\naws_secret_access_key = {SECRET_VALUE}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
    return home


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A folder outside every run: nothing may appear in it, its secret may not be read."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(f"canary {SECRET_VALUE}\n")
    return folder


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 that records whether anything connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.setblocking(False)

    class Listener:
        port = server.getsockname()[1]

        def connected(self) -> bool:
            try:
                conn, _ = server.accept()
            except BlockingIOError:
                return False
            conn.close()
            return True

    yield Listener()
    server.close()


@pytest.fixture(scope="session")
def host():
    """What this host's confinement proves it stops (nkitui.executor.confine.selftest)."""
    from nkitui.executor.confine.selftest import run_selftest

    return run_selftest()


def require(host, *layers: str) -> None:
    """Skip (with the reason) unless every named layer is active on this host."""
    active = set(host.report.get("active", []))
    for layer in layers:
        if layer == "seccomp" and not ("seccomp" in active and host.observed.get("seccomp") == 2):
            pytest.skip(f"seccomp is not active on this host: {host.report.get('summary')}")
        if layer == "landlock" and "landlock" not in active:
            pytest.skip(f"landlock is not active on this host: {host.report.get('summary')}")


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line holds `marker` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout: float = 5.0) -> list[int]:
    """The pids still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if alive(p)]
        if left:
            time.sleep(0.05)
    return left


def nkitui_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "nkitui", *args]

"""The confinement layers themselves (nkitui.executor.confine): each protection proven on this host
by a real confined child, the seccomp tables checked against the kernel headers, degradation told in
words, and the libraries kernels need still working under confinement."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nkitui.executor import confine
from nkitui.executor.confine import seccomp, selftest, syscalls

from .conftest import REPO

HEADERS = {
    "x86_64": (Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), syscalls.X86_64),
    "aarch64": (Path("/usr/include/asm-generic/unistd.h"), syscalls.AARCH64),
}


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_syscall_numbers_match_the_kernel_headers(arch):
    header, table = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"{header} is not installed (linux-libc-dev)")
    text = header.read_text()
    defined = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b", text)}
    generic = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define __NR3264_(\w+)\s+(\d+)\b", text)}
    for m in re.finditer(r"#define __NR_(\w+)\s+__NR3264_(\w+)\b", text):  # asm-generic: fcntl, mmap, ...
        if m.group(2) in generic:
            defined.setdefault(m.group(1), generic[m.group(2)])
    checked = {name: number for name, number in table.items() if name in defined}
    assert checked, f"no syscall of the table found in {header}"
    assert {name: defined[name] for name in checked} == checked
    # a name missing from an old header must be one of the newer calls, never a typo
    assert set(table) - set(defined) <= {"clone3", "pidfd_getfd", "process_madvise", "mount_setattr", "open_tree",
                                         "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "pidfd_open",
                                         "io_uring_setup", "io_uring_enter", "io_uring_register", "pidfd_send_signal",
                                         "fchmodat2", "setxattrat", "removexattrat", "file_setattr"}


@pytest.mark.parametrize("arch, table", [(syscalls.AUDIT_ARCH_X86_64, syscalls.X86_64),
                                         (syscalls.AUDIT_ARCH_AARCH64, syscalls.AARCH64)])
@pytest.mark.parametrize("processes, network", [(False, False), (True, False), (False, True)])
def test_the_filter_assembles_for_both_architectures(arch, table, processes, network):
    program = seccomp.build_filter(seccomp.FilterSpec(own_pid=4242, processes=processes, network=network), arch, table)
    assert len(program) % 8 == 0 and len(program) // 8 < 200
    # it starts by checking the architecture (a foreign arch is killed: the last instruction)
    assert program[:2] == bytes([0x20, 0]) and int.from_bytes(program[4:8], "little") == 4
    assert int.from_bytes(program[-4:], "little") == seccomp.SECCOMP_RET_KILL_PROCESS
    assert (4242).to_bytes(4, "little") in program or processes


@pytest.mark.parametrize("name", [n for n in selftest.PROBES])
def test_protection_on_this_host(name, host, record_property):
    """One test per escape: verified here, or skipped with the reason the layer is missing."""
    if selftest.PROBES[name][1]:  # the threads probe is a must-keep-working, not a protection
        record_property("protection", name)
    probe = next(p for p in host.probes if p.name == name)
    if probe.outcome == "unverified":
        pytest.skip(f"{probe.what}: unverified on this host — {probe.detail}")
    assert probe.outcome == "verified", f"{probe.what}: {probe.detail}"


def test_the_parent_sees_the_filter_in_proc_and_hardens_itself(host):
    from nkitui.executor.confine import libc

    if "seccomp" in host.report["active"]:
        assert host.observed["seccomp"] == 2 and host.observed["no_new_privs"] is True
    assert host.observed["own_session"] is True
    confine.harden_parent()
    assert libc.prctl(libc.PR_GET_DUMPABLE) == 0


def _child(code: str, scratch: Path, **env: str) -> dict:
    """Run `code` in a fresh interpreter spawned the way a worker is; it prints one JSON line."""
    proc = confine.spawn([sys.executable, "-P", "-c", textwrap.dedent(code)], confine.ConfinementPolicy(scratch=scratch),
                         python_path=[str(REPO)], extra_env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=scratch)
    out, err = proc.communicate(timeout=120)
    confine.release(proc.pid)
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def test_a_missing_landlock_degrades_with_the_reason_and_seccomp_still_holds(tmp_path):
    got = _child("""
        import json, os, socket
        from pathlib import Path
        from nkitui.executor import confine
        from nkitui.executor.confine import landlock
        def unavailable(**kw):
            raise landlock.LandlockUnavailable("landlock unavailable on kernel 5.4")
        landlock.apply = unavailable
        report = confine.enter(confine.ConfinementPolicy(scratch=Path(os.getcwd())))
        try:
            socket.socket()
            sock = "allowed"
        except PermissionError:
            sock = "refused"
        print(json.dumps({"summary": report.summary(), "socket": sock}))
    """, tmp_path)
    assert "degraded: landlock unavailable on kernel 5.4" in got["summary"]
    assert "landlock" not in got["summary"].split(";")[0]
    if got["summary"].startswith("sandbox: seccomp"):
        assert "no network" in got["summary"] and got["socket"] == "refused"


def test_a_missing_seccomp_degrades_with_the_reason(tmp_path):
    got = _child("""
        import errno, json, os
        from pathlib import Path
        from nkitui.executor import confine
        from nkitui.executor.confine import seccomp
        def refused(spec):
            raise OSError(errno.EINVAL, "seccomp: EINVAL")
        seccomp.install = refused
        report = confine.enter(confine.ConfinementPolicy(scratch=Path(os.getcwd())))
        print(json.dumps({"summary": report.summary(), "active": report.active}))
    """, tmp_path)
    assert "seccomp" not in got["active"]
    assert "degraded: seccomp unavailable on kernel" in got["summary"]


def test_numpy_blas_threads_ml_dtypes_and_the_emulator_work_under_confinement(tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 41\n")
    got = _child("""
        import json, os, sys, threading
        from pathlib import Path
        from nkitui.executor import confine
        report = confine.enter(confine.ConfinementPolicy(scratch=Path(os.getcwd())))
        import numpy as np
        import ml_dtypes
        a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
        product = float((a @ a).sum())
        bf16 = np.asarray([1.0, 2.5], dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32).tolist()
        from nkitui import emulator
        emulator.install()
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        @nki.jit
        def add(x, y):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.add(nl.load(x), nl.load(y)))
            return out
        x = np.ones((128, 8), np.float32)
        emulated = float(add(x, x).sum())
        sys.path.append(os.getcwd())
        import helper_mod
        threads = threading.active_count()
        print(json.dumps({"summary": report.summary(), "product": product, "bf16": bf16, "emulated": emulated,
                          "helper": helper_mod.VALUE, "pycache": os.path.exists("__pycache__"),
                          "home": os.environ["HOME"], "tmp": os.environ["TMPDIR"]}))
    """, tmp_path, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    assert got["bf16"] == [1.0, 2.5] and got["emulated"] == 2 * 128 * 8 and got["helper"] == 41
    assert got["pycache"] is False, "bytecode writes are not attempted (PYTHONDONTWRITEBYTECODE)"
    assert got["home"].startswith(str(tmp_path)) and got["tmp"].startswith(str(tmp_path))


def test_the_childs_environment_holds_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "x" * 36)
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "hunter2")
    got = _child("""
        import json, os
        print(json.dumps(dict(os.environ)))
    """, tmp_path)
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "MY_SERVICE_PASSWORD"} & set(got)
    assert "hunter2" not in json.dumps(got)
    assert got["HOME"].startswith(str(tmp_path))


def test_entering_costs_milliseconds(tmp_path):
    got = _child("""
        import json, os
        from pathlib import Path
        from nkitui.executor import confine
        report = confine.enter(confine.ConfinementPolicy(scratch=Path(os.getcwd())))
        print(json.dumps({"ms": report.enter_ms}))
    """, tmp_path)
    # a wide bound: a loaded CI machine; the measured cost is a few ms (docs/executor.md)
    assert got["ms"] < 500


def test_summary_lines_and_the_parent_does_not_believe_a_false_claim():
    full = confine.ConfinementReport(("seccomp", "landlock", "no network", "new session"))
    assert full.summary() == "sandbox: seccomp, landlock, no network, new session"
    assert confine.ConfinementReport((), ("landlock unavailable on kernel 5.4",)).summary() == \
        "degraded: landlock unavailable on kernel 5.4"
    assert confine.ConfinementReport.from_dict(full.to_dict()) == full
    claimed = confine.record({"confinement": full.to_dict()}, {"seccomp": 0, "no_new_privs": False})
    assert claimed["summary"].startswith("sandbox: landlock")
    assert "the worker reported seccomp but /proc showed Seccomp: 0" in claimed["summary"]
    believed = confine.record({"confinement": full.to_dict()}, {"seccomp": 2, "no_new_privs": True})
    assert believed["summary"] == full.summary()


def test_auto_allows_processes_only_when_an_sdk_is_findable(tmp_path):
    assert confine.sdk_backend_possible("emulator") is False
    assert confine.sdk_backend_possible("neuron") is True
    assert confine.sdk_backend_possible("auto") is False  # no Neuron SDK on this machine's paths
    fake = REPO / "tests" / "fakes" / "sdk"
    assert confine.sdk_backend_possible("auto", [str(fake)]) is True


def test_the_sandbox_check_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "nkitui", "sandbox", "check", "--json"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    data = json.loads(proc.stdout)
    assert data["total"] == len([p for p in selftest.PROBES.values() if p[1]])
    assert proc.returncode == (0 if data["ok"] else 1)
    assert not [p for p in data["probes"] if p["outcome"] == "FAILED"]

"""Red team, round 9c (finding 1): a kernel that keeps state across its launches.

The kernel is `vector_add`, right on its first three launches and wrong (`a + a`) from the fourth on: it
counts its calls somewhere that outlives a launch. On 478370d the kernel's process launched only the three
seeds (the judging launches are answered by the verified log's replay), so every launch that counted was
right and the run PASSED; any fixed number of launches can be counted the same way.

Now (1) every seed is launched in a kernel process of its own, forked fresh from the evaluator, with its
own scratch copy: each counted launch is a first launch; and (2) each launch is audited in its process for
state it leaves behind that a later launch in the same process could read (the task's module globals,
deep; function attributes and defaults; builtins; attributes added to numpy's, nkitui's or any module;
files in the scratch folder; descriptors; the environment): a launch that leaves state is not proven
correct beyond its first launch, and the run cannot pass (`HACK-LAUNCH-STATE`, the `kernel-runs` check not
proven, the evidence rule makes it an internal-error naming what changed). SysV IPC and POSIX message
queues are refused by seccomp. Each attack here passed on 478370d.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run import start_evaluation

SIZE = 262144  # the smallest size vector_add's tiling allows (2 cores x 128 partitions x 1024)

# (module-level code, the kernel body's count: an expression evaluated once per launch, after it counted)
ATTACKS = {
    "module-list": ("_CALLS = []", "_CALLS.append(1)\n    n = len(_CALLS)"),
    "global-int": ("_N = 0", "global _N\n    _N += 1\n    n = _N"),
    "function-attribute": ("def _helper():\n    return 0", "_helper.calls = getattr(_helper, 'calls', 0) + 1\n    n = _helper.calls"),
    "default-argument": ("def _count(box=[]):\n    box.append(1)\n    return len(box)", "n = _count()"),
    # builtins reached without a name the static rule knows (len.__self__ through operator.attrgetter)
    "builtins": ("import operator as _op\n_B = _op.attrgetter('__self__')(len)",
                 "_d = vars(_B)\n    _d.setdefault('_nk_calls', []).append(1)\n    n = len(_d['_nk_calls'])"),
    "numpy-attribute": ("import numpy as _np\n_M = _np", "_M.calls = getattr(_M, 'calls', 0) + 1\n    n = _M.calls"),
    "numpy-list": ("import numpy as _np", "_np.__all__.append('_')\n    n = _np.__all__.count('_')"),
    "nki-function-attribute": ("", "_f = nl.add\n    _f.calls = getattr(_f, 'calls', 0) + 1\n    n = _f.calls"),
    "scratch-file": ("import os as _os", "with open('calls.txt', 'a') as f:\n        f.write('x')\n    n = _os.path.getsize('calls.txt')"),
    "file-opened-at-import": ("_F = open('calls.bin', 'a+b', buffering=0)", "_F.write(b'x')\n    n = _F.tell()"),
    "memfd-at-import": ("import os as _os\n_FD = _os.memfd_create('calls')",
                        "_os.ftruncate(_FD, _os.fstat(_FD).st_size + 1)\n    n = _os.fstat(_FD).st_size"),
    "shared-mmap": ("import mmap as _mmap\n_MAP = _mmap.mmap(-1, 4096)", "_MAP[0] = _MAP[0] + 1\n    n = _MAP[0]"),
    "environment": ("import os as _os", "_os.environ['NK_CALLS'] = str(int(_os.environ.get('NK_CALLS', '0')) + 1)\n    n = int(_os.environ['NK_CALLS'])"),
    "random-state": ("import random as _random\n_random.seed(7)\n_DRAWS = [_random.random() for _ in range(8)]\n_random.seed(7)",
                     "n = _DRAWS.index(_random.random()) + 1"),
}


def counting_task(root: Path, module: str, count: str, *, threshold: int = 6) -> Path:
    """A copy of vector_add at SIZE elements whose kernel computes a + a from its 4th launch on: the body runs
    once per core of the logical core (LNC=2), so three launches are six calls."""
    shutil.copytree(bundled_dir("sample_tasks") / "vector_add", root)
    manifest = root / "task.toml"
    manifest.write_text(manifest.read_text().replace("1048576", str(SIZE)))
    source = root / "vector_add_nki.py"
    text = source.read_text()
    text = text.replace("P = 128  # partitions per tile", f"{module}\n\nP = 128  # partitions per tile")
    text = text.replace("    n = a.shape[0]\n",
                        f"    {count}\n    wrong = n > {threshold}\n    n = a.shape[0]\n")
    text = text.replace("data2=b_tile", "data2=a_tile if wrong else b_tile")
    assert "a_tile if wrong" in text and "wrong = n >" in text
    source.write_text(text)
    return root


def _evaluate(task: Path, seeds: int | None = None):  # noqa: ANN202
    handle = start_evaluation(EvaluationRequest.of(task, seeds=seeds, static=False, trials=True, precision=True,
                                                   store=False, timeout_s=180.0, memory_mb=4096))
    list(handle.events())
    return handle.result


@pytest.mark.parametrize("channel", sorted(ATTACKS))
def test_a_kernel_counting_its_launches_is_not_passed(tmp_path: Path, channel: str, record_property) -> None:
    record_property("protection", f"launch-state:{channel}")
    module, count = ATTACKS[channel]
    result = _evaluate(counting_task(tmp_path / "task", module, count))
    checks = [(c.id, c.passed, c.detail) for c in result.checks]
    assert result.status != "passed" and result.exit_code != 0, (result.status, checks)


def test_an_honest_copy_passes_and_its_launches_leave_no_state(tmp_path: Path) -> None:
    """The control: the same copy with a count that is never kept (a local) passes, its launches audited clean."""
    result = _evaluate(counting_task(tmp_path / "task", "", "n = 0"))
    checks = [(c.id, c.passed, c.detail) for c in result.checks]
    assert result.status == "passed", (result.status, checks)
    assert not any(f.rule == "HACK-LAUNCH-STATE" for f in result.findings), result.findings


IPC_PROBE = """
    import ctypes, errno, json, os
    from pathlib import Path
    from nkitui.executor import confine
    {enter}
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mq_open.restype = ctypes.c_int
    got = {{}}
    for name, call in (("shmget", lambda: libc.shmget(0x4E4B3134, 4096, 0o1600)),  # IPC_CREAT | 0600
                       ("semget", lambda: libc.semget(0x4E4B3134, 1, 0o1600)),
                       ("msgget", lambda: libc.msgget(0x4E4B3134, 0o1600)),
                       ("mq_open", lambda: libc.mq_open(b"/nkitui-state-probe", os.O_CREAT | os.O_RDWR, 0o600, None))):
        ctypes.set_errno(0)
        result = call()
        got[name] = "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
        if result >= 0:  # made outside confinement (the control): removed again
            if name == "shmget":
                libc.shmctl(result, 0, None)  # IPC_RMID
            elif name == "semget":
                libc.semctl(result, 0, 0)
            elif name == "msgget":
                libc.msgctl(result, 0, None)
            else:
                libc.mq_unlink(b"/nkitui-state-probe")
    print(json.dumps(got))
"""


def test_sysv_ipc_and_posix_message_queues_are_refused_to_a_confined_process(tmp_path: Path, host) -> None:
    """State that outlives a process outside any scratch folder (the IPC namespace): a kernel process could leave a
    count there for the next seed's fresh process. seccomp refuses every call that makes or reaches it (ctypes is
    refused to task code by the guard and the integrity rule besides; this probes the OS layer alone)."""
    import json
    import subprocess
    import sys
    import textwrap

    from nkitui.executor import confine
    from tests.security.conftest import REPO, require

    require(host, "seccomp")

    def child(enter: str) -> dict:
        code = textwrap.dedent(IPC_PROBE.format(enter=enter))
        proc = confine.spawn([sys.executable, "-P", "-c", code], confine.ConfinementPolicy(scratch=tmp_path),
                             python_path=[str(REPO)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
        out, err = proc.communicate(timeout=120)
        confine.release(proc.pid)
        assert proc.returncode == 0, err.decode()[-2000:]
        return json.loads(out.decode().strip().splitlines()[-1])

    control = child("")
    if any(v != "ok" for v in control.values()):
        pytest.skip(f"this host refuses IPC to unconfined processes too: {control}")
    confined = child("confine.enter(confine.ConfinementPolicy(scratch=Path(os.getcwd())))")
    assert confined == {"shmget": "EPERM", "semget": "EPERM", "msgget": "EPERM", "mq_open": "EPERM"}, confined


def test_each_seed_is_the_first_launch_of_its_own_process(tmp_path: Path) -> None:
    """The kernel prints its process id and its count: every seed's launch is the first (the body runs once per core
    of the logical core, LNC=2: counts 1 and 2) of a process no other seed ran in. On 478370d one process ran the
    three seeds, counting to 6."""
    import re

    from nkitui.executor.events import LogEvent

    task = counting_task(tmp_path / "task", "import os as _os\n_CALLS = []",
                         "_CALLS.append(1)\n    n = len(_CALLS)\n    print(f'launch pid={_os.getpid()} n={n}', flush=True)")
    handle = start_evaluation(EvaluationRequest.of(task, static=False, trials=True, precision=True, store=False,
                                                   timeout_s=180.0, memory_mb=4096))
    lines = [ev.text for ev in handle.events() if isinstance(ev, LogEvent) and "launch pid=" in ev.text]
    counts: dict[str, int] = {}
    for pid, n in re.findall(r"pid=(\d+) n=(\d+)", "\n".join(lines)):
        counts[pid] = max(counts.get(pid, 0), int(n))
    assert len(counts) == 3 and set(counts.values()) == {2}, lines
    assert handle.result.status != "passed"  # the launches left `_CALLS` grown: HACK-LAUNCH-STATE
    assert any(f.rule == "HACK-LAUNCH-STATE" for f in handle.result.findings)

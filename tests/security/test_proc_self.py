"""The process's own /proc: a kernel may read what the C library and OpenBLAS read there (maps, status),
never its memory (/proc/self/mem holds the request ids nkitui's server answers with) nor its environment,
whichever name reaches them (/proc/self, /proc/<pid>, /proc/thread-self, /proc/self/task/<tid>, a
relative name under a descriptor of /proc/self). A reply forged without the id is still caught."""

from __future__ import annotations

from nkitui.executor.events import LogEvent

from .conftest import require
from .test_forgery import assert_not_passed, check, evaluate, findings, wrong_task
from .test_redteam_channels import FORGED_REPLY, WRITER_BY_NAME

PROC_READS = '''
def _read_own_proc():
    import os, threading
    pid, tid = os.getpid(), threading.get_native_id()
    with open("/proc/self/maps") as f:
        start = int(f.readline().split("-")[0], 16)
    print("MAPS ok")
    def mem_at(path):
        fd = os.open(path, os.O_RDONLY)
        return os.pread(fd, 64, start)
    def relative(name):
        folder = os.open("/proc/self", os.O_RDONLY | os.O_DIRECTORY)
        return os.read(os.open(name, os.O_RDONLY, dir_fd=folder), 64)
    attempts = {
        "mem": lambda: mem_at("/proc/self/mem"),
        "mem-pid": lambda: mem_at(f"/proc/{pid}/mem"),
        "mem-thread": lambda: mem_at("/proc/thread-self/mem"),
        "mem-task": lambda: mem_at(f"/proc/self/task/{tid}/mem"),
        "mem-dirfd": lambda: relative("mem"),
        "environ": lambda: open("/proc/self/environ", "rb").read(),
        "environ-task": lambda: open(f"/proc/self/task/{tid}/environ", "rb").read(),
        "environ-dirfd": lambda: relative("environ"),
        "cwd": lambda: os.listdir("/proc/self/cwd/../.."),
        "root": lambda: os.listdir("/proc/self/root"),
        "pagemap": lambda: open("/proc/self/pagemap", "rb").read(8),
    }
    for name, attempt in attempts.items():
        try:
            data = attempt()
            print("READ", name, len(data))
        except OSError as exc:
            print("REFUSED", name, type(exc).__name__)
'''


def _stdout(events) -> list[str]:  # noqa: ANN001
    return [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]


def test_the_kernel_cannot_read_its_own_memory_or_environment_through_proc(tmp_path, host, record_property):
    record_property("protection", "proc-self:mem-environ")
    require(host, "landlock")
    task = wrong_task(tmp_path, PROC_READS,
                      edit=lambda s: s.replace("    return c\n", "    _read_own_proc()\n    return c\n"))
    result, events = evaluate(task)
    out = _stdout(events)
    assert "MAPS ok" in out, out  # what the libraries need stays readable
    assert not [line for line in out if line.startswith("READ")], out
    assert len({line.split()[1] for line in out if line.startswith("REFUSED")}) == 11, out  # on both cores
    assert_not_passed(result)
    reads = [f for f in findings(result, "EXEC-SANDBOX-READ")]
    assert reads and reads[0].file == "vector_add_nki.py"  # the guard names the line for the plain names


SCRAPE_THEN_FORGE = '''
def _scrape():
    import os, re
    found = []
    try:
        with open("/proc/self/maps") as f:
            regions = [l.split()[0].split("-") for l in f if "rw-p" in l]
        fd = os.open("/proc/self/mem", os.O_RDONLY)
        for lo, hi in regions:
            try:
                found += re.findall(rb'"id": ?"([0-9a-f]{32})"', os.pread(fd, int(hi, 16) - int(lo, 16), int(lo, 16)))
            except OSError:
                pass
        print("SCRAPED", len(found))
    except OSError as exc:
        print("REFUSED mem", type(exc).__name__)
    return found[-1].decode() if found else None
'''


def test_a_reply_forged_after_trying_to_scrape_the_request_id_is_still_caught(tmp_path, host, record_property):
    record_property("protection", "proc-self:forged-reply")
    require(host, "landlock")
    forge = FORGED_REPLY.replace('"id": name,', '"id": _scrape() or name,')
    task = wrong_task(tmp_path, WRITER_BY_NAME + SCRAPE_THEN_FORGE + forge,
                      edit=lambda s: s.replace("    return c\n", "    _forge()\n    return c\n"))
    result, events = evaluate(task)
    out = _stdout(events)
    assert "REFUSED mem PermissionError" in out, out
    assert_not_passed(result)
    assert check(result, "output:c").passed is False  # the kernel's own (wrong) outputs were compared
    assert check(result, "sandbox").passed is False
    assert findings(result, "EXEC-SANDBOX-FORGERY")

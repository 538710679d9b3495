"""Red team, parent side (issue #14; the class of the round-6 CI hang): what an untrusted child RETURNS
(event lines, files left in its scratch folder, .npy headers, its exit behaviour) must never make the
trusted side hang, wait without a deadline, crash one of its threads, or spin CPU and memory far past
the run's limits. The run ends promptly, names what the child did, and is never a pass.

Each hostile kernel is the wrong vector_add (a * b) with an attack appended; it writes on the event
descriptor nkitui's server uses (found with fstat, written with os.write by a computed name: nothing the
static rule fails, so the evaluator's reading is what stands). Every wait in these tests has a deadline:
a hang is a failure of the test, never a stuck suite.

  attack (what the child sends or does)           before the fix                        now
  an event nested 700 deep / deeper than json   I/O thread RecursionError; run "killed   stopped: "nested more than 64 levels"
                                                by SIGKILL from outside nkitui"
  one 60 MB event line                          25 s of CPU in the evaluator; timeout     stopped at 8 MB: "event line longer"
  2,000,000 log events                          1.5M events reached the starter; timeout  2,000 shown; stopped past 20,000
  1 / 40 log events of 4 MB                     780 MB in the starter (unconfined)        cut to 4,096 characters / stopped
  2,000,000 error events                        evaluator memory grows; timeout           stopped past 1,000 unsolicited events
  20,000,000 text lines / 2M almost-events      one look (or JSON parse) each; timeout    stopped past 20,000 lines
  500 data events of 3M numbers (6 MB each)     a parse and a walk per number; timeout    stopped past 16 MB (+1 MB per reply)
  100,000 forged replies                        one parse each, until the timeout         stopped past 100 forged replies
  "line": 1e400 in an error event               OverflowError in the I/O thread           no line (the event is read)
  lone surrogates ("\\ud800") in its words      "the run ended without a result"          U+FFFD; the report is written
  closes its event descriptor, keeps running    the run's timeout                         stopped 3 s later, in words
  SIGSTOP to itself                             the run's timeout                         stopped at once, in words
  a grandchild outside the group trickling      the reader never ends (degraded hosts)    reading ends 10 s after exit
  FIFOs, sockets, odd names in scratch          (withstood)                               removed; the run ends
  `emu run`: result.json/outputs as FIFO, link  `nkitui emu run` hangs for ever           a clear error at once
  `emu run`: 300,000 outputs listed             38 s, a 73 MB OUT.npz, "outputs written"  at most 1,024 outputs
  .npy headers: (-1, -1), 0 x 2^31 x ..., True  ValueError/TypeError past the readers     ArrayTransferError / NpzError
  trace.bin / replay.bin mutated at random      (withstood)                               their format errors only
  a child that does not leave when closed       the evaluator waited for the run's timeout  killed after 5 s, noted
  the reference process doing the same          as for the kernel's                       stopped the same way (invalid)
  80 KB of "-----BEGIN PRIVATE KEY-----" lines  ~4 s of redaction per error event         linear (one pass over the blocks)
  hardware timing report without its failures  KeyError in the evaluator: internal-error  timed-recheck fails, in words
  a link / FIFO planted in io/<next>/in        THE EVALUATOR WROTE THROUGH IT (a file     the folder must be new: stopped,
    (or io/<next>/0 by the reference)           outside overwritten; 2 MB written into a   a sandbox violation
                                                folder outside); a FIFO: the run's timeout
"""

from __future__ import annotations

import hashlib
import os
import queue
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run import start_evaluation
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import RunHandle
from tests.security.test_forgery import wrong_task

from .conftest import REPO

RUN_TIMEOUT_S = 90.0  # the run's own limit: an attack that is only stopped there fails the test's deadline
DEADLINE_S = 40.0

# The kernel's way to its event descriptor: the one pipe above stderr (fds 0-3 in a forked child). A
# computed name for os.write: the static rule shows it as a medium finding only, so the run goes on.
WRITER = '''
import os as _os
_W = getattr(_os, "wri" + "te")


def _event_fd():
    import stat
    for fd in range(3, 16):
        try:
            if stat.S_ISFIFO(_os.fstat(fd).st_mode):
                return fd
        except OSError:
            pass


def _send(data):
    fd = _event_fd()
    view = memoryview(data)
    while view:
        view = view[_W(fd, view):]
'''


def _call_attack(source: str) -> str:
    return source.replace("    return c\n", "    _attack()\n    return c\n")


def hostile(tmp_path: Path, attack: str) -> Path:
    return wrong_task(tmp_path, WRITER + textwrap.dedent(attack), edit=_call_attack)


def evaluate_within(task: Path, deadline_s: float = DEADLINE_S, **overrides):  # noqa: ANN201
    """(result, events, seconds): the evaluation, failed (and cancelled) when it does not end in time."""
    options = dict(seeds=1, static=False, trials=False, precision=False, store=False, timeout_s=RUN_TIMEOUT_S,
                   memory_mb=4096)
    options.update(overrides)
    started = time.monotonic()
    handle = start_evaluation(EvaluationRequest.of(task, **options))
    events = []
    try:
        for ev in handle.events(timeout=deadline_s):
            events.append(ev)
            if time.monotonic() - started > deadline_s:
                break
    except queue.Empty:
        pass
    elapsed = time.monotonic() - started
    if not handle.done:
        handle.close()
        pytest.fail(f"the run did not end within {deadline_s:g} s (its own limit is {RUN_TIMEOUT_S:g} s)")
    return handle.result, events, elapsed


def stopped_for(result, words: str) -> str:  # noqa: ANN001
    """The run ended as a crash naming what the kernel's process did; never a pass."""
    assert result.status == "crashed" and result.exit_code != 0, (result.status, result.error)
    message = result.error.message
    assert "the kernel process was stopped by nkitui" in message and words in message, message
    assert "from outside nkitui" not in message, message
    return message


# -- the event stream --------------------------------------------------------------------------------------
DEEP_DATA = '''
def _attack():
    depth = {depth}
    _send(b'{{"event":"data","kind":"sandbox","data":{{"violations":[' + b'{{"a":' * depth + b'1' + b'}}' * depth + b']}}}}\\n')
'''


@pytest.mark.parametrize("depth", [700, 100_000], ids=["700 deep: json reads it", "100000 deep: json cannot"])
def test_an_event_nested_too_deep_stops_the_child_with_the_reason(tmp_path, depth, record_property):
    record_property("protection", "parent:event-depth")
    result, _, elapsed = evaluate_within(hostile(tmp_path, DEEP_DATA.format(depth=depth)))
    message = stopped_for(result, "nested")
    assert "internal" not in result.status and "RecursionError" not in message
    assert elapsed < 20


LONG_LINE = '''
def _attack():
    _send(b"{" + b"x" * (60 << 20) + b"\\n")
'''


def test_an_endless_event_line_stops_the_child_at_its_cap_not_the_runs_timeout(tmp_path, record_property):
    record_property("protection", "parent:event-line-length")
    result, _, elapsed = evaluate_within(hostile(tmp_path, LONG_LINE))
    stopped_for(result, "an event line longer than 8 MB")
    assert elapsed < 20


FLOOD = '''
def _attack():
    _send({line!r} * {count})
'''


@pytest.mark.parametrize("what, line, count, words", [
    ("log events", b'{"event":"log","stream":"stdout","text":"x"}\n', 2_000_000, "more than 20,000 log events"),
    ("error events", b'{"event":"error","kind":"sandbox","message":"m"}\n', 2_000_000, "more than 1,000 events that answer no request"),
    ("progress events", b'{"event":"progress","done":1,"total":2}\n', 2_000_000, "more than 1,000 events that answer no request"),
    ("forged replies", b'{"event":"data","kind":"reply","data":{"id":"1-guess"}}\n', 100_000, "more than 100 replies to no request"),
    ("text lines", b"x\n", 20_000_000, "more than 20,000 lines that are not events"),
    ("almost events", b'{"event":"log","text":"x"}zz\n', 2_000_000, "more than 20,000 lines that are not events"),
])
def test_a_flood_on_the_event_descriptor_stops_the_child_and_never_reaches_the_starter(tmp_path, what, line, count,
                                                                                       words, record_property):
    record_property("protection", f"parent:flood-{what.replace(' ', '-')}")
    result, events, elapsed = evaluate_within(hostile(tmp_path, FLOOD.format(line=line, count=count)))
    stopped_for(result, words)
    assert len(events) < 5000, f"{len(events):,} events reached the starter"
    assert elapsed < 20


BIG_DATA = '''
def _attack():
    line = b'{"event":"data","kind":"x","data":{"a":[' + b"0," * (3 << 20) + b'0]}}\\n'  # 6 MB, 3M tokens
    for _ in range(500):
        _send(line)
'''


def test_large_events_that_answer_no_request_are_bounded_in_bytes_too(tmp_path, record_property):
    """Under the line cap and the count, 500 data events of 3M numbers each cost the evaluator a parse and a
    walk per number (minutes) while the child only wrote them: the run timed out."""
    record_property("protection", "parent:flood-bytes")
    result, _, elapsed = evaluate_within(hostile(tmp_path, BIG_DATA))
    stopped_for(result, "MB of events that answer no request")
    assert elapsed < 25


BIG_LOGS = '''
def _attack():
    line = b'{"event":"log","stream":"stdout","text":"' + b"y" * (4 << 20) + b'"}\\n'
    for _ in range({count}):
        _send(line)
'''


def test_huge_log_events_are_cut_and_a_stream_of_them_stops_the_child(tmp_path, record_property):
    """40 log events of 4 MB made the starter (nkitui check, the app: no memory limit) hold 780 MB."""
    record_property("protection", "parent:log-event-size")
    result, events, elapsed = evaluate_within(hostile(tmp_path / "one", BIG_LOGS.replace("{count}", "1")))
    assert result.status == "failed", (result.status, result.error)  # the wrong kernel, judged as usual
    texts = [e.text for e in events if getattr(e, "text", None) and "yyyy" in e.text]
    assert texts, len(texts)  # one per launch of the kernel
    assert max(map(len, texts)) <= 4200, sorted(map(len, texts))[-5:]
    assert elapsed < 30
    result, events, elapsed = evaluate_within(hostile(tmp_path / "forty", BIG_LOGS.replace("{count}", "40")))
    stopped_for(result, "MB of events that answer no request")
    assert max((len(e.text) for e in events if getattr(e, "text", None) and "yyyy" in e.text), default=0) <= 4200


ODD_WORDS = r'''
def _attack():
    _send(b'{"event":"log","stream":"stdout","text":"lone \\ud800 surrogate"}\n'
          b'\xff\xfe\x00 not utf-8\n'
          b'{"event":"error","kind":"sandbox","message":"\\udfff","file":"\\ud800.py","line":1e400}\n'
          b'{"event":"error","kind":"sandbox","message":"nan line","line":NaN}\n'
          b'{"event":"progress","done":1e400,"total":1}\n'
          b'{"event":"data","kind":"sandbox","data":{"violations":[{"action":"\\ud800","target":"x","detail":"\\udc00"}]}}\n'
          b'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n')
'''


def test_odd_numbers_and_lone_surrogates_are_read_and_the_report_is_written(tmp_path, record_property):
    """`"line": 1e400` raised OverflowError in the evaluator's reading thread; a lone surrogate reached the
    result, which no UTF-8 writer accepts: `nkitui check` said only "the run ended without a result"."""
    record_property("protection", "parent:odd-values")
    task = hostile(tmp_path, ODD_WORDS)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run([sys.executable, "-m", "nkitui", "check", str(task), "--seeds", "1", "--no-trials",
                           "--no-precision", "--no-static", "--quiet", "--timeout", str(int(RUN_TIMEOUT_S))],
                          capture_output=True, text=True, timeout=DEADLINE_S + 30, cwd=REPO, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ended without a result" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "output:c" in proc.stdout and "sandbox" in proc.stdout, proc.stdout[-2000:]
    assert "\ufffd" in proc.stdout  # the surrogates, shown as replacement characters
    saved = [line for line in proc.stdout.splitlines() if "saved as" in line]
    assert saved, "the run was not stored"


# -- the child's exit behaviour ----------------------------------------------------------------------------
CLOSE_AND_STAY = '''
def _attack():
    import time
    _os.close(_event_fd())
    time.sleep(3600)
'''

STOP_ITSELF = '''
def _attack():
    import signal
    signal.raise_signal(signal.SIGSTOP)
'''


@pytest.mark.parametrize("attack, words", [
    (CLOSE_AND_STAY, "it closed its event stream and was still running"),
    (STOP_ITSELF, "it stopped itself (SIGSTOP"),
], ids=["closes its event stream and stays", "SIGSTOP to itself"])
def test_a_child_that_can_never_answer_is_stopped_at_once_not_at_the_runs_timeout(tmp_path, attack, words, record_property):
    record_property("protection", "parent:" + ("closed-stream" if "close" in attack else "sigstop"))
    result, _, elapsed = evaluate_within(hostile(tmp_path, attack))
    stopped_for(result, words)
    assert elapsed < 20, f"{elapsed:.1f} s"


# -- the generic runner: a process outside the worker's group, files left in scratch ---------------------------
TRICKLE = '''
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()  # outside the worker's process group: its kill does not reach this one (a host without seccomp)
    with open({pidfile!r}, "w") as f:
        f.write(str(os.getpid()))
    end = time.monotonic() + 90
    while time.monotonic() < end:
        os.write(1, b"x")  # the event pipe, one byte at a time: never idle for 2 s, never 4 MB
        time.sleep(0.1)
    os._exit(0)
time.sleep(0.5)
os._exit(0)
'''


def _generic(tmp_path: Path, script: str, **limits) -> RunHandle:
    job = WorkerJob(entry="unused:unused", payload={}, workspace=None,
                    limits=Limits(**{"timeout_s": 60, "memory_mb": 2048, **limits}))
    return RunHandle(job, command=[sys.executable, "-c", textwrap.dedent(script)]).start()


def test_output_trickling_from_a_process_outside_the_group_does_not_keep_the_reader_forever(tmp_path, record_property):
    record_property("protection", "parent:drain-after-exit")
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    handle = _generic(tmp_path, TRICKLE.format(pidfile=str(pidfile)))
    try:
        handle.wait(timeout=45)
        assert handle.done, "the run never ended: its reader waits on a pipe a grandchild keeps open"
        assert time.monotonic() - started < 25
        assert any("kept the output open" in e.text for e in handle.log.entries())
    finally:
        handle.close()
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


ODD_FILES = '''
import os, socket, stat
os.mkfifo("fifo")
os.mkfifo(b"fifo \\xff\\xfe invalid utf-8")
s = socket.socket(socket.AF_UNIX)
s.bind("socket")
os.mkdir("line\\nbreak")
os.mkdir(b"\\xff\\xfe")
open(b"\\xff\\xfe/\\x80\\x81 file", "w").close()
os.mkdir("locked")
open("locked/inside", "w").close()
os.symlink("/dev/zero", "zero")
os.symlink("/", "root")
os.symlink("loop", "loop")
for i in range(300):
    open(f"f{{i}}", "w").close()
os.chmod("locked", 0)
os.chmod("fifo", 0)
print("LEFT", flush=True)
os._exit(0)
'''


def test_fifos_sockets_links_and_odd_names_left_in_scratch_are_removed_and_the_run_ends(tmp_path, record_property):
    record_property("protection", "parent:scratch-odd-files")
    handle = _generic(tmp_path, ODD_FILES.format(), disk_mb=64, max_entries=1000)
    handle.wait(timeout=30)
    assert handle.done, "the run never ended"
    assert any(e.text == "LEFT" for e in handle.log.entries()), [e.text for e in handle.log.entries()][-10:]
    assert handle.exit is not None and handle.exit.kind == "ok", handle.exit
    assert handle.scratch is not None and not os.path.lexists(handle.scratch.root), "the scratch folder outlived the run"


# -- `nkitui emu run`: what the confined child leaves ------------------------------------------------------------
EMU_KERNEL = '''
import os
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    root = os.path.dirname(os.getcwd())
{plant}
    getattr(os, "_ex" + "it")(0)  # gone before nkitui's child writes its result
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a) + nl.load(b))
    return out
'''

EMU_PLANTS = {
    "result.json as a FIFO": ('os.mkfifo(os.path.join(root, "result.json"))', "not a regular file"),
    "result.json linked to /dev/zero": ('os.symlink("/dev/zero", os.path.join(root, "result.json"))', "without a result"),
    "result.json nested too deep": ('open(os.path.join(root, "result.json"), "w").write("[" * 100000 + "]" * 100000)',
                                    "without a readable result"),
    "an output as a FIFO": ('os.mkfifo(os.path.join(root, "o.npy")); '
                            'open(os.path.join(root, "result.json"), "w").write(\'{"files": [["out", "o.npy"]], "summary": {}}\')',
                            "could not be read"),
    "an output linked outside": ('os.symlink("/etc/passwd", os.path.join(root, "o.npy")); '
                                 'open(os.path.join(root, "result.json"), "w").write(\'{"files": [["out", "o.npy"]], "summary": {}}\')',
                                 "could not be read"),
    # 300,000 empty outputs: a read each and a member each of OUT.npz (38 s, 73 MB), then "outputs written"
    "300,000 outputs listed": ('__import__("numpy").save(os.path.join(root, "z.npy"), __import__("numpy").zeros(0)); '
                               'open(os.path.join(root, "result.json"), "w").write(\'{"files": [\' + ", ".join('
                               '[\'["o%d", "z.npy"]\' % i for i in range(300000)]) + \'], "summary": {}}\')',
                               "the child listed 300,000 output files"),
}


@pytest.mark.parametrize("what", sorted(EMU_PLANTS))
def test_emu_run_reads_what_its_child_left_without_waiting_on_fifos_or_following_links(tmp_path, what, record_property):
    record_property("protection", "parent:emu-run-left-files")
    plant, words = EMU_PLANTS[what]
    folder = tmp_path / "emu"
    folder.mkdir()
    (folder / "kernels.py").write_text(EMU_KERNEL.format(plant="    " + plant))
    a = np.ones((128, 8), np.float32)
    np.savez(folder / "in.npz", a=a, b=a)
    try:
        proc = subprocess.run([sys.executable, "-m", "nkitui", "emu", "run", "kernels.py::add_kernel", "--inputs",
                               "in.npz", "--out", "out.npz", "--timeout", "30"], cwd=folder, capture_output=True,
                              text=True, timeout=45, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: `nkitui emu run` did not end (it waits on what its child left)")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (folder / "out.npz").exists()


# -- arrays, traces and instruction logs as data ---------------------------------------------------------------
def _npy(header: str, data: bytes = b"") -> bytes:
    text = header.encode()
    pad = 64 - (10 + len(text) + 1) % 64
    return b"\x93NUMPY\x01\x00" + (len(text) + pad + 1).to_bytes(2, "little") + text + b" " * pad + b"\n" + data


HOSTILE_NPY = {
    "two unknown sizes": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, -1)}", b"\0" * 16),
    "a negative size": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", b"\0" * 16),
    "zero elements past numpy's index range": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, "
                                                   + "2147483647, " * 20 + ")}"),
    "a boolean size": _npy("{'descr': '<f4', 'fortran_order': True, 'shape': (True,)}", b"\0" * 4),
    "100 dimensions": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (" + "1, " * 100 + ")}", b"\0" * 4),
    "a shape nested 3000 deep": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': " + "(" * 3000 + ")" * 3000 + "}"),
    "a dtype nested 3000 deep": _npy("{'descr': " + "[" * 3000 + "]" * 3000 + ", 'fortran_order': False, 'shape': (1,)}"),
    "a 4000-digit size": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (" + "9" * 4000 + ",)}"),
    "a 4 GB header claimed": b"\x93NUMPY\x02\x00" + (2**32 - 1).to_bytes(4, "little") + b"{",
}


@pytest.mark.parametrize("what", sorted(HOSTILE_NPY))
def test_a_hostile_npy_header_is_a_transfer_error_never_another_exception(tmp_path, what, record_property):
    """The evaluator's reader of a child's outputs (executor.arrays) and `emu run`'s (common.npzsafe)."""
    import io

    from nkitui.common.npzsafe import NpzError, read_npy
    from nkitui.executor.arrays import ArrayTransferError, load_array

    record_property("protection", "parent:npy-headers")
    data = HOSTILE_NPY[what]
    (tmp_path / "x.npy").write_bytes(data)
    meta = {"file": "x.npy", "dtype": "float32", "shape": [1], "sha256": hashlib.sha256(data).hexdigest()}
    started = time.monotonic()
    if what == "a boolean size":  # the evaluator's reader takes int(True) == 1: a plain (1,) array, as declared
        assert load_array(tmp_path, meta, max_elements=1 << 20, require_digest=True, anchor=tmp_path).shape == (1,)
    else:
        with pytest.raises(ArrayTransferError):
            load_array(tmp_path, meta, max_elements=1 << 20, require_digest=True, anchor=tmp_path)
    with pytest.raises(NpzError):
        read_npy(io.BytesIO(data), "x.npy", 1 << 22)
    assert time.monotonic() - started < 2


def _mutations(data: bytes, count: int, seed: int) -> list[bytes]:
    """Random corruptions of `data`: bytes flipped, 64-bit counts made absurd, cut short, spliced."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        b = bytearray(data)
        kind = rng.integers(4)
        if kind == 0:
            for pos in rng.integers(0, len(b), size=int(rng.integers(1, 8))):
                b[pos] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            pos = int(rng.integers(0, max(1, len(b) - 8)))
            absurd = (2**31 - 1, 2**32, 2**63 - 1, 2**64 - 1, 1 << 40)[int(rng.integers(5))]
            b[pos:pos + 8] = absurd.to_bytes(8, "little")
        elif kind == 2:
            b = b[:int(rng.integers(0, len(b)))]
        else:
            pos = int(rng.integers(0, len(b)))
            b = b[:pos] + b[pos:pos + int(rng.integers(1, 64))] * int(rng.integers(2, 50)) + b[pos:]
        out.append(bytes(b))
    return out


def _recorded_bytes() -> tuple[bytes, bytes]:
    """A real trace.bin and replay.bin of one launch (test_replay_log's matmul with PSUM accumulation), as
    the kernel's process makes them."""
    from nkitui import emulator
    from nkitui.emulator import replaylog, tracepack
    from tests.security.test_replay_log import matmul_kernel

    rng = np.random.default_rng(14)
    a_t, b = rng.standard_normal((256, 64)).astype(np.float32), rng.standard_normal((256, 32)).astype(np.float32)
    with emulator.trace() as trace, replaylog.recording([a_t, b]) as rec, emulator.options(target="trn2", precise=True):
        out = matmul_kernel(a_t, b)
    return tracepack.pack(trace), replaylog.pack(rec, {"out": rec.output_view(out)})


def test_mutated_traces_and_instruction_logs_fail_as_format_errors_only(record_property):
    """What the evaluator unpacks from a kernel's process (the trace's compact form, the replay log): a
    hostile writer's bytes end as the format's own error, quickly, never as another exception."""
    from nkitui.emulator import replay, tracepack

    record_property("protection", "parent:trace-and-replay-bytes")
    trace_bytes, replay_bytes = _recorded_bytes()
    for name, data, unpack, error in (("trace.bin", trace_bytes, tracepack.unpack, tracepack.TraceFormatError),
                                      ("replay.bin", replay_bytes, replay.unpack, replay.ReplayFormatError)):
        for i, bad in enumerate(_mutations(data, 150, seed=14)):
            started = time.monotonic()
            try:
                unpack(bad)
            except error:
                pass
            except Exception as exc:  # noqa: BLE001 - the finding
                pytest.fail(f"{name} mutation {i}: {type(exc).__name__}: {str(exc)[:200]}")
            assert time.monotonic() - started < 2, f"{name} mutation {i} took {time.monotonic() - started:.1f} s"


# -- the evaluator's goodbye ------------------------------------------------------------------------------------
DOES_NOT_LEAVE = '''
import json, sys, time
out = sys.stdout
out.write(json.dumps({"event": "data", "kind": "confinement", "data": {"active": [], "degraded": ["test"]}}) + "\\n")
out.flush()
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "exit":
        time.sleep(3600)  # as a finalizer of task code would, running when nkitui's server allocates
'''


def test_a_child_that_does_not_leave_when_asked_is_killed_after_a_grace_period(tmp_path, record_property):
    """The evaluator's close() read the child's stream until it ended: a child that never left kept the
    evaluator (its checks already computed) waiting for the run's timeout, which then lost the verdict."""
    import threading

    from nkitui.evaluate.pipeline import children
    from nkitui.evaluate.pipeline.children import UntrustedChild
    from nkitui.executor.context import WorkerContext

    grace = getattr(children, "CLOSE_GRACE_S", 5.0)

    record_property("protection", "parent:child-close")
    job = WorkerJob(entry="unused:unused", payload={}, workspace=None, role="untrusted",
                    limits=Limits(timeout_s=0, memory_mb=2048))
    handle = RunHandle(job, command=[sys.executable, "-c", DOES_NOT_LEAVE], requests=True).start()
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        ctx = WorkerContext(events_fd=sink, run_id="t", scratch=tmp_path, workspace=tmp_path)
        child = UntrustedChild("kernel", handle, ctx)
        child.ready()
        closer = threading.Thread(target=child.close, daemon=True)
        started = time.monotonic()
        closer.start()
        closer.join(timeout=grace + 20)
        assert not closer.is_alive(), "close() waits for a child that never leaves (it has no timeout of its own)"
        assert time.monotonic() - started < grace + 10
        assert any("did not leave" in note for note in child.notes), child.notes
    finally:
        handle.kill()
        handle.close()
        os.close(sink)


# -- the reference process is a child like the kernel's ------------------------------------------------------------
@pytest.mark.parametrize("attack, words", [
    (STOP_ITSELF, "it stopped itself (SIGSTOP"),
    (FLOOD.format(line=b'{"event":"log","stream":"stdout","text":"x"}\n', count=2_000_000), "more than 20,000 log events"),
    (DEEP_DATA.format(depth=100_000), "nested"),
], ids=["SIGSTOP", "log flood", "deep event"])
def test_the_reference_process_doing_the_same_is_stopped_the_same_way(tmp_path, attack, words, record_property):
    record_property("protection", "parent:reference-child")
    task = wrong_task(tmp_path)
    reference = task / "reference.py"
    source = reference.read_text().replace("    return a.astype", "    _attack()\n    return a.astype")
    reference.write_text(WRITER + textwrap.dedent(attack) + "\n\n" + source)
    result, _, elapsed = evaluate_within(task)
    # a reference that cannot answer makes the task invalid (the reference is the task's definition of right)
    assert result.status == "invalid" and result.exit_code != 0, (result.status, result.error)
    message = result.error.message
    assert "the reference process was stopped by nkitui" in message and words in message, message
    assert elapsed < 20, f"{elapsed:.1f} s"


def test_redacting_a_childs_words_costs_linear_time_whatever_they_repeat(record_property):
    """Every error event of a child is redacted in the evaluator's reading thread. The private-key pattern
    scanned from each BEGIN to the end of the text when no END followed: 80 KB of BEGIN lines cost ~4 s
    (45x an ordinary 80 KB), 1,000 such events an hour of the evaluator's CPU. Measured as a same-run ratio."""
    from nkitui.common.redact import redact_text

    record_property("protection", "parent:redaction-cost")
    hostile_text = "-----BEGIN PRIVATE KEY-----\n" * 3000
    ordinary = "AKIA" * (len(hostile_text) // 4)  # a hint on every position: the other patterns' worst case

    def cost(text: str) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            redact_text(text)
            best = min(best, time.perf_counter() - started)
        return best

    ratio = cost(hostile_text) / cost(ordinary)
    assert ratio < 10, f"BEGIN lines cost {ratio:.0f}x an ordinary text of the same size"
    block = "x -----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY----- y"
    assert redact_text(block) == "x [REDACTED:private-key] y"


# -- what the evaluator writes into a child's scratch folder ------------------------------------------------------
PLANT = '''
def _plant():
    import os
    root = os.path.dirname(os.getcwd())
    io = os.path.join(root, "io")
    n = max([int(x) for x in os.listdir(io) if x.isdigit()] or [0])
    for k in range(n + 1, n + 8):  # the request folders to come: their numbers are a count
        {plant}
'''

PLANTS = {
    "kernel: a link to a file outside as its next input": (
        "kernel", 'os.makedirs(os.path.join(io, str(k), "in"), exist_ok=True); '
                  'os.symlink(VICTIM, os.path.join(io, str(k), "in", "0-a.npy"))'),
    "kernel: a FIFO as its next input": (
        "kernel", 'os.makedirs(os.path.join(io, str(k), "in"), exist_ok=True); '
                  'os.mkfifo(os.path.join(io, str(k), "in", "0-a.npy"))'),
    "reference: a link to a folder outside as its next input set": (
        "reference", 'os.makedirs(os.path.join(io, str(k)), exist_ok=True); '
                     'os.symlink(os.path.dirname(VICTIM), os.path.join(io, str(k), "0"))'),
}


@pytest.mark.parametrize("what", sorted(PLANTS))
def test_links_and_fifos_planted_in_a_request_folder_to_come_are_never_written_through(tmp_path, canary, what,
                                                                                      record_property):
    """The request folders are numbered 1, 2, 3, ...: a kernel (or a reference) planted io/<next>/in/0-a.npy as
    a link to a file outside, and the evaluator, which is not confined, wrote the next input set through it
    (a user's file overwritten with an .npy; a reference's link made it write 2 MB into a folder outside), or
    as a FIFO, and the evaluator's open waited for a reader until the run's timeout."""
    record_property("protection", "parent:planted-request-folder")
    role, plant = PLANTS[what]
    victim = canary / "victim.txt"
    victim.write_text("precious\n")
    before = sorted(p.name for p in canary.iterdir())
    task = wrong_task(tmp_path)
    code = f"VICTIM = {str(victim)!r}\n" + PLANT.format(plant=plant)
    if role == "kernel":
        kernel = task / "vector_add_nki.py"
        kernel.write_text(kernel.read_text().replace("    return c\n", "    _plant()\n    return c\n") + "\n" + code)
        options = dict(seeds=3)
    else:
        reference = task / "reference.py"
        reference.write_text(code + "\n" + reference.read_text().replace("    return a.astype", "    _plant()\n    return a.astype"))
        options = dict(seeds=3, trials=True)  # the trials ask the reference again, in a later request
    result, _, elapsed = evaluate_within(task, **options)
    assert victim.read_text() == "precious\n", "the evaluator wrote through the planted link"
    assert sorted(p.name for p in canary.iterdir()) == before, "the evaluator wrote into a folder outside"
    assert result.status != "passed" and result.exit_code != 0
    if role == "kernel" and result.error is None:
        # Since each seed runs in a kernel process of its own (State across launches, fresh14), a kernel
        # process gets one request and ends: no request folder it planted is ever made by nkitui, so nothing
        # is written through the plant and there is nothing to report. The reference gets later requests.
        assert all(c.passed or c.id != "sandbox" for c in result.checks)
    else:
        assert "existed before nkitui made it" in result.error.message, result.error
        assert next(c for c in result.checks if c.id == "sandbox").passed is False
    assert elapsed < 25, f"{elapsed:.1f} s"


# -- the kernel process's own report of its timing (hardware) ------------------------------------------------------
LYING_TIMER = """\
import numpy as np
import nki
import nkitui.executor.timing as _timing

# nkitui's code in the kernel's process is the kernel's to rewrite (HACK-TAMPER fails the run, which goes on):
# a "measured" timing whose fields are not what nkitui's writer sends
_honest = _timing.TimingStats.to_dict
_timing.TimingStats.to_dict = lambda self, method: {
    **{k: v for k, v in _honest(self, method).items() if k != "recheck_failures"}, "recheck_failure_count": 3}


@nki.jit
def add_kernel(a, b):
    return a + b
"""


def test_a_timing_report_with_missing_fields_is_a_failed_recheck_not_an_evaluator_crash(tmp_path, record_property):
    """On hardware the kernel's process times itself; the evaluator read `timing['recheck_failures'][0]` from
    that report: a report without it raised KeyError in the evaluator (`internal-error`)."""
    from tests.helpers.evaluation import FAKE_SDK, fake_sdk_env, quick_request, write_task

    record_property("protection", "parent:timing-report")
    task = write_task(tmp_path / "liar", kernel=LYING_TIMER)
    handle = start_evaluation(quick_request(task, extra_env=fake_sdk_env(device="trn2", tools=()), backend="neuron",
                                            python_path=[str(FAKE_SDK)], static=True,
                                            timing={"warmup": 1, "min_repeats": 5, "max_repeats": 10, "max_time_s": 1.0,
                                                    "target_rel_ci": 0.5}))
    handle.wait(timeout=DEADLINE_S)
    if not handle.done:
        handle.close()
        pytest.fail("the run did not end")
    result = handle.result
    assert result.status == "failed", (result.status, result.error)
    recheck = next(c for c in result.checks if c.id == "timed-recheck")
    assert recheck.passed is False and "3 differed" in recheck.detail, recheck.detail

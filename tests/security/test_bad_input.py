"""Issue #14 item 5: bad input gets a clear error naming the file, field or value — never a traceback.
Manifest caps, `nkitui emu run` inputs, profiler JSON, review --auditor values, drafts."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from nkitui.task import TaskError, load_task
from tests.helpers.add_task import add_manifest

from .conftest import REPO, wrong_task

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def nkitui(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nkitui", *args], capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=timeout)


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]


# -- manifests -------------------------------------------------------------------------------------

def _manifest_problem(tmp_path: Path, tail: str = "", kernel_extra: str = "", b_init: str = "", b_dtype: str = "float32"):
    task = wrong_task(tmp_path / "t")
    (task / "task.toml").write_text(add_manifest(task_id="wrong", cuda=False, tail=tail, kernel_extra=kernel_extra,
                                                 b_init=b_init, b_dtype=b_dtype))
    with pytest.raises(TaskError) as err:
        load_task(task)
    return err.value.problems


@pytest.mark.parametrize("tail, field, words", [
    ("[evaluation]\nseeds = 100000000000", "evaluation.seeds", "at most 1000"),
    ("[evaluation]\nseeds = [" + ", ".join(["1"] * 1001) + "]", "evaluation.seeds", "at most 1000"),
    ("[evaluation]\nseeds = [18446744073709551616]", "evaluation.seeds", "below 2**63"),
    ("[evaluation]\ntimeout_s = 1e12", "evaluation.timeout_s", "more than a day"),
])
def test_evaluation_caps(tmp_path, tail, field, words, record_property):
    record_property("protection", "input:oversized-manifest")
    problems = _manifest_problem(tmp_path, tail=tail)
    assert any(p.field == field and words in p.message for p in problems), problems


@pytest.mark.parametrize("grid", ["[100000]", "[4096, 4096]", "[2, 2, 2, 2]"])
def test_grid_caps(tmp_path, grid):
    problems = _manifest_problem(tmp_path, kernel_extra=f"grid = {grid}")
    assert any(p.field == "kernel.grid" and "programs" in p.message for p in problems), problems


@pytest.mark.parametrize("dtype, init, words", [
    ("int8", '{ dist = "randint", low = 0, high = 1000 }', "int8 holds only -128..127"),
    ("uint8", '{ dist = "randint", low = -1, high = 10 }', "uint8 holds only 0..255"),
    ("float8_e4m3fn", '{ dist = "randint", low = 0, high = 1000 }', "largest finite float8_e4m3fn"),
    ("int32", '{ dist = "randint", low = 0.5, high = 10 }', "whole numbers"),
    ("int32", '{ dist = "randint", low = 0, high = 1e30 }', "beyond 64-bit"),
])
def test_randint_bounds_are_checked_against_the_dtype(tmp_path, dtype, init, words):
    problems = _manifest_problem(tmp_path, b_init=init, b_dtype=dtype)
    assert any(p.field == "inputs[1].init" and words in p.message for p in problems), problems


def test_randint_within_the_dtype_is_fine(tmp_path):
    task = wrong_task(tmp_path / "t")
    (task / "task.toml").write_text(add_manifest(task_id="wrong", cuda=False, b_dtype="int8",
                                                 b_init='{ dist = "randint", low = -128, high = 128 }'))
    load_task(task)


def test_an_oversized_manifest_is_refused_before_parsing(tmp_path, record_property):
    record_property("protection", "input:oversized-manifest")
    task = wrong_task(tmp_path / "t")
    with open(task / "task.toml", "a") as f:
        f.write("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(TaskError, match="a task.toml is a few kilobytes"):
        load_task(task)
    many = "\n".join(f'[[inputs]]\nname = "x{i}"\nshape = [1]\ndtype = "float32"' for i in range(300))
    (task / "task.toml").write_text(add_manifest(task_id="wrong", cuda=False) + many)
    with pytest.raises(TaskError, match="at most 256 are accepted"):
        load_task(task)
    proc = nkitui("check", str(task), cwd=tmp_path)
    assert proc.returncode == 2 and "at most 256" in proc.stdout + proc.stderr
    no_traceback(proc)


def test_check_caps_its_own_options(tmp_path):
    task = wrong_task(tmp_path / "t")
    for args, words in ((["--seeds", "99999999999"], "at most 1000 seeds"), (["--timeout", "1e9"], "at most 86400")):
        proc = nkitui("check", str(task), *args, cwd=tmp_path)
        assert proc.returncode == 2 and words in proc.stderr
        no_traceback(proc)


# -- emu run inputs --------------------------------------------------------------------------------

KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a) + nl.load(b))
    return out
'''


@pytest.fixture
def emu_dir(tmp_path):
    folder = tmp_path / "emu"
    folder.mkdir()
    (folder / "kernels.py").write_text(KERNEL)
    return folder


def _emu(folder: Path, inputs: str, *extra: str) -> subprocess.CompletedProcess:
    return nkitui("emu", "run", "kernels.py::add_kernel", "--inputs", inputs, "--out", "out.npz", *extra, cwd=folder)


def _npy_bytes(header: dict, data: bytes = b"") -> bytes:
    text = repr(header).encode()
    pad = 64 - (10 + len(text) + 1) % 64
    head = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + data


def _zip(path: Path, members: dict[str, bytes], method=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _bad_inputs(folder: Path) -> dict[str, tuple[str, str]]:
    """name -> (file, words the error must hold)."""
    a = np.ones((128, 8), np.float32)
    np.savez(folder / "objects.npz", a=np.array([{"x": 1}, None], dtype=object), b=a)
    with open(folder / "pickled.npz", "wb") as f:
        pickle.dump({"a": a}, f)
    (folder / "badzip.npz").write_bytes(b"PK\x03\x04" + os.urandom(200))
    big_header = _npy_bytes({"descr": "<f4", "fortran_order": False, "shape": (1,), "pad": "x" * 20000}, b"\0" * 4)
    _zip(folder / "header.npz", {"a.npy": big_header, "b.npy": big_header})
    forged = _npy_bytes({"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)}, b"\0" * 64)
    _zip(folder / "forged.npz", {"a.npy": forged, "b.npy": forged})
    _zip(folder / "notnpy.npz", {"a.txt": b"hello"})
    buf = io.BytesIO()
    np.save(buf, np.zeros(40 << 20, np.uint8))
    _zip(folder / "bomb.npz", {"a.npy": buf.getvalue(), "b.npy": buf.getvalue()}, zipfile.ZIP_BZIP2)
    return {
        "object arrays": ("objects.npz", "holds Python objects"),
        "pickle": ("pickled.npz", "is a Python pickle"),
        "bad zip": ("badzip.npz", "not a readable .npz archive"),
        "huge header": ("header.npz", "not a readable .npy array"),
        "forged header": ("forged.npz", "over the limit"),
        "not npy": ("notnpy.npz", "is not an .npy array"),
        "zip bomb": ("bomb.npz", "zip bomb"),
    }


def test_emu_run_refuses_hostile_inputs_with_clear_errors(emu_dir, record_property):
    record_property("protection", "input:emu-npz")
    for what, (name, words) in _bad_inputs(emu_dir).items():
        started = time.monotonic()
        proc = _emu(emu_dir, name)
        assert proc.returncode == 2, (what, proc.stderr)
        assert words in proc.stderr and name in proc.stderr, (what, proc.stderr)
        no_traceback(proc)
        assert time.monotonic() - started < 60, f"{what}: took too long (decompressed?)"
        assert not (emu_dir / "out.npz").exists()


def test_emu_run_checks_sizes_before_decompressing(emu_dir):
    np.savez_compressed(emu_dir / "big.npz", a=np.zeros((1024, 1024), np.float32), b=np.zeros((1024, 1024), np.float32))
    proc = _emu(emu_dir, "big.npz", "--max-input-mb", "4")
    assert proc.returncode == 2 and "unpacks to 8,388," in proc.stderr and "over the limit" in proc.stderr
    no_traceback(proc)


def test_emu_run_runs_confined_and_reports_it(emu_dir):
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    np.savez(emu_dir / "in.npz", a=a, b=a)
    proc = _emu(emu_dir, "in.npz", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["sandbox"].startswith(("sandbox: ", "degraded: "))
    np.testing.assert_array_equal(np.load(emu_dir / "out.npz")["out"], a + a)


def test_emu_run_kernel_cannot_write_outside_or_hang(emu_dir, canary):
    (emu_dir / "kernels.py").write_text(KERNEL.replace("    out = nl.ndarray", f"    open({str(canary / 'x')!r}, 'w')\n"
                                                       "    out = nl.ndarray"))
    a = np.ones((128, 8), np.float32)
    np.savez(emu_dir / "in.npz", a=a, b=a)
    proc = _emu(emu_dir, "in.npz")
    assert proc.returncode == 1 and "PermissionError" in proc.stderr
    assert sorted(p.name for p in canary.iterdir()) == ["secret.txt"]
    (emu_dir / "kernels.py").write_text(KERNEL.replace("    out = nl.ndarray", "    while True: pass\n    out = nl.ndarray"))
    proc = _emu(emu_dir, "in.npz", "--timeout", "3")
    assert proc.returncode == 1 and "3 s limit" in proc.stderr
    no_traceback(proc)


# -- profiler JSON ---------------------------------------------------------------------------------

PROFILES = {
    "deeply nested": ("[" * 100000 + "]" * 100000, "nested too deeply"),
    "nested 200 levels": ('{"total_time": 1, "x": ' + "[" * 200 + "]" * 200 + "}", "more than 64 levels"),
    "huge integer literal": ('{"total_time": 1, "tensor_engine_instruction_count": ' + "9" * 5000 + "}", "unreadable number"),
    "huge integer": ('{"total_time": 1, "tensor_engine_instruction_count": ' + "9" * 400 + "}", "beyond any counter"),
    "NaN time": ('{"total_time": NaN}', "NaN is not a JSON number"),
    "infinite duration": ('{"summary": {}, "instruction": [{"start_ts": 0, "duration_ns": 1e999, "engine": "tensor"}]}',
                          "impossible time"),
    "impossible percentage": ('{"total_time": 0.001, "tensor_engine_active_time_percent": 250}', "impossible share"),
    "negative time": ('{"total_time": 0.001, "vector_engine_active_time": -4}', "negative"),
    "active beyond total": ('{"total_time": 0.001, "vector_engine_active_time": 4}', "exceeds total_time"),
    "garbage count": ('{"summary": {}, "instruction": [{"start_ts": 0, "duration_ns": 5, "hbm_read_bytes": "lots"}]}',
                      "non-negative number"),
}


@pytest.mark.parametrize("what", sorted(PROFILES))
def test_profiler_json_errors_are_clear(tmp_path, what):
    from nkitui.perf.profiles import ProfileError, load_profile

    text, words = PROFILES[what]
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match=words) as err:
        load_profile(path)
    assert str(path) in str(err.value)


def test_profile_cli_has_no_traceback(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(PROFILES["deeply nested"][0])
    proc = nkitui("perf", "profile", str(path), cwd=tmp_path)
    assert proc.returncode != 0 and "nested too deeply" in proc.stderr + proc.stdout
    no_traceback(proc)
    os.mkfifo(tmp_path / "fifo.json")
    proc = nkitui("perf", "profile", str(tmp_path / "fifo.json"), cwd=tmp_path, timeout=30)
    assert proc.returncode != 0 and "not a regular file" in proc.stderr + proc.stdout


# -- review --auditor and drafts -------------------------------------------------------------------

@pytest.fixture
def review_task(tmp_path, monkeypatch):
    from tests.review.conftest import init_repo, write_task

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "home" / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    root = write_task(tmp_path / "add")
    init_repo(root)
    return root


@pytest.mark.parametrize("auditor, words", [
    ("", "the auditor name is empty"),
    ("   ", "the auditor name is empty"),
    ("runs", "is reserved"),
    ("Runs", "is reserved"),
    ("../x", "looks like a path"),
    ("a/b", "looks like a path"),
    ("..", "looks like a path"),
    ("~alice", "looks like a path"),
    ("ali\nce", "control characters"),
    ("!!!", "no letters or digits"),
])
def test_bad_auditor_values_are_refused(review_task, tmp_path, auditor, words):
    from nkitui.review import load_builtin_rubric
    from nkitui.review.errors import SubmitRefused
    from nkitui.review.submit import submit_review
    from tests.review.conftest import filled_draft

    with pytest.raises(SubmitRefused) as err:
        submit_review(review_task, filled_draft(load_builtin_rubric("nki-port-audit")), auditor=auditor)
    assert err.value.kind == "bad_auditor" and words in str(err.value.problems[0])
    assert not (review_task / "reviews").exists()


def test_bad_auditor_on_the_command_line(review_task, tmp_path):
    from nkitui.review import load_builtin_rubric
    from tests.review.conftest import filled_draft

    draft = tmp_path / "draft.toml"
    draft.write_text(filled_draft(load_builtin_rubric("nki-port-audit")).to_toml())
    for value, words in (("../x", "looks like a path"), ("", "empty"), ("runs", "reserved")):
        proc = nkitui("review", "submit", str(review_task), "--from", str(draft), "--auditor", value, cwd=tmp_path)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        no_traceback(proc)
    proc = nkitui("history", str(review_task), "--blind", "--auditor", "../x", cwd=tmp_path)
    assert proc.returncode == 2 and "looks like a path" in proc.stderr + proc.stdout
    no_traceback(proc)


def test_two_tasks_with_one_id_in_one_repository_never_share_a_draft(tmp_path):
    from nkitui.review import Draft, load_builtin_rubric
    from nkitui.review.draft import DraftStore
    from tests.review.conftest import init_repo, write_task

    repo = tmp_path / "repo"
    first, second = write_task(repo / "one"), write_task(repo / "two")
    init_repo(repo)
    store = DraftStore(tmp_path / "drafts")
    rubric = load_builtin_rubric("nki-port-audit")
    d1, d2 = Draft.new("add", rubric), Draft.new("add", rubric)
    d1.summary, d2.summary = "about the first", "about the second"
    store.save(first, d1)
    store.save(second, d2)
    assert store.path_for(first, "add") != store.path_for(second, "add")
    assert store.load(first, "add").summary == "about the first"
    assert store.load(second, "add").summary == "about the second"
    store.discard(first, "add")
    assert store.load(first, "add") is None and store.load(second, "add").summary == "about the second"


def test_a_draft_saved_by_an_older_nkitui_is_found_and_migrated(tmp_path):
    from nkitui.review import Draft, load_builtin_rubric
    from nkitui.review.draft import DraftStore
    from tests.review.conftest import write_task

    task = write_task(tmp_path / "task")
    store = DraftStore(tmp_path / "drafts")
    old = Draft.new("add", load_builtin_rubric("nki-port-audit"))
    old.summary = "written before the upgrade"
    legacy = store.legacy_path_for(task, "add")
    legacy.parent.mkdir(parents=True)
    legacy.write_text(old.to_toml())
    restored = store.load(task, "add")
    assert restored is not None and restored.summary == "written before the upgrade"
    store.save(task, restored)
    assert not legacy.exists() and store.load(task, "add").summary == "written before the upgrade"


def test_stale_draft_temp_files_are_cleaned(tmp_path):
    from nkitui.review import Draft, load_builtin_rubric
    from nkitui.review.draft import DraftStore
    from tests.review.conftest import write_task

    task = write_task(tmp_path / "task")
    store = DraftStore(tmp_path / "drafts")
    draft = Draft.new("add", load_builtin_rubric("nki-port-audit"))
    folder = store.path_for(task, "add").parent
    folder.mkdir(parents=True)
    stale = folder / ".add--abc.toml.k3j4h5.tmp"
    fresh = folder / ".add--abc.toml.zz9yy8.tmp"
    for p in (stale, fresh):
        p.write_text("half a draft")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    store.save(task, draft, now=dt.datetime.now(dt.timezone.utc))
    assert not stale.exists(), "a crash's leftover is removed"
    assert fresh.exists(), "a write in progress elsewhere is left alone"

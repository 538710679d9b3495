"""`nkitui emu run` in a real child process: outputs, summaries and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

KERNELS = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a) + nl.load(b))
    return out


def scale_into(x, y, factor):
    nl.store(y, value=nl.multiply(nl.load(x), factor))


def row_block(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0) * 64
    nl.store(out[r:r + 64, :], nl.exp(nl.load(a[r:r + 64, :])))
    return out


def broken(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a[0:256, :]))
    return out
'''


def emu(tmp_path, *args):
    r = subprocess.run([sys.executable, "-m", "nkitui", "emu", "run", *map(str, args)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return r


@pytest.fixture
def files(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    a = np.arange(128 * 32, dtype=np.float32).reshape(128, 32) / 100
    np.savez(tmp_path / "in.npz", a=a, b=np.ones_like(a))
    return tmp_path, a


def test_run_writes_outputs_and_summary(files):
    tmp, a = files
    r = emu(tmp, "kernels.py::add_kernel", "--inputs", "in.npz", "--out", "out.npz")
    assert r.returncode == 0, r.stderr
    assert "add_kernel on trn2: 4 instructions (dma 3, vector 1)" in r.stdout
    np.testing.assert_array_equal(np.load(tmp / "out.npz")["out"], a + 1)


def test_json_summary_grid_and_target(files):
    tmp, a = files
    np.savez(tmp / "one.npz", a=a)
    r = emu(tmp, "kernels.py::row_block", "--inputs", "one.npz", "--out", "o.npz", "--grid", "2",
            "--target", "trn1", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["grid"] == [2] and doc["target"] == "trn1" and doc["engines"] == {"dma": 4, "scalar": 2}
    np.testing.assert_allclose(np.load(tmp / "o.npz")["out"], np.exp(a), rtol=1e-6)


def test_output_argument_kernel_by_name_with_bf16_input(files):
    tmp, a = files
    y = np.zeros((128, 32), np.float32)
    np.savez(tmp / "named.npz", **{"x@bfloat16": a, "y@bfloat16": y, "factor": np.float32(2.0)})
    r = emu(tmp, "kernels.py::scale_into", "--inputs", "named.npz", "--out", "o.npz", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["outputs"]["y"] == {"shape": [128, 32], "dtype": "bfloat16", "saved_as": "float32"}
    expected = (a.astype(ml_dtypes.bfloat16).astype(np.float32) * 2).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.load(tmp / "o.npz")["y"], expected.astype(np.float32))


@pytest.mark.parametrize("args,message", [
    (["kernels.py:add_kernel"], "expected FILE.py::KERNEL"),
    (["missing.py::k"], "kernel file missing.py does not exist"),
    (["kernels.py::nope"], "no kernel named 'nope' in kernels.py; kernels and functions defined there:"),
    (["kernels.py::scale_into"], "inputs do not match the signature of scale_into(x, y, factor)"),
])
def test_invalid_commands_exit_2(files, args, message):
    tmp, _ = files
    r = emu(tmp, *args, "--inputs", "in.npz", "--out", "o.npz")
    assert r.returncode == 2
    assert message in r.stderr


def test_bad_grid_and_missing_inputs_exit_2(files):
    tmp, _ = files
    r = emu(tmp, "kernels.py::add_kernel", "--inputs", "nothere.npz", "--out", "o.npz")
    assert r.returncode == 2 and "inputs file nothere.npz does not exist" in r.stderr
    r = emu(tmp, "kernels.py::add_kernel", "--inputs", "in.npz", "--out", "o.npz", "--grid", "2,x")
    assert r.returncode == 2 and "--grid '2,x'" in r.stderr


def test_kernel_error_exits_1_with_rule_and_line(files):
    tmp, _ = files
    np.savez(tmp / "one.npz", a=np.zeros((256, 8), np.float32))
    r = emu(tmp, "kernels.py::broken", "--inputs", "one.npz", "--out", "o.npz", "--json")
    assert r.returncode == 1
    err = json.loads(r.stdout)["error"]
    assert err["rule"] == "partition-dim"
    line = KERNELS.splitlines().index("    nl.store(out, nl.load(a[0:256, :]))") + 1
    assert err["message"].endswith(f"at kernels.py:{line}")


WRITES_TWICE = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def writes_twice(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out, nl.load(a))
    return out
'''


@pytest.mark.parametrize("as_json", [False, True])
def test_emulator_warning_is_reported_once(tmp_path, as_json):
    """A diagnostic (here C15: affine_range iterations writing the same elements) is shown once, in the
    summary: the child's Python warning of the same message used to reach stderr as well, pointing
    into the emulator's own source."""
    (tmp_path / "twice.py").write_text(WRITES_TWICE)
    np.savez(tmp_path / "in.npz", a=np.ones((128, 8), np.float32))
    r = emu(tmp_path, "twice.py::writes_twice", "--inputs", "in.npz", "--out", "out.npz",
            *(["--json"] if as_json else []))
    assert r.returncode == 0, r.stderr
    both = r.stdout + r.stderr
    assert both.count("err_unexpected_output_dependencies") == 1, both
    assert "NKIEmulatorWarning" not in r.stderr
    if as_json:
        diags = json.loads(r.stdout)["diagnostics"]
        assert [d["rule"] for d in diags] == ["C15"]
    else:
        assert "warning: C15 err_unexpected_output_dependencies" in r.stdout

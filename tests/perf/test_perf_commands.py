"""`nkitui perf estimate FILE.py::KERNEL` (traced shape-only in a child), `perf compare` labels and warnings,
`nkitui emu run --trace`, and help text for every argument."""

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nkitui.cli import build_parser
from nkitui.cli import main as nkitui_main
from nkitui.perf import estimate, load_profile
from tests.perf.test_estimate import matmul_trace

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "benchmarks" / "costmodel_kernels"
DATA = Path(__file__).parent / "data"


def perf(*argv: str) -> int:
    return nkitui_main(["perf", *argv])


def nkitui(*argv: str, cwd=ROOT) -> subprocess.CompletedProcess:
    """A real `nkitui` process: kernels run in the confined child, which needs real file descriptors."""
    return subprocess.run([sys.executable, "-m", "nkitui", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_estimate_traces_a_kernel_file_shape_only_and_estimates_in_one_step():
    spec = f"{KERNELS / 'matmul_tutorial.py'}::matmul_tiled"
    out = nkitui("perf", "estimate", spec, "--shapes", "512x256,512x1024", "--dtypes", "bf16", "--target", "trn1",
                 "--json")
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["source"] == "estimated" and rec["target"] == "trn1" and rec["kernel"] == "matmul_tiled"
    assert rec["summary"]["matmul_instruction_count"] == 2 * 2 * 4  # M/128 x N/512 x K/128
    assert rec["summary"]["model_flops"] == 2 * 256 * 512 * 1024
    assert rec["uncertainty"]["low"] < 0 < rec["uncertainty"]["high"]
    # per-shape dtypes and the text rendering with the band
    out = nkitui("perf", "estimate", spec, "--shapes", "512x256,512x1024", "--dtypes", "bfloat16,bf16")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("matmul_tiled on trn2:")
    assert "on calibrated kernel families; outside them the error is unknown" in text


def test_estimate_of_a_kernel_saves_the_record_for_compare(tmp_path):
    spec = f"{KERNELS / 'mamba.py'}::mamba_v2"
    out = tmp_path / "v2.json"
    shapes = "1x128x512,1x128x512,128x4,1x4x512,1x4x512"
    done = nkitui("perf", "estimate", spec, "--shapes", shapes, "--dtypes", "fp32", "--target", "trn1", "--save",
                  str(out))
    assert done.returncode == 0, done.stderr
    saved = json.loads(out.read_text())
    assert saved["kernel"] == "mamba_v2" and saved["summary"]["vector_engine_instruction_count"] > 0


@pytest.mark.parametrize("args,message", [
    ((), "give the array arguments' shapes with --shapes"),
    (("--shapes", "512x256,512x1024", "--dtypes", "bf16,bf16,bf16"), "one dtype for all shapes or one per shape"),
    (("--shapes", "512x256,512x1024", "--dtypes", "bf17"), "--dtypes 'bf17': unknown dtype 'bf17'"),
    (("--shapes", "512xq"), "--shapes '512xq': write shapes as DIMxDIM"),
    (("--shapes", "512x256,512x1024", "--arg", "oops"), "--arg 'oops': write NAME=VALUE"),
    (("--shapes", "512x256,512x1024", "--grid", "0"), "--grid '0': grid sizes must be positive"),
])
def test_bad_estimate_arguments_exit_2_naming_the_argument(args, message, capsys):
    assert perf("estimate", f"{KERNELS / 'matmul_tutorial.py'}::matmul_tiled", *args) == 2
    assert message in capsys.readouterr().err


def test_bad_kernel_specs_and_failing_kernels(tmp_path, capsys):
    assert perf("estimate", str(tmp_path / "none.py") + "::k", "--shapes", "8x8") == 2
    assert "does not exist" in capsys.readouterr().err
    done = nkitui("perf", "estimate", f"{KERNELS / 'matmul_tutorial.py'}::nope", "--shapes", "8x8")
    assert done.returncode == 2 and "no kernel named 'nope'" in done.stderr
    bad = tmp_path / "k" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\n"
                   "def k(a):\n    raise RuntimeError('boom')\n")
    done = nkitui("perf", "estimate", f"{bad}::k", "--shapes", "128x64", "--dtypes", "fp32")
    assert done.returncode == 1, done.stderr
    assert "tracing" in done.stderr and "RuntimeError: boom at bad.py:7" in done.stderr
    # a trace given task arguments is a usage error
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(matmul_trace().to_json()))
    assert perf("estimate", str(trace), "--shapes", "8x8") == 2
    assert "go with FILE.py::KERNEL" in capsys.readouterr().err


def _run_result(path: Path, run: str, task: str, rec) -> Path:
    path.write_text(json.dumps({"run_id": run, "task_id": task, "target": rec.target, "utilisation": rec.to_json()}))
    return path


def test_compare_labels_each_side_as_recorded_and_warns_on_other_tasks_and_targets(tmp_path, capsys):
    est = estimate(matmul_trace("trn1"))
    meas = load_profile(DATA / "explorer_view.json", target="trn2")
    a = _run_result(tmp_path / "a.json", "r-1", "task-matmul", est)
    b = _run_result(tmp_path / "b.json", "r-2", "task-softmax", meas)
    assert perf("compare", str(a), str(b), "--json") == 0
    c = json.loads(capsys.readouterr().out)
    assert (c["a_source"], c["b_source"]) == ("estimated", "measured")
    assert "of task task-matmul (estimated, trn1)" in c["a"] and "of task task-softmax (measured, trn2)" in c["b"]
    warnings = " | ".join(c["warnings"])
    assert "A is estimated and B is measured" in warnings
    assert "different tasks (task-matmul vs task-softmax)" in warnings
    assert "different targets (trn1 vs trn2)" in warnings
    assert c["a_uncertainty"].startswith("estimated ") and c["b_uncertainty"] is None
    assert perf("compare", str(a), str(b)) == 0
    text = capsys.readouterr().out
    assert "A is an estimate: estimated" in text and "warning: the runs are of different tasks" in text
    same = _run_result(tmp_path / "c.json", "r-3", "task-matmul", est)
    assert perf("compare", str(a), str(same), "--json") == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []
    broken = tmp_path / "d.json"
    broken.write_text(json.dumps({"run_id": "r-4", "task_id": "t", "utilisation": None}))
    assert perf("compare", str(a), str(broken)) == 2
    assert "run r-4 has no engine utilisation record" in capsys.readouterr().err


def test_every_perf_argument_has_help_text():
    parser = build_parser()
    perf_parser = parser._subparsers._group_actions[0].choices["perf"]  # noqa: SLF001
    actions = perf_parser._subparsers._group_actions[0].choices  # noqa: SLF001
    assert set(actions) == {"estimate", "profile", "compare", "sol"}
    for name, sub in actions.items():
        for action in sub._actions:  # noqa: SLF001
            if isinstance(action, argparse._HelpAction):  # noqa: SLF001
                continue
            assert action.help, f"nkitui perf {name} {action.option_strings or action.dest} has no help text"


def test_emu_run_saves_a_trace_that_perf_estimate_reads(tmp_path, capsys):
    kdir = tmp_path / "kernel"
    kdir.mkdir()
    (kdir / "mm.py").write_text((KERNELS / "matmul_tutorial.py").read_text())
    rng = np.random.default_rng(0)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, lhsT=rng.standard_normal((256, 128)).astype(np.float32),
             rhs=rng.standard_normal((256, 512)).astype(np.float32))
    spec = f"{kdir / 'mm.py'}::matmul_tiled"
    for name in ("trace.json", "trace.json.gz"):
        trace = tmp_path / name
        done = nkitui("emu", "run", spec, "--inputs", str(inputs), "--out", str(tmp_path / "out.npz"), "--target",
                      "trn1", "--trace", str(trace))
        assert done.returncode == 0, done.stderr
        assert f"trace written to {trace}" in done.stdout
        raw = gzip.open(trace, "rt").read() if name.endswith(".gz") else trace.read_text()
        assert json.loads(raw)["target"] == "trn1"
        assert perf("estimate", str(trace), "--json") == 0
        rec = json.loads(capsys.readouterr().out)
        assert rec["target"] == "trn1" and rec["summary"]["matmul_instruction_count"] == 2


def test_nkitui_perf_runs_as_a_child_process(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(matmul_trace().to_json()))
    out = subprocess.run([sys.executable, "-m", "nkitui", "perf", "estimate", str(trace)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "estimated" in out.stdout and "outside them the error is unknown" in out.stdout

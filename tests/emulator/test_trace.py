"""The instruction trace (contract with perf/), shape-only mode, and the C15 diagnostics."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.emulator import Trace
from tests.emulator.tutorial_kernels import matmul_tiled as tiled_matmul

F32 = np.float32


@nki.jit
def load_exp_store(a):
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[128:256, :])
    e = nl.exp(t)
    nl.store(out, value=e)
    return out


def _line(fn, text: str) -> int:
    import inspect

    src, start = inspect.getsourcelines(fn.func)
    return start + next(i for i, s in enumerate(src) if text in s)


def test_instructions_carry_engine_shapes_dtypes_bytes_and_source_line():
    a = np.ones((256, 64), F32)
    with emulator.trace() as tr:
        load_exp_store(a)
    load, act, store = tr.instructions
    assert (load.engine, load.opcode, act.engine, act.opcode, store.engine) == ("dma", "dma_copy", "scalar",
                                                                               "activation", "dma")
    assert (load.partitions, load.free, load.in_dtypes, load.out_dtype) == (128, 64, ("float32",), "float32")
    assert load.in_mems == ("hbm",) and load.out_mem == "sbuf" and store.out_mem == "hbm"
    assert load.bytes_read == load.bytes_written == load.hbm_read == 128 * 64 * 4
    assert store.hbm_write == 128 * 64 * 4 and load.hbm_write == 0
    assert act.meta["op"] == "exp" and act.meta["api"] == "nl.exp"
    assert load.file == "test_trace.py" and load.line == _line(load_exp_store, "nl.load(a[128:256")
    assert store.line == _line(load_exp_store, "nl.store(out")
    # rows 128..255 of the (256, 64) fp32 input: HBM boxes are rows x bytes within a row
    r = load.reads[0]
    assert (r.memory, r.p0, r.p1, r.b0, r.b1) == ("hbm", 128, 256, 0, 64 * 4)
    assert act.reads[0] == load.writes[0]  # the dependency the cost model sees
    assert [i.seq for i in tr] == [0, 1, 2]


def test_trace_meta_and_json_round_trip():
    with emulator.trace(target="trn1") as tr:
        load_exp_store(np.ones((256, 64), F32))
        load_exp_store(np.ones((256, 64), F32))
    assert tr.target == "trn1"
    assert tr.meta["options"]["target"] == "trn1"
    assert [l["first_seq"] for l in tr.meta["launches"]] == [0, 3]
    assert tr.meta["launches"][0]["engine_counts"] == {"dma": 2, "scalar": 1}
    assert tr.meta["files"]["test_trace.py"].endswith("tests/emulator/test_trace.py")
    again = Trace.from_json(tr.to_json())
    assert [i.opcode for i in again] == [i.opcode for i in tr]
    assert again.instructions[1].reads == tr.instructions[1].reads
    assert set(tr.storages) >= {a.storage for i in tr for a in i.reads + i.writes}


def test_storage_ranges_give_each_storage_its_first_and_last_use_and_extent():
    # the cost model's SBUF allocator sizes and frees tiles by these; computed once, again after changes
    with emulator.trace(target="trn1") as tr:
        load_exp_store(np.ones((256, 64), F32))
    load, act, store = tr.instructions
    tile = load.writes[0].storage
    ranges = tr.storage_ranges()
    assert ranges[tile] == ("sbuf", 0, 1, 128, 64 * 4)
    hbm_in = load.reads[0]
    assert ranges[hbm_in.storage][:3] == ("hbm", 0, 0) and ranges[hbm_in.storage].rows == 256
    assert Trace.from_json(tr.to_json()).storage_ranges() == ranges
    # instructions added later are seen (the ranges are computed again)
    tr.append(act)
    assert tr.storage_ranges()[tile].last == 3
    tr.instructions = [load]
    assert tr.storage_ranges()[tile].last == 0


def test_no_trace_is_recorded_outside_the_context():
    load_exp_store(np.ones((256, 64), F32))
    assert load_exp_store.last_run.instructions == 3
    assert load_exp_store.last_run.trace is None


def test_shape_only_mode_matches_executed_trace_without_data():
    a = np.ones((512, 256), ml_dtypes.bfloat16)
    b = np.ones((512, 1024), ml_dtypes.bfloat16)
    with emulator.trace() as full:
        tiled_matmul(a, b)
    shapes_a = emulator.ShapeDtype((512, 256), nl.bfloat16)
    shapes_b = emulator.ShapeDtype((512, 1024), "bfloat16")
    with emulator.trace(execute=False) as dry:
        out = tiled_matmul(shapes_a, shapes_b)
    assert out == emulator.ShapeDtype((256, 1024), nl.bfloat16)
    assert [(i.engine, i.opcode, i.partitions, i.free, i.flops) for i in dry] == \
        [(i.engine, i.opcode, i.partitions, i.free, i.flops) for i in full]
    assert dry.meta["launches"][0]["execute"] is False
    assert sum(i.flops for i in dry) == 2 * 512 * 256 * 1024


def test_shape_only_placeholders_need_shape_only_mode():
    with pytest.raises(emulator.KernelArgumentError, match="shape-only placeholders"):
        tiled_matmul(emulator.ShapeDtype((128, 128), "bfloat16"), emulator.ShapeDtype((128, 512), "bfloat16"))


def test_affine_range_loop_carried_write_is_diagnosed():
    @nki.jit
    def k(x):
        out = nl.ndarray((16, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((16, 16), dtype=nl.float32)
        for i in nl.affine_range(4):
            acc[...] = nl.add(acc, nl.load(x[i]))
        nl.store(out, acc)
        return out

    x = np.ones((4, 16, 16), F32)
    with emulator.trace() as tr, pytest.warns(emulator.NKIEmulatorWarning, match="C15") as caught:
        out = k(x)
    # the warning points at the kernel's line, not into the emulator's source
    assert [w.filename for w in caught if "C15" in str(w.message)] == [__file__]
    np.testing.assert_array_equal(out, 4 * np.ones((16, 16)))  # iterations ran in order
    (diag,) = tr.meta["diagnostics"]
    assert diag["rule"] == "C15" and diag["file"] == "test_trace.py"
    assert "iterations 0 and 1" in diag["message"] and "sequential_range" in diag["message"]


@pytest.mark.parametrize("style", ["sequential", "accumulate", "disjoint", "disabled"])
def test_legitimate_loops_are_not_diagnosed(style, recwarn):
    @nki.jit
    def k(x):
        out = nl.ndarray((4, 16, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((16, 16), dtype=nl.float32)
        if style == "sequential":
            for i in nl.sequential_range(4):
                acc[...] = nl.add(acc, nl.load(x[i]))
        elif style in ("accumulate", "disabled"):
            for i in nl.affine_range(4):
                if style == "accumulate":
                    acc += nl.load(x[i])
                else:
                    acc[...] = nl.add(acc, nl.load(x[i]))
        for i in nl.affine_range(4):
            nl.store(out[i], nl.load(x[i]))  # distinct locations
        return out

    with emulator.trace(check_affine=style != "disabled") as tr:
        k(np.ones((4, 16, 16), F32))
    assert "diagnostics" not in tr.meta
    assert not [w for w in recwarn if issubclass(w.category, emulator.NKIEmulatorWarning)]


def test_matmul_instruction_meta_for_the_cost_model():
    a = np.ones((256, 128), ml_dtypes.bfloat16)
    b = np.ones((256, 512), ml_dtypes.bfloat16)
    with emulator.trace() as tr:
        tiled_matmul(a, b)
    mm = [i for i in tr if i.opcode == "nc_matmul"]
    assert [(i.meta["K"], i.meta["M"], i.meta["N"]) for i in mm] == [(128, 128, 512)] * 2
    assert all(i.meta["accumulate"] and i.in_dtypes == ("bfloat16", "bfloat16") for i in mm)
    assert mm[0].writes == mm[1].writes and mm[0].writes[0].memory == "psum"
    peak = tr.meta["launches"][0]["psum_peak_bytes_per_partition"]
    assert peak == 2048


@nki.jit
def _mm_returned(a_t, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nisa.nc_matmul(nl.load(a_t), nl.load(b))  # a PSUM tile of its own
    nl.store(out, value=nisa.tensor_copy(ps))
    return out


@nki.jit
def _mm_accumulated(a_t, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    ps += nisa.nc_matmul(nl.load(a_t), nl.load(b))  # fused: writes `ps`, no bank of its own
    nl.store(out, value=nisa.tensor_copy(ps))
    return out


@pytest.mark.parametrize("kernel", [_mm_returned, _mm_accumulated])
def test_psum_peak_counts_a_returned_matmul_tile_once(kernel):
    a = np.ones((128, 128), F32)
    b = np.ones((128, 512), F32)
    kernel(a, b)
    assert kernel.last_run.psum_peak_bytes == 2048  # one [128, 512] fp32 bank per partition


def test_tracing_reads_f_code_once_per_kernel_frame_not_per_instruction(tmp_path):
    """Reading a frame's f_code raises an audit event, and in an untrusted child every audit event
    runs the introspection guard: the emulator finds the kernel's line through the modules' names,
    and reads a kernel frame's file once, not once per instruction and emulator frame."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "count.py"
    script.write_text(
        "import sys\n"
        "import numpy as np\n"
        "from nkitui.emulator import install\n"
        "install()\n"
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "from nkitui import emulator\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    for i in nl.affine_range(4):\n"
        "        t = nl.load(a[i * 128:(i + 1) * 128, :])\n"
        "        nl.store(out, value=nl.exp(nl.add(t, t)))\n"
        "    return out\n"
        "a = np.ones((512, 64), np.float32)\n"
        "k(a)\n"
        "reads = [0]\n"
        "def hook(event, args):\n"
        "    if event == 'object.__getattr__' and len(args) > 1 and args[1] == 'f_code':\n"
        "        reads[0] += 1\n"
        "sys.addaudithook(hook)\n"
        "with emulator.trace() as tr:\n"
        "    k(a)\n"
        "print(reads[0], len(tr.instructions))\n",
        encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
    reads, instructions = map(int, done.stdout.split())
    assert instructions >= 12
    assert reads <= instructions // 2  # was about 7 per instruction (one per emulator frame walked)

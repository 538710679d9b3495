import json

import numpy as np
import pytest

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.fpformat import round_to
from nkitui.evaluate.numerics.goldens import GoldenFormatError, GoldenReport, compare_goldens, load_goldens

from .helpers import BF16, matmul_reference, out_spec, tiled_matmul_kernel
from nkitui.task.model import TensorSpec

M, K, N = 128, 512, 128
INPUT_SPECS = [TensorSpec("a", (M, K), "float32"), TensorSpec("b", (K, N), "float32")]
OUT = [out_spec("c", (M, N), "float32", atol=1e-4, rtol=1e-4, k=K)]


def _inputs(dtype=np.float32):
    rng = np.random.default_rng(7)
    return {"a": rng.normal(size=(M, K)).astype(dtype), "b": rng.normal(size=(K, N)).astype(dtype)}


def _save(tmp_path, inputs, outputs, name="goldens.npz"):
    path = tmp_path / name
    np.savez(path, **{f"in.{k}": v for k, v in inputs.items()}, **{f"out.{k}": v for k, v in outputs.items()})
    return path


def _gpu(inputs, operand_dtype=None, scale=1.0):
    a, b = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
    if operand_dtype:
        a, b = round_to(a, operand_dtype), round_to(b, operand_dtype)
    return {"c": (scale * (a @ b)).astype(np.float32)}


def _compare(tmp_path, gpu_out, runner=None, reference=None):
    inputs = _inputs()
    goldens = load_goldens(_save(tmp_path, inputs, gpu_out), INPUT_SPECS, OUT)
    return compare_goldens(runner or tiled_matmul_kernel(), reference or matmul_reference(), goldens, OUT, "matmul")


def test_agreement_raises_nothing(tmp_path):
    report = _compare(tmp_path, _gpu(_inputs()))
    assert [o.verdict for o in report.outputs] == ["agree"] and report.findings == ()


def test_a_tf32_gpu_result_is_explained(tmp_path):
    report = _compare(tmp_path, _gpu(_inputs(), operand_dtype="tfloat32"))
    [o] = report.outputs
    assert o.verdict == "gpu-diverges"
    assert "tfloat32" in o.explanation and "TF32 tensor cores" in o.explanation
    [f] = report.findings
    assert f.rule == rules.GOLDEN_DIVERGES and f.severity == "medium"


def test_a_wrong_port_is_blamed_when_the_gpu_matches(tmp_path):
    def wrong(inputs, options):
        out = tiled_matmul_kernel()(inputs, options)
        out["c"] = out["c"].copy()
        out["c"][:, -1] = 0.0
        return out

    report = _compare(tmp_path, _gpu(_inputs()), runner=wrong)
    [o] = report.outputs
    assert o.verdict == "port-diverges" and "The port is wrong where the CUDA kernel is right" in o.explanation
    assert report.findings[0].severity == "high"


def test_a_reference_that_models_something_else(tmp_path):
    def scaled_reference(inputs):
        return {"c": 1.01 * matmul_reference()(inputs)["c"]}

    report = _compare(tmp_path, _gpu(_inputs()), reference=scaled_reference)
    assert report.outputs[0].verdict == "reference-diverges"
    assert "fix the reference or the tolerance" in report.outputs[0].explanation


def test_nothing_agrees(tmp_path):
    def wrong(inputs, options):
        return {"c": np.zeros((M, N), dtype=np.float32)}

    report = _compare(tmp_path, _gpu(_inputs(), scale=2.0), runner=wrong)
    assert report.outputs[0].verdict == "all-differ"
    assert "goldens were probably recorded from other inputs" not in report.outputs[0].explanation
    back = GoldenReport.from_dict(json.loads(json.dumps(report.to_dict(), allow_nan=False)))
    assert back.to_dict() == report.to_dict()


def test_bf16_goldens_saved_by_numpy_load_back_as_bf16(tmp_path):
    inputs = _inputs(BF16)
    specs = [TensorSpec("a", (M, K), "bfloat16"), TensorSpec("b", (K, N), "bfloat16")]
    path = _save(tmp_path, inputs, {"c": matmul_reference(dtype=np.float32)(inputs)["c"]})
    g = load_goldens(path, specs, OUT)
    assert g.inputs["a"].dtype == np.dtype(BF16) and np.array_equal(g.inputs["a"], inputs["a"])


def test_goldens_that_do_not_match_the_task_are_refused_with_every_problem(tmp_path):
    inputs = _inputs()
    inputs["b"] = inputs["b"][:, :64]
    path = _save(tmp_path, {"a": inputs["a"] + 1e-9, "b": inputs["b"]}, {})
    specs = [TensorSpec("a", (M, K), "bfloat16"), TensorSpec("b", (K, N), "float32")]
    with pytest.raises(GoldenFormatError) as err:
        load_goldens(path, specs, OUT)
    text = str(err.value)
    assert "in.a holds values that are not bfloat16 values" in text
    assert "in.b has shape [512, 64], the task declares [512, 128]" in text
    assert "array 'out.c' missing" in text and str(path) in text
    bad = tmp_path / "not.npz"
    bad.write_text("hello")
    with pytest.raises(GoldenFormatError, match="not a numpy .npz archive") as err:
        load_goldens(bad, specs, OUT)
    assert "pickle" not in str(err.value)  # numpy's own message talks of pickled data for any non-zip file


def test_unreadable_goldens_are_named_as_the_caller_shows_them(tmp_path):
    specs = [TensorSpec("a", (M, K), "bfloat16"), TensorSpec("b", (K, N), "float32")]
    corrupt = tmp_path / "scratch" / "goldens.npz"
    corrupt.parent.mkdir()
    corrupt.write_bytes(b"PK\x03\x04" + b"garbage" * 10)
    with pytest.raises(GoldenFormatError) as err:
        load_goldens(corrupt, specs, OUT, shown_as="goldens.npz")
    assert str(err.value).startswith("goldens.npz: cannot read the goldens file") and str(tmp_path) not in str(err.value)
    objects = tmp_path / "objects.npz"
    np.savez(objects, **{"in.a": np.array([object()], dtype=object)})
    with pytest.raises(GoldenFormatError, match="holds object \\(pickled\\) arrays"):
        load_goldens(objects, specs, OUT)

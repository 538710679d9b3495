"""Every documented legacy launch form runs the kernel on the emulator."""

from __future__ import annotations

import json

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
from nkitui import emulator

F32 = np.float32
A = np.arange(128 * 64, dtype=F32).reshape(128, 64)
B = np.ones((128, 64), dtype=F32)


def add_body(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def add_into(a, b, c):
    nl.store(c, nl.load(a) + nl.load(b))


@pytest.mark.parametrize("make", [
    lambda f: nki.jit(f),
    lambda f: nki.jit(mode="simulation")(f),
    lambda f: nki.jit(f, mode="baremetal", platform_target="trn2"),
    lambda f: nki.baremetal(f),
    lambda f: nki.baremetal()(f),
    lambda f: nki.baremetal(f, save_neff_name="k.neff", additional_compile_opt="--O3"),
    lambda f: nki.trace(f),
    lambda f: nki.baremetal(nki.jit(f)),
], ids=["jit", "jit-mode", "jit-options", "baremetal", "baremetal()", "baremetal-options", "trace", "nested"])
def test_decorator_forms(make):
    kernel = make(add_body)
    np.testing.assert_array_equal(kernel(A, B), A + B)


def test_options_are_recorded_not_rejected():
    kernel = nki.baremetal(add_body, save_neff_name="k.neff", additional_compile_opt="--O3")
    with emulator.trace() as tr:
        kernel(A, B)
    launch = tr.meta["launches"][0]
    assert launch["compiler_options"] == {"save_neff_name": "k.neff", "additional_compile_opt": "--O3"}
    assert launch["launcher"] == "baremetal"


def test_simulate_kernel_forms():
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(add_body), A, B), A + B)
    np.testing.assert_array_equal(nki.simulate_kernel(add_body, A, B), A + B)

    def spmd(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        r = nl.program_id(0) * 64
        nl.store(out[r:r + 64, :], nl.load(a[r:r + 64, :]) + nl.load(b[r:r + 64, :]))
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(nki.baremetal(spmd)[2], A, B), A + B)


def test_output_argument_kernel_writes_callers_array():
    c = np.zeros_like(A)
    assert nki.jit(add_into)(A, B, c) is None
    np.testing.assert_array_equal(c, A + B)
    c2 = np.zeros_like(A)
    nki.simulate_kernel(nki.baremetal(add_into), A, B, c2)
    np.testing.assert_array_equal(c2, A + B)


def test_output_argument_in_low_precision_with_precise_false():
    import ml_dtypes

    a = A.astype(ml_dtypes.bfloat16)
    c = np.zeros_like(a)
    with emulator.options(precise=False):
        nki.jit(add_into)(a, a, c)
    np.testing.assert_array_equal(c, (a.astype(F32) * 2).astype(ml_dtypes.bfloat16))


def test_grid_launch_with_two_dims_and_sub_kernel():
    @nki.jit(mode="trace")
    def helper(t):
        return nl.multiply(t, 2.0)

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        view = a[i * 64:(i + 1) * 64, j * 32:(j + 1) * 32]
        nl.store(out[i * 64:(i + 1) * 64, j * 32:(j + 1) * 32], helper(nl.load(view)))
        return out

    np.testing.assert_array_equal(k[2, 2](A), 2 * A)


def test_benchmark_reports_labelled_latency():
    bench = nki.benchmark(warmup=5, iters=10)(add_body)
    np.testing.assert_array_equal(bench(A, B), A + B)
    lat = bench.benchmark_result.nc_latency
    assert lat.get_latency_percentile(50) > 0
    assert lat.get_latency_percentile(99) == lat.get_latency_percentile(1)
    assert bench.benchmark_result.source == "emulator wall time (not device time)"
    assert (bench.benchmark_result.warmup, bench.benchmark_result.iters) == (5, 10)


def fixed_latency(trace):
    """A latency estimator named through NKITUI_LATENCY_ESTIMATOR in the tests below."""
    return 7e-6 * len(trace)


def test_benchmark_uses_the_estimator_named_in_the_environment(monkeypatch):
    monkeypatch.setenv("NKITUI_LATENCY_ESTIMATOR", f"{__name__}:fixed_latency")
    bench = nki.benchmark(add_body)
    bench(A, B)
    assert bench.benchmark_result.source == "cost-model estimate"
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) == pytest.approx(7.0 * 4)


def test_a_registered_estimator_takes_precedence_over_the_environment(monkeypatch):
    monkeypatch.setenv("NKITUI_LATENCY_ESTIMATOR", f"{__name__}:fixed_latency")
    emulator.set_latency_estimator(lambda trace: 1e-6)
    try:
        bench = nki.benchmark(add_body)
        bench(A, B)
    finally:
        emulator.set_latency_estimator(None)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) == pytest.approx(1.0)


@pytest.mark.parametrize("spec, fragment", [
    ("no_such_module_for_nkitui", "cannot be loaded"),
    (f"{__name__}:no_such_function", "cannot be loaded"),
    ("nkitui.emulator:__name__", "not a function"),
])
def test_an_unusable_estimator_in_the_environment_is_a_clear_error(monkeypatch, spec, fragment):
    monkeypatch.setenv("NKITUI_LATENCY_ESTIMATOR", spec)
    with pytest.raises(emulator.NKIEmulatorError, match="NKITUI_LATENCY_ESTIMATOR") as info:
        nki.benchmark(add_body)(A, B)
    assert fragment in str(info.value)


def test_benchmark_uses_registered_cost_model():
    seen = []

    def estimate(trace):
        seen.append(len(trace))
        return 123e-6

    emulator.set_latency_estimator(estimate)
    try:
        bench = nki.benchmark(add_body, save_neff_name="file.neff")
        bench(A, B)
    finally:
        emulator.set_latency_estimator(None)
    assert seen == [4]
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) == pytest.approx(123.0)
    assert bench.benchmark_result.source == "cost-model estimate"


def test_profile_writes_trace_json(tmp_path):
    prof = nki.profile(working_directory=str(tmp_path), save_neff_name="file.neff", save_trace_name="profile.ntff",
                       profile_nth=2)(add_body)
    np.testing.assert_array_equal(prof(A, B), A + B)
    doc = json.loads((tmp_path / "profile.emulator-trace.json").read_text())
    assert doc["summary"]["kernel"] == "add_body"
    assert len(emulator.Trace.from_json(doc["trace"])) == 4
    assert prof.profile_result is not None
    with pytest.raises(FileExistsError):
        prof(A, B)


def test_compiler_decorators_stack_with_jit():
    @ncc.enable_stack_allocator
    @ncc.skip_middle_end_transformations
    @nki.jit
    def k1(a, b):
        return add_body(a, b)

    @ncc.skip_middle_end_transformations
    @nki.baremetal
    def k2(a, b):
        return add_body(a, b)

    @nki.jit
    @ncc.enable_stack_allocator(log_level=1)
    def k3(a, b):
        return add_body(a, b)

    for k in (k1, k2, k3):
        np.testing.assert_array_equal(k(A, B), A + B)
    assert k1.compiler_options == {"skip_middle_end_transformations": True, "enable_stack_allocator": True}
    assert k3.compiler_options == {"enable_stack_allocator": {"log_level": 1}}


def test_typing_annotations_are_checked():
    @nki.jit
    def k(a: nt.tensor[[128, 64], nl.float32], b: nt.mutable_tensor[128, 64, nl.float32]):
        return add_body(a, b)

    np.testing.assert_array_equal(k(A, B), A + B)
    with pytest.raises(emulator.KernelArgumentError, match="err_annotation_shape_mismatch"):
        k(np.zeros((64, 64), F32), B)


def test_direct_allocation_helpers_are_accepted():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        t[...] = nl.load(a)
        with ncc.no_reorder():
            nl.store(out, t)
        return out

    np.testing.assert_array_equal(k(A), A)


def test_shared_hbm_output_is_shared_by_spmd_programs():
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.program_id(0)
        nl.store(out[p:p + 1, :], nl.load(a[p:p + 1, :]))
        return out

    np.testing.assert_array_equal(k[2](A[:2]), A[:2])

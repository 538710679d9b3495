"""The CUDA model read with tree-sitter-cuda: kernels, indexing, shared memory, barriers, loops, accesses."""

from __future__ import annotations

import textwrap

from nkitui.analysis.cuda import build_cuda_model, eval_c_int
from tests.analysis.conftest import FIXTURES


def model(src: str):
    return build_cuda_model(textwrap.dedent(src), "k.cu")


def test_tiled_matmul_fixture() -> None:
    m = build_cuda_model((FIXTURES / "cuda" / "matmul_tiled.cu").read_text(), "matmul_tiled.cu")
    assert [k.name for k in m.kernels] == ["matmul_tiled"]
    k = m.kernels[0]
    assert k.launch_bounds == [1024]
    assert [(p.name, p.pointer, p.const) for p in k.params] == [
        ("A", True, True), ("B", True, True), ("C", True, False), ("M", False, False), ("N", False, False),
        ("K", False, False)]
    assert [(s.name, s.dims, s.dims_text) for s in k.shared] == [
        ("As", [32, 32], ["TILE", "TILE"]), ("Bs", [32, 33], ["TILE", "TILE + 1"])]
    assert k.shared[0].filled_from == ["A"] and k.shared[1].filled_from == ["B"]
    assert [s.line for s in k.syncs] == [16, 21]
    assert k.index_vars == {"row": 10, "col": 11}
    outer, inner = k.loops
    assert (outer.var, outer.stride, outer.trip, outer.reduction) == ("t", "constant", None, True)
    assert (inner.var, inner.stride, inner.trip, inner.unrolled) == ("k", "unit", 32, True)
    assert sorted({a.line for a in k.accesses if not a.write}) == [14, 15]
    assert [(a.line, a.array) for a in k.accesses if a.write] == [(24, "C")]
    assert [(a.name, a.updates) for a in k.accumulators] == [("acc", [19])]
    assert [(c.line, c.name) for c in k.matmuls] == [(19, "dot-loop")]
    assert [(g.line, g.early_exit) for g in k.guards] == [(23, False)]
    assert [(lc.line, lc.kernel, lc.config) for lc in m.launches] == [(31, "matmul_tiled<32>", ["grid", "block"])]
    assert m.defines["TILE"] == 32 and not m.error_lines


def test_device_functions_are_merged_into_their_callers() -> None:
    m = build_cuda_model((FIXTURES / "cuda" / "softmax.cu").read_text(), "softmax.cu")
    (k,) = m.kernels
    assert [f.name for f in m.device_functions] == ["warp_max", "warp_sum"]
    assert k.shuffles == []
    merged = k.merged(m.device_functions)
    assert [s.line for s in merged.shuffles] == [5, 10]
    halving = [lp for lp in merged.loops if lp.stride == "halving"]
    assert [lp.trip for lp in halving] == [5, 5]
    assert {c.name for c in k.math} == {"max", "exp"}
    assert [lp.stride for lp in k.loops] == ["block-stride"] * 3
    assert [(g.line, g.early_exit) for g in k.guards] == [(16, True)]
    # `xr` aliases `x + row * cols`: its subscripts are global loads of x.
    assert {a.array for a in k.accesses if not a.write} == {"x"}
    assert {a.array for a in k.accesses if a.write} == {"y"}


def test_atomics_grid_stride_and_pointer_derefs() -> None:
    m = model("""
        constexpr int BLOCK = 256;
        __global__ void reduce_sum(const float* __restrict__ x, float* out, int n) {
            extern __shared__ float buf[];
            float s = 0.f;
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
                s += x[i];
            }
            buf[threadIdx.x] = s;
            __syncthreads();
            for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
                if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
                __syncthreads();
            }
            if (threadIdx.x == 0) atomicAdd(out, buf[0]);
            if (threadIdx.x == 1) *out += 0.0f;
        }
    """)
    (k,) = m.kernels
    assert k.shared[0].extern and k.shared[0].dims == [None]
    assert [lp.stride for lp in k.loops] == ["grid-stride", "halving"]
    assert k.loops[1].trip == 8  # 128, 64, ..., 1
    assert [a.name for a in k.atomics] == ["atomicAdd"]
    assert len(k.syncs) == 2
    assert [(a.line, a.write) for a in k.accesses if a.array == "out"] == [(16, True)]
    assert [a.name for a in k.accumulators] == ["s"]
    assert m.defines["BLOCK"] == 256


def test_parse_errors_are_located_not_fatal() -> None:
    m = model("""
        __global__ void k(float* x) {
            x[threadIdx.x] = 1.0f;
        }
        @@@ this is not C
    """)
    assert [k.name for k in m.kernels] == ["k"]
    assert m.error_lines == [5]


def test_eval_c_int() -> None:
    env = {"TILE": 32, "N": 4}
    assert eval_c_int("TILE * N + 1", env) == 129
    assert eval_c_int("(TILE + 1) / 2", env) == 16
    assert eval_c_int("256u", env) == 256
    assert eval_c_int("1 << 5", env) == 32
    assert eval_c_int("blockDim.x", env) is None
    assert eval_c_int("UNKNOWN", env) is None


def test_symbolic_trip_counts_are_spelled_out() -> None:
    m = build_cuda_model((FIXTURES / "cuda" / "matmul_tiled.cu").read_text(), "matmul_tiled.cu")
    assert [lp.trip_text for lp in m.kernels[0].loops] == ["ceil(K / 32)", "32"]
    s = build_cuda_model((FIXTURES / "cuda" / "softmax.cu").read_text(), "softmax.cu")
    assert s.kernels[0].loops[0].trip_text == "cols / blockDim per thread"

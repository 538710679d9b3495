"""NKI-UNFUSED-CHAIN, NKI-ELEM-TRANSPOSE, NKI-PART-REDUCE."""

from __future__ import annotations

from tests.analysis.conftest import findings, no_internal_errors, rule_ids

LEGACY = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import neuronxcc.nki.isa as nisa
"""
NEW = """
        import nki
        import nki.language as nl
        import nki.isa as nisa
"""
SHAPES = {"inputs": {"x": {"shape": [256, 512], "dtype": "float32"}},
          "outputs": {"out": {"shape": [256, 512], "dtype": "float32"}}}


def _tile_kernel(body: str, header: str = LEGACY) -> str:
    return header + """
        @nki.jit
        def k(x):
            out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(2):
                t = nl.load(x[i * 128:(i + 1) * 128, :])
""" + body + """
                nl.store(out[i * 128:(i + 1) * 128, :], value=r)
            return out
"""


def test_scale_bias_exp_chain_is_one_activation(analyze) -> None:
    report = analyze(_tile_kernel("""
                s = nl.multiply(t, 0.5)
                b = nl.add(s, 1.0)
                r = nl.exp(b)
"""), ctx=SHAPES)
    no_internal_errors(report)
    (f,) = findings(report, "NKI-UNFUSED-CHAIN")
    assert f.severity == "medium" and (f.line, f.end_line) == (12, 14)
    assert "nisa.activation(op=nl.exp" in f.message and "scale=" in f.message and "bias=" in f.message


def test_two_scalar_ops_fuse_into_tensor_scalar(analyze) -> None:
    report = analyze(_tile_kernel("""
                s = nl.subtract(t, 3.0)
                r = nl.multiply(s, 2.0)
"""), ctx=SHAPES)
    (f,) = findings(report, "NKI-UNFUSED-CHAIN")
    assert f.severity == "low" and f.data["fused"] == "tensor_scalar" and (f.line, f.end_line) == (12, 13)


def test_activation_then_free_axis_sum(analyze) -> None:
    report = analyze(_tile_kernel("""
                e = nl.exp(t)
                r = nl.sum(e, axis=1)
"""), ctx=SHAPES)
    (f,) = findings(report, "NKI-UNFUSED-CHAIN")
    assert f.data["fused"] == "activation" and "reduce_res" in f.message


def test_already_fused_activation_is_clean(analyze) -> None:
    report = analyze(_tile_kernel("""
                r = nisa.activation(op=nl.exp, data=t, scale=0.5, bias=None)
"""), ctx=SHAPES)
    assert "NKI-UNFUSED-CHAIN" not in rule_ids(report)


def test_intermediate_used_twice_is_a_group_not_a_chain(analyze) -> None:
    report = analyze(_tile_kernel("""
                s = nl.multiply(t, 0.5)
                e = nl.exp(s)
                r = nl.add(e, s)
"""), ctx=SHAPES)
    (f,) = findings(report, "NKI-UNFUSED-CHAIN")
    assert f.severity == "low" and f.data["fused"] == "unknown" and f.data["instructions"] == 3


def test_unrelated_instructions_are_not_grouped(analyze) -> None:
    report = analyze(_tile_kernel("""
                u = nl.load(x[i * 128:(i + 1) * 128, :])
                r = nl.add(t, u)
"""), ctx=SHAPES)
    assert "NKI-UNFUSED-CHAIN" not in rule_ids(report)


def test_gelu_written_out_is_recognised(analyze) -> None:
    report = analyze(_tile_kernel("""
                v3 = nl.multiply(t, t)
                v3 = nl.multiply(v3, t)
                inner = nl.multiply(v3, 0.044715)
                inner = nl.add(t, inner)
                inner = nl.multiply(inner, 0.7978845608028654)
                th = nl.tanh(inner)
                th = nl.add(th, 1.0)
                half = nl.multiply(t, 0.5)
                r = nl.multiply(half, th)
"""), ctx=SHAPES)
    (f,) = findings(report, "NKI-UNFUSED-CHAIN")
    assert f.severity == "medium" and f.data == {"lines": list(range(12, 21)), "fused": "gelu_apprx_tanh",
                                                  "instructions": 9}
    assert "nl.gelu_apprx_tanh" in f.message


def test_elementwise_transpose_in_loops(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def transpose(x):
            n, m = x.shape
            out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(n):
                for j in nl.affine_range(m):
                    v = nl.load(x[i, j])
                    nl.store(out[j, i], value=v)
            return out
    """
    report = analyze(src, ctx={"inputs": {"x": {"shape": [64, 32], "dtype": "float32"}}})
    no_internal_errors(report)
    (f,) = findings(report, "NKI-ELEM-TRANSPOSE")
    assert f.line == 13 and f.severity == "medium" and sorted(f.data["swapped"]) == ["i@L0", "j@L1"]
    assert "nc_transpose" in f.message
    assert findings(report, "NKI-TILE-TINY")[0].severity == "high"


def test_grid_access_with_swapped_axes(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def transpose(x):
            out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(128)[None, :]
            t = nl.load(x[i_f, i_p])
            nl.store(out[i_p, i_f], value=t)
            return out
    """
    report = analyze(src)
    (f,) = findings(report, "NKI-ELEM-TRANSPOSE")
    assert f.line == 11 and "strided" in f.message


def test_tensorengine_transpose_is_clean(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def transpose(x):
            out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            tt = nisa.nc_transpose(t)
            nl.store(out, value=nl.copy(tt))
            return out
    """
    report = analyze(src, ctx={"inputs": {"x": {"shape": [128, 128], "dtype": "float32"}}})
    no_internal_errors(report)
    assert report.findings == []


def test_reduction_over_axis_zero_is_high(analyze) -> None:
    report = analyze(_tile_kernel("""
                r = nl.sum(t, axis=0)
"""), ctx=SHAPES)
    (f,) = findings(report, "NKI-PART-REDUCE")
    assert f.severity == "high" and f.line == 12 and f.category == "fidelity"


def test_partition_walk_accumulation_is_medium(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def colsum(x):
            out = nl.ndarray((1, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x[0:128, :])
            acc = nl.zeros((1, 512), dtype=nl.float32, buffer=nl.sbuf)
            for p in nl.sequential_range(128):
                acc[...] = nl.add(acc, t[p, :])
            nl.store(out, value=acc)
            return out
    """
    report = analyze(src, ctx={"inputs": {"x": {"shape": [128, 512], "dtype": "float32"}}})
    (f,) = findings(report, "NKI-PART-REDUCE")
    assert f.severity == "medium" and f.line == 11 and "ones vector" in f.message


def test_gpsimd_partition_reduce_is_low(analyze) -> None:
    report = analyze(_tile_kernel("""
                r = nisa.tensor_partition_reduce(op=nl.add, data=t)
"""), ctx=SHAPES)
    (f,) = findings(report, "NKI-PART-REDUCE")
    assert f.severity == "low"


def test_intermediate_round_trip_through_hbm(analyze) -> None:
    src = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def k(a):
            out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            tmp = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            for t in nl.affine_range(2):
                x = nl.load(a[t * 128:(t + 1) * 128, :])
                nl.store(tmp[t * 128:(t + 1) * 128, :], value=nl.exp(x))
            for t in nl.affine_range(2):
                e = nl.load(tmp[t * 128:(t + 1) * 128, :])
                nl.store(out[t * 128:(t + 1) * 128, :], value=nl.multiply(e, 2.0))
            return out
    """
    (f,) = findings(analyze(src), "NKI-HBM-SPILL")
    assert f.severity == "medium" and (f.line, f.end_line) == (11, 13) and f.data["tensor"] == "tmp"
    fused = src.replace("nl.store(tmp[t * 128:(t + 1) * 128, :], value=nl.exp(x))",
                        "nl.store(out[t * 128:(t + 1) * 128, :], value=nl.multiply(nl.exp(x), 2.0))")
    fused = fused.replace("e = nl.load(tmp[t * 128:(t + 1) * 128, :])", "e = nl.load(a[t * 128:(t + 1) * 128, :])")
    assert findings(analyze(fused), "NKI-HBM-SPILL") == []


def test_a_cross_core_exchange_through_shared_hbm_is_not_a_spill(analyze) -> None:
    src = """
        import nki
        import nki.language as nl
        import nki.isa as nisa

        @nki.jit
        def allreduce(a):
            c = nl.program_id(0)
            partial = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            mine = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=mine, src=a[c * 128:(c + 1) * 128, :])
            nisa.dma_copy(dst=partial[c], src=mine)
            nisa.core_barrier(partial, (0, 1))
            other = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=other, src=partial[1 - c])
            total = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=total, data1=mine, data2=other, op=nl.add)
            nisa.dma_copy(dst=out, src=total)
            return out
    """
    assert findings(analyze(src), "NKI-HBM-SPILL") == []

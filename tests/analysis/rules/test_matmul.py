"""NKI-ACC-NOT-PSUM and NKI-FP32-MATMUL in both namespaces."""

from __future__ import annotations

from tests.analysis.conftest import FIXTURES, findings, no_internal_errors, rule_ids

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

BF16 = {"inputs": {"a_t": {"shape": [512, 128], "dtype": "bfloat16"}, "b": {"shape": [512, 512], "dtype": "bfloat16"}},
        "outputs": {"c": {"shape": [128, 512], "dtype": "float32"}}}
FP32 = {"inputs": {"a_t": {"shape": [512, 128], "dtype": "float32"}, "b": {"shape": [512, 512], "dtype": "float32"}},
        "outputs": {"c": {"shape": [128, 512], "dtype": "float32"}}}

LEGACY_PSUM = LEGACY + """
        @nki.jit
        def mm(a_t, b):
            c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            psum = nl.zeros((128, 512), dtype=ACC_DTYPE, buffer=nl.psum)
            for k in nl.affine_range(4):
                a = nl.load(a_t[k * 128:(k + 1) * 128, :])
                bb = nl.load(b[k * 128:(k + 1) * 128, :])
                psum += nisa.nc_matmul(a, bb)
            nl.store(c, value=nl.copy(psum, dtype=nl.float32))
            return c
"""

NEW_PSUM = NEW + """
        @nki.jit
        def mm(a_t, b):
            c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            psum = nl.ndarray((128, 512), dtype=ACC_DTYPE, buffer=nl.psum)
            for k in range(4):
                a = nl.ndarray((128, 128), dtype=a_t.dtype, buffer=nl.sbuf)
                bb = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=a_t[k * 128:(k + 1) * 128, :])
                nisa.dma_copy(dst=bb, src=b[k * 128:(k + 1) * 128, :])
                nisa.nc_matmul(psum, a, bb, ACCUMULATE)
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=psum)
            nisa.dma_copy(dst=c, src=res)
            return c
"""


def test_legacy_fp32_psum_accumulation_is_clean(analyze) -> None:
    report = analyze(LEGACY_PSUM.replace("ACC_DTYPE", "nl.float32"), ctx=BF16)
    no_internal_errors(report)
    assert report.findings == []


def test_legacy_bf16_psum_accumulator_is_high(analyze) -> None:
    report = analyze(LEGACY_PSUM.replace("ACC_DTYPE", "nl.bfloat16"), ctx=BF16)
    (f,) = findings(report, "NKI-ACC-NOT-PSUM")
    assert f.severity == "high" and f.line == 13 and f.category == "numerics"
    assert f.data == {"accumulator": "psum", "buffer": "psum", "dtype": "bfloat16"}
    assert "nl.float32" in f.message and "line 9" in f.message


def test_new_namespace_accumulation_variants(analyze) -> None:
    clean = analyze(NEW_PSUM.replace("ACC_DTYPE", "nl.float32").replace(", ACCUMULATE", ""), ctx=BF16)
    no_internal_errors(clean)
    assert clean.findings == []
    explicit = analyze(NEW_PSUM.replace("ACC_DTYPE", "nl.float32").replace("ACCUMULATE", "accumulate=True"), ctx=BF16)
    assert explicit.findings == []
    bf16 = analyze(NEW_PSUM.replace("ACC_DTYPE", "nl.bfloat16").replace("ACCUMULATE", "accumulate=True"), ctx=BF16)
    (f,) = findings(bf16, "NKI-ACC-NOT-PSUM")
    assert f.severity == "high" and f.line == 15
    overwrite = analyze(NEW_PSUM.replace("ACC_DTYPE", "nl.float32").replace("ACCUMULATE", "accumulate=False"),
                        ctx=BF16)
    (f,) = findings(overwrite, "NKI-ACC-NOT-PSUM")
    assert f.severity == "high" and "overwrites" in f.title and "only the last tile" in f.message


def test_sbuf_accumulation_of_each_matmul(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def mm(a_t, b):
            c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 512), dtype=ACC_DTYPE, buffer=nl.sbuf)
            for k in nl.sequential_range(4):
                a = nl.load(a_t[k * 128:(k + 1) * 128, :])
                bb = nl.load(b[k * 128:(k + 1) * 128, :])
                part = nisa.nc_matmul(a, bb)
                acc[...] = nl.add(acc, part)
            nl.store(c, value=acc)
            return c
    """
    fp32 = analyze(src.replace("ACC_DTYPE", "nl.float32"), ctx=BF16)
    (f,) = findings(fp32, "NKI-ACC-NOT-PSUM")
    assert f.severity == "medium" and f.line == 14 and "VectorE" in f.message
    bf16 = analyze(src.replace("ACC_DTYPE", "nl.bfloat16"), ctx=BF16)
    (f,) = findings(bf16, "NKI-ACC-NOT-PSUM")
    assert f.severity == "high" and f.data["dtype"] == "bfloat16"
    # The K loop really carries the accumulator, so sequential_range is right here.
    assert "NKI-SEQ-NO-DEP" not in rule_ids(bf16)


def test_rebinding_accumulator_is_recognised(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def mm(a_t, b):
            c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
            for k in nl.sequential_range(4):
                a = nl.load(a_t[k * 128:(k + 1) * 128, :])
                bb = nl.load(b[k * 128:(k + 1) * 128, :])
                acc = acc + nl.copy(nisa.nc_matmul(a, bb), dtype=nl.bfloat16)
            nl.store(c, value=acc)
            return c
    """
    report = analyze(src, ctx=BF16)
    (f,) = findings(report, "NKI-ACC-NOT-PSUM")
    assert f.severity == "high" and f.line == 13


def test_blocked_k_accumulation_in_fp32_sbuf_is_idiomatic(analyze) -> None:
    # PSUM accumulates within a K block; fp32 SBUF sums the blocks (matmul tutorial, Optimization 3).
    src = LEGACY + """
        @nki.jit
        def mm(a_t, b):
            c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            for kb in nl.sequential_range(2):
                psum = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(2):
                    a = nl.load(a_t[(kb * 2 + k) * 128:(kb * 2 + k + 1) * 128, :])
                    bb = nl.load(b[(kb * 2 + k) * 128:(kb * 2 + k + 1) * 128, :])
                    psum += nisa.nc_matmul(a, bb)
                acc[...] = nl.add(acc, psum)
            nl.store(c, value=acc)
            return c
    """
    report = analyze(src, ctx=BF16)
    no_internal_errors(report)
    assert "NKI-ACC-NOT-PSUM" not in rule_ids(report)


def test_fp32_matmul_severity_depends_on_the_data(analyze) -> None:
    src = LEGACY_PSUM.replace("ACC_DTYPE", "nl.float32")
    native = analyze(src, ctx=FP32)
    (f,) = findings(native, "NKI-FP32-MATMUL")
    assert f.severity == "low" and f.line == 13 and "quarter" in f.message
    widened = analyze(src.replace("nl.load(a_t[k * 128:(k + 1) * 128, :])",
                                  "nl.load(a_t[k * 128:(k + 1) * 128, :], dtype=nl.float32)")
                         .replace("nl.load(b[k * 128:(k + 1) * 128, :])",
                                  "nl.load(b[k * 128:(k + 1) * 128, :], dtype=nl.float32)"), ctx=BF16)
    (f,) = findings(widened, "NKI-FP32-MATMUL")
    assert f.severity == "medium" and "widened from bfloat16" in f.message
    assert "NKI-FP32-MATMUL" not in rule_ids(analyze(src, ctx=BF16))


def test_fixture_new_namespace_matmul_is_clean(analyze) -> None:
    report = analyze((FIXTURES / "nki" / "new_matmul_good.py").read_text(),
                     ctx={"inputs": {"lhsT": {"shape": [1024, 256], "dtype": "bfloat16"},
                                     "rhs": {"shape": [1024, 1024], "dtype": "bfloat16"}},
                          "outputs": {"out": {"shape": [256, 1024], "dtype": "bfloat16"}}})
    no_internal_errors(report)
    assert not rule_ids(report, "high") and not rule_ids(report, "medium")


def test_nl_matmul_without_transpose_x(analyze) -> None:
    src = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def mm(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            for k in nl.affine_range(4):
                x = nl.load(a[:, k * 128:(k + 1) * 128])
                y = nl.load(b[k * 128:(k + 1) * 128, :])
                nl.store(out, value=nl.matmul(x, y))
            return out
    """
    (f,) = findings(analyze(src), "NKI-MATMUL-TRANSPOSE")
    assert f.severity == "medium" and f.line == 11 and "transpose_x=True" in f.message and "line 8" in f.message
    assert findings(analyze(src.replace("nl.matmul(x, y)", "nl.matmul(x, y, transpose_x=True)")),
                    "NKI-MATMUL-TRANSPOSE") == []
    single = src.replace("for k in nl.affine_range(4):", "if True:").replace("k * 128:(k + 1) * 128", "0:128")
    (f,) = findings(analyze(single), "NKI-MATMUL-TRANSPOSE")
    assert f.severity == "low"

"""NKI-TILE-TINY, NKI-PART-UNDER128, NKI-SEQ-NO-DEP, NKI-HBM-RELOAD."""

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

PER_ELEMENT = LEGACY + """
        @nki.jit
        def add_kernel(a, b):
            n, d = a.shape
            out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.sequential_range(n):
                for j in nl.sequential_range(d):
                    x = nl.load(a[i, j])
                    y = nl.load(b[i, j])
                    nl.store(out[i, j], value=nl.add(x, y))
            return out
"""

ROW_TILES = LEGACY + """
        @nki.jit
        def add_kernel(a, b):
            n, d = a.shape
            out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(n // 128):
                x = nl.load(a[i * 128:(i + 1) * 128, :])
                y = nl.load(b[i * 128:(i + 1) * 128, :])
                nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, y))
            return out
"""

SHAPES = {"inputs": {"a": {"shape": [256, 512], "dtype": "float32"}, "b": {"shape": [256, 512], "dtype": "float32"}},
          "outputs": {"out": {"shape": [256, 512], "dtype": "float32"}}}


def test_per_element_transliteration(analyze) -> None:
    report = analyze(PER_ELEMENT, ctx=SHAPES)
    no_internal_errors(report)
    (tiny,) = findings(report, "NKI-TILE-TINY")
    assert tiny.severity == "high" and (tiny.line, tiny.end_line) == (12, 14)
    assert tiny.data["elements"] == 1 and tiny.data["loop_line"] == 11
    assert "thread-per-element" in tiny.message.lower() or "one element" in tiny.message
    (part,) = findings(report, "NKI-PART-UNDER128")
    assert part.severity == "high" and part.data["partitions"] == 1 and part.data["fits"] == 128
    seq = findings(report, "NKI-SEQ-NO-DEP")
    assert sorted(f.line for f in seq) == [10, 11] and {f.severity for f in seq} == {"medium"}
    assert all(f.file == "kernel_nki.py" for f in report.findings)


def test_row_tiles_are_clean(analyze) -> None:
    report = analyze(ROW_TILES, ctx=SHAPES)
    no_internal_errors(report)
    assert report.findings == []


def test_partition_under_128_with_a_64_row_tile(analyze) -> None:
    src = ROW_TILES.replace("128", "64")
    report = analyze(src, ctx=SHAPES)
    (part,) = findings(report, "NKI-PART-UNDER128")
    assert part.severity == "medium" and part.data == {"lines": [11, 12, 13], "partitions": 64, "fits": 128}
    assert "50.0%" in part.message
    assert "NKI-TILE-TINY" not in rule_ids(report)


def test_small_axis_that_fills_its_tile_is_not_flagged(analyze) -> None:
    # 64 rows in total: a 64-partition tile is all there is.
    report = analyze(ROW_TILES.replace("n // 128", "1").replace("128", "64"),
                     ctx={"inputs": {"a": {"shape": [64, 512], "dtype": "float32"},
                                     "b": {"shape": [64, 512], "dtype": "float32"}}})
    assert "NKI-PART-UNDER128" not in rule_ids(report)


def test_vector_loaded_as_one_row_is_not_flagged(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def scale_rows(x, g):
            n, d = x.shape
            out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
            g_row = nl.load(g.reshape((1, d)))
            for i in nl.affine_range(n // 128):
                t = nl.load(x[i * 128:(i + 1) * 128, :])
                nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t, g_row))
            return out
    """
    report = analyze(src, ctx={"inputs": {"x": {"shape": [256, 512], "dtype": "float32"},
                                          "g": {"shape": [512], "dtype": "float32"}}})
    assert "NKI-PART-UNDER128" not in rule_ids(report) and "NKI-TILE-TINY" not in rule_ids(report)


def test_sequential_with_carried_dependency_is_not_flagged(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def prefix(x):
            n, d = x.shape
            out = nl.ndarray((128, d), dtype=x.dtype, buffer=nl.shared_hbm)
            carry = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            for c in nl.sequential_range(d // 512):
                t = nl.load(x[0:128, c * 512:(c + 1) * 512])
                s = nisa.tensor_tensor_scan(t, t, initial=carry, op0=nl.multiply, op1=nl.add)
                carry[...] = nl.copy(s[:, 511:512])
                nl.store(out[0:128, c * 512:(c + 1) * 512], value=s)
            return out
    """
    report = analyze(src)
    no_internal_errors(report)
    assert "NKI-SEQ-NO-DEP" not in rule_ids(report)


def test_python_range_in_legacy_counts_as_sequential(analyze) -> None:
    report = analyze(ROW_TILES.replace("nl.affine_range(n // 128)", "range(n // 128)"), ctx=SHAPES)
    (seq,) = findings(report, "NKI-SEQ-NO-DEP")
    assert seq.severity == "medium" and seq.line == 10 and "Python `range`" in seq.message


def test_new_namespace_sequential_range_is_low(analyze) -> None:
    src = NEW + """
        @nki.jit
        def copy_kernel(x):
            out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.sequential_range(2):
                t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
                nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
            return out
    """
    report = analyze(src)
    (seq,) = findings(report, "NKI-SEQ-NO-DEP")
    assert seq.severity == "low" and "deprecated alias" in seq.message
    # Plain `range` is the normal loop of the new namespace.
    assert "NKI-SEQ-NO-DEP" not in rule_ids(analyze(src.replace("nl.sequential_range(2)", "range(2)")))


def test_invariant_load_in_innermost_loop_is_medium(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def scale_rows(x, g):
            n, d = x.shape
            out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(n // 128):
                t = nl.load(x[i * 128:(i + 1) * 128, :])
                gt = nl.load(g[0:128, :])
                nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t, gt))
            return out
    """
    report = analyze(src, ctx={"inputs": {"x": {"shape": [512, 64], "dtype": "float32"},
                                          "g": {"shape": [128, 64], "dtype": "float32"}}})
    (reload,) = findings(report, "NKI-HBM-RELOAD")
    assert reload.severity == "medium" and reload.line == 12
    assert "above line 10" in reload.message and reload.data["loop_lines"] == [10]


def test_outer_loop_reload_of_tiled_matmul_is_low(analyze) -> None:
    from tests.analysis.conftest import FIXTURES

    src = (FIXTURES / "nki" / "legacy_matmul_good.py").read_text()
    report = analyze(src, ctx={"inputs": {"lhsT": {"shape": [256, 256], "dtype": "bfloat16"},
                                          "rhs": {"shape": [256, 1024], "dtype": "bfloat16"}}})
    reloads = findings(report, "NKI-HBM-RELOAD")
    assert sorted(f.line for f in reloads) == [22, 23]
    assert {f.severity for f in reloads} == {"low"}
    assert not rule_ids(report, "high") and not rule_ids(report, "medium")


def test_row_broadcast_per_state_is_not_a_one_partition_tile(analyze) -> None:
    # A [1, n] row loaded per state and broadcast across the partitions (Mamba's B/C) is the idiom.
    src = LEGACY + """
        @nki.jit
        def scan_like(x, b):
            n_states, seq = b.shape
            out = nl.ndarray((128, seq), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((128, seq), dtype=nl.float32, buffer=nl.sbuf)
            t = nl.load(x[0:128, :])
            for s in nl.affine_range(n_states):
                row = nl.load(b[s:s + 1, :])
                acc[...] += nl.multiply(t, row.broadcast_to((128, seq)))
            nl.store(out, value=acc)
            return out
    """
    report = analyze(src, ctx={"inputs": {"x": {"shape": [128, 512], "dtype": "float32"},
                                          "b": {"shape": [16, 512], "dtype": "float32"}}})
    no_internal_errors(report)
    assert "NKI-PART-UNDER128" not in rule_ids(report) and "NKI-TILE-TINY" not in rule_ids(report)


def test_rebinding_a_tile_is_a_carried_dependency(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def chain(x, n_ops):
            out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            for _ in nl.sequential_range(n_ops):
                t = nisa.tensor_scalar(t, nl.add, 1.0)
            nl.store(out, value=t)
            return out
    """
    assert "NKI-SEQ-NO-DEP" not in rule_ids(analyze(src))


def test_one_row_of_a_short_axis_is_not_high(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def rows(a):
            n, d = a.shape
            out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(n):
                t = nl.load(a[i:i + 1, :])
                nl.store(out[i:i + 1, :], value=nl.exp(t))
            return out
    """
    (f,) = findings(analyze(src, ctx={"inputs": {"a": {"shape": [4, 2048], "dtype": "float32"}}}),
                    "NKI-PART-UNDER128")
    assert f.severity == "medium" and f.data["fits"] == 4


def test_per_element_loop_over_a_tiny_tensor_is_medium(analyze) -> None:
    small = {"inputs": {"a": {"shape": [8, 16], "dtype": "float32"}, "b": {"shape": [8, 16], "dtype": "float32"}}}
    (tiny,) = findings(analyze(PER_ELEMENT, ctx=small), "NKI-TILE-TINY")
    assert tiny.severity == "medium" and tiny.data["elements"] == 1


def test_python_branches_on_tile_values(analyze) -> None:
    src = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def k(a):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            if a.shape[0] > 64 and x is not None:
                nl.store(out, value=x)
            if x[0, 0] > 0:
                nl.store(out, value=nl.exp(x))
            s = nl.sum(x, axis=1)
            while s > 1:
                s = nl.multiply(s, 0.5)
            return out
    """
    (f,) = findings(analyze(src), "NKI-DATA-BRANCH")
    assert f.severity == "high" and f.category == "fidelity"
    assert f.data["lines"] == [11, 14] and f.data["tests"] == ["x[0, 0] > 0", "s > 1"]
    assert "nl.where" in f.message

"""NKI-PARTIAL-NO-MASK, NKI-PARTIAL-DROPPED, NKI-PARTIAL-MASK (with and without the task's shapes)."""

from __future__ import annotations

import pytest

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
ROWS_300 = {"inputs": {"x": {"shape": [300, 256], "dtype": "float32"}},
            "outputs": {"out": {"shape": [300, 256], "dtype": "float32"}}}
ROWS_256 = {"inputs": {"x": {"shape": [256, 256], "dtype": "float32"}},
            "outputs": {"out": {"shape": [256, 256], "dtype": "float32"}}}

LEGACY_MASKED = LEGACY + """
        @nki.jit
        def k(x):
            n, d = x.shape
            out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(d)[None, :]
            for t in nl.affine_range(TRIPS):
                tile = nl.load(x[t * 128 + i_p, i_f], mask=MASK)
                e = nl.exp(tile, mask=MASK)
                nl.store(out[t * 128 + i_p, i_f], value=e, mask=MASK)
            return out
"""

NEW_BOUNDED = NEW + """
        @nki.jit
        def k(x):
            n, d = x.shape
            P = 128
            out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in range(TRIPS):
                rows = ROWS
                t = nl.ndarray((P, d), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t[0:rows, :], src=x[i * P:i * P + rows, :])
                nisa.activation(dst=t[0:rows, :], op=nl.exp, data=t[0:rows, :])
                nisa.dma_copy(dst=out[i * P:i * P + rows, :], src=t[0:rows, :])
            return out
"""


def _legacy(trips: str, mask: str) -> str:
    return LEGACY_MASKED.replace("TRIPS", trips).replace("MASK", mask)


def _new(trips: str, rows: str) -> str:
    return NEW_BOUNDED.replace("TRIPS", trips).replace("ROWS", rows)


@pytest.mark.parametrize("ctx", [ROWS_300, ROWS_256, None])
def test_correct_masks_and_bounds_are_clean(analyze, ctx) -> None:
    for src in (_legacy("(n + 127) // 128", "(t * 128 + i_p < n)"), _new("(n + P - 1) // P", "min(P, n - i * P)")):
        report = analyze(src, ctx=ctx)
        no_internal_errors(report)
        assert not {r for r in rule_ids(report) if r.startswith("NKI-PARTIAL")}, report.findings


def test_unmasked_ceil_loop_overruns(analyze) -> None:
    src = _legacy("(n + 127) // 128", "None")
    report = analyze(src, ctx=ROWS_300)
    nomask = findings(report, "NKI-PARTIAL-NO-MASK")
    assert {f.severity for f in nomask} == {"high"}
    assert sorted(f.line for f in nomask) == [13, 15]
    assert nomask[0].data["size"] == 300 and nomask[0].data["reach"] == 384
    # Without shapes the same kernel is flagged from the rounded-up trip count, at medium severity.
    symbolic = findings(analyze(src), "NKI-PARTIAL-NO-MASK")
    assert {f.severity for f in symbolic} == {"medium"} and "rounds the tile count up" in symbolic[0].message
    # When the rows are an exact multiple of the tile there is nothing to flag.
    assert not findings(analyze(src, ctx=ROWS_256), "NKI-PARTIAL-NO-MASK")


def test_floor_division_drops_the_last_rows(analyze) -> None:
    report = analyze(_new("n // P", "P"), ctx=ROWS_300)
    dropped = findings(report, "NKI-PARTIAL-DROPPED")
    assert {f.severity for f in dropped} == {"high"} and len(dropped) == 2
    by_tensor = {f.data["tensor"]: f for f in dropped}
    assert by_tensor["x"].data["reach"] == 256 and "never read" in by_tensor["x"].title
    assert "never written" in by_tensor["out"].title and "rounds down" in by_tensor["out"].message
    assert not analyze(_new("n // P", "P"), ctx=ROWS_256).findings


def test_mask_off_by_one(analyze) -> None:
    short = _legacy("(n + 127) // 128", "(t * 128 + i_p < n - 1)")
    for ctx in (ROWS_300, None):
        report = analyze(short, ctx=ctx)
        masks = findings(report, "NKI-PARTIAL-MASK")
        assert masks and {f.severity for f in masks} == {"high"}, (ctx, report.findings)
    long = _legacy("(n + 127) // 128", "(t * 128 + i_p <= n)")
    for ctx in (ROWS_300, None):
        masks = findings(analyze(long, ctx=ctx), "NKI-PARTIAL-MASK")
        assert masks and all("past" in f.title for f in masks), ctx


def test_min_bound_off_by_one(analyze) -> None:
    for ctx in (ROWS_300, None):
        report = analyze(_new("(n + P - 1) // P", "min(P, n - i * P - 1)"), ctx=ctx)
        masks = findings(report, "NKI-PARTIAL-MASK")
        assert masks and {f.severity for f in masks} == {"high"}, (ctx, report.findings)


def test_divisibility_assert_silences_the_symbolic_warning(analyze) -> None:
    src = _legacy("(n + 127) // 128", "None").replace(
        "n, d = x.shape", "n, d = x.shape\n            assert n % 128 == 0")
    assert "NKI-PARTIAL-NO-MASK" not in rule_ids(analyze(src))


def test_output_written_only_at_fixed_indices(analyze) -> None:
    ctx = {"inputs": {"a": {"shape": [256, 512], "dtype": "float32"}},
           "outputs": {"out": {"shape": [256, 512], "dtype": "float32"}}}
    src = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def k(a):
            out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            for t in nl.affine_range(2):
                x = nl.load(a[t * 128:(t + 1) * 128, :])
                nl.store(out[0:128, :], value=nl.exp(x))
            return out
    """
    (f,) = findings(analyze(src, ctx=ctx), "NKI-PARTIAL-DROPPED")
    assert f.severity == "high" and f.line == 10 and f.data["written"] == [0, 128] and f.data["dim"] == 0
    every_tile = src.replace("out[0:128, :]", "out[t * 128:(t + 1) * 128, :]")
    assert findings(analyze(every_tile, ctx=ctx), "NKI-PARTIAL-DROPPED") == []
    half_cols = every_tile.replace("out[t * 128:(t + 1) * 128, :], value=nl.exp(x)",
                                   "out[t * 128:(t + 1) * 128, 0:256], value=nl.exp(x[:, 0:256])")
    (f,) = findings(analyze(half_cols, ctx=ctx), "NKI-PARTIAL-DROPPED")
    assert f.data["dim"] == 1 and f.data["written"] == [0, 256]

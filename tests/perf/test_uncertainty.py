"""The uncertainty band every estimate carries: in the record, the stored run result, `nkitui check` text."""

import json

import pytest

from nkitui.perf import estimate, load_profile
from nkitui.perf.uncertainty import CALIBRATED, Uncertainty, describe_record
from tests.app.helpers import recorded_result
from tests.perf.test_estimate import matmul_trace

DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_every_estimate_carries_the_calibrated_band_and_measurements_none():
    rec = estimate(matmul_trace())
    band = Uncertainty.from_json(rec.uncertainty)
    assert band == CALIBRATED and band.low < 0 < band.high
    lo, hi = band.bounds(rec.total_time)
    assert lo < rec.total_time < hi
    text = band.describe(0.0271)
    assert text == f"estimated 27.1 ms, {band.band_text()} on calibrated kernel families; outside them the error is unknown"
    assert load_profile(DATA / "explorer_view.json").uncertainty is None
    assert describe_record(load_profile(DATA / "explorer_view.json").to_json()) is None


def test_the_band_survives_the_stored_result_and_old_records_have_none():
    rec = estimate(matmul_trace())
    stored = json.loads(json.dumps(rec.to_json()))
    assert describe_record(stored) == CALIBRATED.describe(rec.total_time)
    del stored["uncertainty"]  # a record written before the band existed
    assert describe_record(stored) is None
    assert type(rec).from_json(stored).uncertainty is None


def test_check_text_shows_the_band_of_an_estimated_run():
    from rich.console import Console

    from nkitui.evaluate.present.report import render_timing

    result = recorded_result()
    rec = estimate(matmul_trace("trn2"))
    result.utilisation = rec
    console = Console(width=200, record=True)
    console.print(render_timing(result))
    out = console.export_text()
    assert "on calibrated kernel families; outside them the error is unknown" in out
    assert CALIBRATED.band_text() in out


@pytest.mark.parametrize("bad", [None, {}, {"low": "x", "high": 1}])
def test_a_malformed_band_reads_as_none(bad):
    assert Uncertainty.from_json(bad) is None

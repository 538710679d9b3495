"""benchmarks/pairs.py: when an alternated-pairs comparison calls a figure worse."""

from benchmarks.pairs import compare_pairs


def test_a_higher_median_most_pairs_agree_with_is_worse():
    base = [{"f": 1.0}, {"f": 1.1}, {"f": 0.9}]
    this = [{"f": 1.3}, {"f": 1.2}, {"f": 0.95}]
    [row] = compare_pairs(base, this)
    assert row["worse"] and row["lower_in"] == 0 and row["ratio"] > 1


def test_a_higher_median_that_half_the_pairs_contradict_is_noise():
    base = [{"f": 1.0}, {"f": 2.0}, {"f": 1.0}, {"f": 2.0}]
    this = [{"f": 0.9}, {"f": 2.5}, {"f": 0.9}, {"f": 2.5}]
    [row] = compare_pairs(base, this)
    assert row["this"] > row["baseline"] and row["lower_in"] == 2 and not row["worse"]


def test_lower_is_never_worse_and_unjudged_or_missing_figures_are_never_worse():
    base = [{"f": 2.0, "info": 1.0}]
    this = [{"f": 1.0, "info": 5.0, "new": 3.0}]
    rows = {r["figure"]: r for r in compare_pairs(base, this, not_judged={"info"})}
    assert not rows["f"]["worse"] and rows["f"]["lower_in"] == 1
    assert not rows["info"]["worse"] and rows["info"]["ratio"] == 5.0
    assert rows["new"]["baseline"] is None and not rows["new"]["worse"]

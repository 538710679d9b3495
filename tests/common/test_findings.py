"""Findings reported twice (two rules walking one kernel, two checks on one output) are shown once."""
from __future__ import annotations

from nkitui.common.findings import Finding, dedupe_findings


def _finding(rule: str, line: int | None, title: str = "t", message: str = "m") -> Finding:
    return Finding(rule=rule, severity="medium", title=title, message=message, category="fidelity",
                   source="analysis", file="k.py", line=line)


def test_the_first_report_of_a_fact_wins_and_order_is_kept() -> None:
    first = _finding("NKI-A", 3, message="first")
    again = _finding("NKI-A", 3, message="second wording")
    other_line = _finding("NKI-A", 4)
    other_rule = _finding("NKI-B", 3)
    assert dedupe_findings([first, other_line, again, other_rule]) == [first, other_line, other_rule]


def test_a_different_title_at_the_same_place_is_a_different_fact() -> None:
    a, b = _finding("NKI-A", 3, title="one"), _finding("NKI-A", 3, title="two")
    assert dedupe_findings(iter([a, b])) == [a, b]

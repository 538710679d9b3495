"""Inter-rater agreement per criterion (Krippendorff's alpha) across every review under a folder.

Units are *task versions*: the same task (folder and id) with the same sha256 of every judged file,
so two auditors who judged different revisions of a kernel are never paired. Each auditor counts
once per unit (their latest review of it). Numeric and label scales are ordinal, pass/fail is
nominal. Alpha needs at least two auditors rating at least one common unit, and some variation.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nkitui.review.rubric import Scale
from nkitui.review.rubric_cache import RubricCache
from nkitui.review.scan import LoadedReview, scan_tree
from nkitui.task.problems import Problem


@dataclass(frozen=True)
class CriterionAgreement:
    rubric_id: str
    criterion: str
    title: str
    level: Literal["ordinal", "nominal"]
    alpha: float | None
    raters: int  # auditors with at least one pairable rating
    units: int  # task versions rated by two or more auditors
    ratings: int  # pairable ratings used
    note: str = ""  # why alpha is missing, or a caution

    def to_dict(self) -> dict[str, Any]:
        return {"rubric": self.rubric_id, "criterion": self.criterion, "title": self.title, "level": self.level,
                "alpha": self.alpha, "raters": self.raters, "units": self.units, "ratings": self.ratings, "note": self.note}


@dataclass
class AgreementReport:
    criteria: list[CriterionAgreement] = field(default_factory=list)
    reviews: int = 0
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"reviews": self.reviews, "criteria": [c.to_dict() for c in self.criteria],
                "problems": [p.to_dict() for p in self.problems]}


def unit_key(review: LoadedReview) -> tuple[str, str, str]:
    """(task folder, task id, fingerprint of the judged files): what 'the same thing judged' means."""
    files = review.record.task.files
    fingerprint = hashlib.sha256("\n".join(f"{k}\0{v}" for k, v in sorted(files.items())).encode()).hexdigest()[:16]
    return (str(Path(review.task_root).resolve()), review.record.task.id, fingerprint)


@dataclass(frozen=True)
class _Coding:
    """How a criterion's values become numbers for krippendorff.alpha."""

    level: Literal["ordinal", "nominal"]
    to_number: Callable[[Any], float]
    domain: list[float]


def _coding(scale: Scale | None, values: list[Any]) -> _Coding:
    if scale is not None:
        return _Coding(scale.measurement, scale.ordinal, [scale.ordinal(v) for v in scale.values()])
    # The rubric is unknown (a deleted task rubric): infer from the values themselves.
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return _Coding("ordinal", float, sorted({float(v) for v in values}))
    labels = sorted({str(v) for v in values})
    return _Coding("nominal", lambda v: float(labels.index(str(v))), [float(i) for i in range(len(labels))])


def compute_agreement(reviews: list[LoadedReview], rubrics: RubricCache | None = None) -> AgreementReport:
    rubrics = rubrics or RubricCache()
    report = AgreementReport(reviews=len(reviews))
    # latest review per (unit, auditor)
    latest: dict[tuple[tuple[str, str, str], str], LoadedReview] = {}
    for lr in reviews:
        k = (unit_key(lr), lr.record.auditor)
        if k not in latest or lr.record.submitted_at > latest[k].record.submitted_at:
            latest[k] = lr
    # ratings[(rubric id, criterion)][unit][auditor] = value
    ratings: dict[tuple[str, str], dict[tuple[Any, ...], dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    scales: dict[tuple[str, str], Scale | None] = {}
    titles: dict[tuple[str, str], str] = {}
    order: list[tuple[str, str]] = []
    for (unit, auditor), lr in sorted(latest.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rubric = rubrics.get(lr.task_root, lr.record.rubric_id)
        for cid, score in lr.record.scores.items():
            if score.value is None:
                continue
            key = (lr.record.rubric_id, cid)
            if key not in order:
                order.append(key)
            crit = rubric.criterion(cid) if rubric else None
            if crit is not None:
                if crit.scale.check(score.value) is not None:
                    report.problems.append(Problem(lr.relpath, f"scores.{cid}.score",
                                                   f"{score.value!r} is not on the scale {crit.scale.describe()}; left out of agreement",
                                                   "score reviews on the rubric's scale", "warning"))
                    continue
                scales.setdefault(key, crit.scale)
                titles.setdefault(key, crit.title)
            ratings[key][unit][auditor] = score.value
    order.sort(key=lambda k: _rubric_position(rubrics, reviews, k))
    for key in order:
        report.criteria.append(_alpha_for(key, ratings[key], scales.get(key), titles.get(key, key[1])))
    return report


def _rubric_position(rubrics: RubricCache, reviews: list[LoadedReview], key: tuple[str, str]) -> tuple[str, int]:
    for lr in reviews:
        if lr.record.rubric_id == key[0]:
            rubric = rubrics.get(lr.task_root, key[0])
            if rubric is not None and key[1] in rubric.criterion_ids:
                return (key[0], rubric.criterion_ids.index(key[1]))
    return (key[0], 10_000)


def _alpha_for(key: tuple[str, str], by_unit: dict[tuple[Any, ...], dict[str, Any]], scale: Scale | None, title: str) -> CriterionAgreement:
    import krippendorff

    if scale is not None:  # values from reviews whose rubric lacked this criterion must still fit the scale
        by_unit = {u: {a: v for a, v in r.items() if scale.check(v) is None} for u, r in by_unit.items()}
    pairable = {u: r for u, r in by_unit.items() if len(r) >= 2}
    coding = _coding(scale, [v for r in by_unit.values() for v in r.values()])
    auditors = sorted({a for r in pairable.values() for a in r})
    n_ratings = sum(len(r) for r in pairable.values())
    base: dict[str, Any] = dict(rubric_id=key[0], criterion=key[1], title=title, level=coding.level,
                                raters=len(auditors), units=len(pairable), ratings=n_ratings)
    if not pairable:
        return CriterionAgreement(alpha=None, note="no task version was rated by two or more auditors", **base)
    units = sorted(pairable)
    data = np.full((len(auditors), len(units)), np.nan)
    for j, unit in enumerate(units):
        for auditor, value in pairable[unit].items():
            data[auditors.index(auditor), j] = coding.to_number(value)
    observed = {float(x) for x in data[~np.isnan(data)]}
    if len(observed) < 2:
        return CriterionAgreement(alpha=None, note="every rating is the same value: agreement is perfect but alpha is undefined", **base)
    domain = sorted(set(coding.domain) | observed)
    alpha = float(krippendorff.alpha(reliability_data=data, value_domain=domain, level_of_measurement=coding.level))
    note = ""
    if len(units) < 5:
        note = f"only {len(units)} shared task version{'s' if len(units) != 1 else ''}: treat alpha as indicative"
    return CriterionAgreement(alpha=None if math.isnan(alpha) else alpha, note=note, **base)


def agreement_under(root: Path) -> AgreementReport:
    """Agreement per criterion across every review in every reviews/ folder under `root`."""
    scan = scan_tree(Path(root))
    report = compute_agreement(scan.reviews)
    report.problems = scan.problems + report.problems
    return report

"""`nkitui history`: a task's submitted reviews, newest first, with outdated markers.

    nkitui history TASK_DIR [--json]
    nkitui history TASK_DIR --blind [--auditor NAME]    hide others' judgements until you have reviewed
    nkitui history TASK_DIR --diff REVIEW_A REVIEW_B    what changed between two reviews (ids or prefixes)
    nkitui history DIR --agreement [--json]             Krippendorff's alpha per criterion over DIR

Corrupt review files are reported on standard error and skipped. Exit 2 when TASK_DIR is missing
or a --diff review cannot be found.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nkitui.cli.textout import print_wrapped


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="submitted reviews of a task, newest first, with outdated markers")
    p.add_argument("task_dir", type=Path, metavar="TASK_DIR",
                   help="the task folder (with --agreement: any folder; every review under it counts)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--blind", action="store_true", help="hide other auditors' scores until you have reviewed this version")
    p.add_argument("--auditor", help="who is looking, for --blind (default: git config user.name, else the OS user)")
    p.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two reviews (ids, id prefixes or paths)")
    p.add_argument("--agreement", action="store_true",
                   help="inter-rater agreement per criterion across every review under TASK_DIR (any folder)")
    p.set_defaults(func=_history)


def _err(text: str) -> None:
    print_wrapped(text, subsequent="    ", file=sys.stderr)


def _out(text: str, indent: str = "", subsequent: str | None = None) -> None:
    """A line of the listing, wrapped to the terminal with a hanging indent (whole into a pipe)."""
    print_wrapped(text, indent=indent, subsequent=subsequent)


def _viewer(task_dir: Path, auditor: str | None) -> str:
    from nkitui.review import current_auditor

    return current_auditor(task_dir, auditor)


def _fmt_score(value) -> str:
    return "-" if value is None else str(value)


def _from_here(problem, task_dir: Path):
    """A problem whose file is task-relative (reviews/...), as a path that works from the current folder."""
    import dataclasses

    if Path(problem.file).is_absolute() or not (task_dir / problem.file).exists():
        return problem
    return dataclasses.replace(problem, file=(task_dir / problem.file).as_posix())


def _history(args: argparse.Namespace) -> int:
    if not args.task_dir.is_dir():
        what = "is a file, not a folder" if args.task_dir.is_file() else "no such folder"
        _err(f"error: {args.task_dir}: {what} — fix: give the path of a task folder"
             + (f" (here: {args.task_dir.parent})" if args.task_dir.is_file() else ""))
        return 2
    if args.agreement:
        return _agreement(args)
    from nkitui.review import ReviewError, diff_reviews, task_history
    from nkitui.review.rubric_cache import RubricCache

    viewer = None
    if args.blind:
        try:
            viewer = _viewer(args.task_dir, args.auditor)
        except ReviewError as exc:
            for p in exc.problems:
                _err(str(p))
            return 2
    rubrics = RubricCache()
    history = task_history(args.task_dir, blind=args.blind, viewer=viewer, rubrics=rubrics)
    for p in history.problems:
        _err(str(_from_here(p, args.task_dir)))

    if args.diff:
        try:
            a, b = (history.find(ref) for ref in args.diff)
        except KeyError as exc:
            _err(f"error: {exc.args[0]}")
            return 2
        if a.hidden or b.hidden:
            _err("error: blind mode: submit your own review of this version before comparing others' reviews")
            return 2
        diff = diff_reviews(a.record, b.record, rubrics.get(args.task_dir, b.record.rubric_id))
        if args.json:
            print(json.dumps(diff.to_dict(), indent=2))
        else:
            _print_diff(diff)
        return 0

    if args.json:
        print(json.dumps({"task": str(args.task_dir), "task_id": history.task_id, "blind": history.blind,
                          "viewer": history.viewer, "reviews": [e.to_dict() for e in history.entries],
                          "problems": [p.to_dict() for p in history.problems]}, indent=2))
        return 0
    if not history.entries:
        _out(f"no reviews of {history.task_id or args.task_dir} yet (they live in {args.task_dir}/reviews/)",
             subsequent="  ")
        return 0
    _out(f"reviews of {history.task_id or args.task_dir}, newest first ({len(history.entries)})")
    if history.blind and not history.viewer_reviewed_current:
        _out(f"blind mode: others' judgements are hidden until {viewer} submits a review of the current version",
             subsequent="  ")
    for e in history.entries:
        r = e.record
        when = r.submitted_at.strftime("%Y-%m-%d %H:%M")
        mark = "OUTDATED " if e.outdated else ""
        if e.hidden:
            line = f"{mark}{when}  {r.auditor}  (hidden)"
        else:
            score = "" if e.weighted_score is None else f"  {e.weighted_score * 100:.0f}%"
            scores = " ".join(f"{cid}={_fmt_score(s.value)}" for cid, s in r.scores.items())
            line = f"{mark}{when}  {r.auditor}  {r.verdict}{score}  {scores}"
        _out(line, subsequent="    ")  # wrapped scores stay under the review, not under the dates
        _out(f"{e.relpath}  rubric {r.rubric_id} v{r.rubric_version}  task commit {r.task.commit[:12]}",
             indent="    ", subsequent="      ")
        if r.overrides and not e.hidden:
            _out("overrides: " + "; ".join(f"{o.rule} ({o.reason})" for o in r.overrides), indent="    ",
                 subsequent="      ")
        if e.outdated:
            _out("changed since: " + ", ".join(str(c) for c in e.changes), indent="    ", subsequent="      ")
    return 0


def _print_diff(diff) -> None:
    a, b = diff.before, diff.after
    _out(f"{a.id} ({a.auditor}, {a.verdict}) -> {b.id} ({b.auditor}, {b.verdict})", subsequent="  ")
    if diff.verdict_changed:
        _out(f"  verdict: {a.verdict} -> {b.verdict}", subsequent="    ")
    if (a.rubric_id, a.rubric_version) != (b.rubric_id, b.rubric_version):
        _out(f"  rubric: {a.rubric_id} v{a.rubric_version} -> {b.rubric_id} v{b.rubric_version}", subsequent="    ")
    for c in diff.criteria:
        if not c.score_changed and not c.comment_changed:
            _out(f"  {c.title}: {_fmt_score(c.after)} (unchanged)", subsequent="    ")
            continue
        delta = f" ({c.delta:+g})" if c.delta is not None and c.delta != 0 else ""
        note = "  comment changed" if c.comment_changed else ""
        _out(f"  {c.title}: {_fmt_score(c.before)} -> {_fmt_score(c.after)}{delta}{note}", subsequent="    ")
    if diff.files:
        _out("  judged files differ: " + ", ".join(str(f) for f in diff.files), subsequent="    ")
    if diff.comments_added or diff.comments_removed:
        _out(f"  line comments: +{len(diff.comments_added)} -{len(diff.comments_removed)}")
        for c in diff.comments_added:
            _out(f"    + {c.location}: {c.text.strip().splitlines()[0] if c.text.strip() else ''}", subsequent="      ")
        for c in diff.comments_removed:
            _out(f"    - {c.location}: {c.text.strip().splitlines()[0] if c.text.strip() else ''}", subsequent="      ")


def _agreement(args: argparse.Namespace) -> int:
    from nkitui.review import agreement_under

    report = agreement_under(args.task_dir)
    for p in report.problems:
        _err(str(p))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    _out(f"inter-rater agreement (Krippendorff's alpha) over {report.reviews} review(s) under {args.task_dir}",
         subsequent="  ")
    if not report.criteria:
        _out("  no scored reviews found")
    for c in report.criteria:
        alpha = "n/a" if c.alpha is None else f"{c.alpha:.3f}"
        note = f"  ({c.note})" if c.note else ""
        _out(f"  {c.rubric_id} / {c.title} [{c.level}]: alpha={alpha}  auditors={c.raters} shared versions={c.units} "
             f"ratings={c.ratings}{note}", subsequent="    ")
    return 0

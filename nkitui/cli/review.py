"""`nkitui review template|validate|submit`: write a review in an editor and commit it, headless.

    nkitui review template TASK_DIR > draft.toml      # fill it in
    nkitui review validate TASK_DIR --from draft.toml
    nkitui review submit TASK_DIR --from draft.toml [--auditor NAME] [--run RESULT.json|RUN_ID ...]

Exit codes: 0 done, 2 the task, the draft or the repository state is not acceptable (every
problem is printed with the way out).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("review", help="print a review template, validate a filled one, or submit it as a commit")
    rsub = p.add_subparsers(dest="review_command", metavar="ACTION", required=True)

    t = rsub.add_parser("template", help="print a review draft (TOML) for the task's rubric, to fill in an editor")
    t.add_argument("task_dir", type=Path, metavar="TASK_DIR", help="the task folder (or its task.toml)")
    t.add_argument("--out", type=Path, help="write the template to this file instead of standard output")
    t.add_argument("--saved", action="store_true", help="fill in the draft autosaved by the workstation, if any")
    t.set_defaults(func=_template)

    v = rsub.add_parser("validate", help="check a filled draft against the task's rubric without committing")
    v.add_argument("task_dir", type=Path, metavar="TASK_DIR", help="the task folder (or its task.toml)")
    v.add_argument("--from", dest="draft", type=Path, required=True, metavar="FILE.toml",
                   help="the filled-in draft (from `nkitui review template`)")
    v.add_argument("--json", action="store_true", help="print the problems as JSON")
    v.set_defaults(func=_validate)

    s = rsub.add_parser("submit", help="validate a filled draft and commit it as a review (same path as the UI)")
    s.add_argument("task_dir", type=Path, metavar="TASK_DIR", help="the task folder (or its task.toml)")
    s.add_argument("--from", dest="draft", type=Path, required=True, metavar="FILE.toml",
                   help="the filled-in draft to validate and commit as a review")
    s.add_argument("--auditor", help="auditor name (default: git config user.name, else the OS user)")
    s.add_argument("--run", action="append", default=[], metavar="RESULT.json|RUN_ID",
                   help="a run result this review relies on (a JSON file, or the id of a run already stored); repeatable")
    s.add_argument("--initial-commit", action="store_true",
                   help="if the repository has no commits yet, first commit the task's files")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=_submit)


def _out(text: str) -> None:
    from nkitui.cli.textout import print_wrapped

    print_wrapped(text, subsequent="    ")


def _err(text: str) -> None:
    from nkitui.cli.textout import print_wrapped

    print_wrapped(text, subsequent="    ", file=sys.stderr)


def _print_problems(problems, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"ok": not any(p.severity == "error" for p in problems),
                          "problems": [p.to_dict() for p in problems]}, indent=2))
        return
    for p in problems:
        _err(str(p))  # "file [field]: severity: message — fix: ..."


def _load(task_dir: Path):
    """(task, rubric) or an exit code after printing why not."""
    from nkitui.review import RubricError, rubric_for_task
    from nkitui.task import TaskError, load_task

    try:
        task = load_task(task_dir)
        return task, rubric_for_task(task)
    except (TaskError, RubricError) as exc:
        _print_problems(exc.problems)
        return None


def _read_draft(path: Path):
    from nkitui.review import Draft, RecordError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _err(f"error: {path}: cannot read the draft: {exc} — fix: pass a file written by `nkitui review template`")
        return None
    try:
        return Draft.from_toml(text, str(path))
    except RecordError as exc:
        _print_problems(exc.problems)
        return None


def _template(args: argparse.Namespace) -> int:
    from nkitui.review import DraftStore, RecordError, render_template

    loaded = _load(args.task_dir)
    if loaded is None:
        return 2
    task, rubric = loaded
    draft = None
    if args.saved:
        try:
            draft = DraftStore().load(task.root, task.id)
        except RecordError as exc:
            _print_problems(exc.problems)
            return 2
        if draft is None:
            _err(f"note: no autosaved draft for task {task.id}; printing an empty template")
    from nkitui.cli.textout import given_width

    # printed to a terminal: as wide as it is; into a file or a pipe: the editor's usual 98 columns
    width = min(98, given_width(sys.stdout) or 98) if args.out is None else 98
    text = render_template(rubric, task.id, draft, width=width)
    if args.out is not None:
        if args.out.exists():
            _err(f"error: {args.out} already exists — fix: choose another file name or delete it first")
            return 2
        try:
            args.out.write_text(text, encoding="utf-8")
        except OSError as exc:
            _err(f"error: cannot write {args.out}: {exc.strerror or exc} — fix: choose a file in an existing, writable folder")
            return 2
        _err(f"wrote {args.out}; fill it in, then: nkitui review submit {args.task_dir} --from {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from nkitui.review import validate_draft

    loaded = _load(args.task_dir)
    if loaded is None:
        return 2
    task, rubric = loaded
    draft = _read_draft(args.draft)
    if draft is None:
        return 2
    problems = validate_draft(draft, rubric, task.root, task.id, display=str(args.draft))
    _print_problems(problems, args.json)
    if any(p.severity == "error" for p in problems):
        return 2
    if not args.json:
        _out(f"ok: {args.draft} is ready to submit ({rubric.id} v{rubric.version})")
    return 0


def _submit(args: argparse.Namespace) -> int:
    from nkitui.review import DraftInvalid, ReviewError, submit_review
    from nkitui.task import TaskError

    draft = _read_draft(args.draft)
    if draft is None:
        return 2
    run_files = []
    for item in args.run:
        if Path(item).is_file():
            run_files.append(Path(item))
        else:
            try:
                draft.cite_run(item)
            except ValueError:
                _err(f"error: --run {item!r} is neither a file nor a run id — fix: pass a run result JSON file or a run id")
                return 2
    try:
        result = submit_review(args.task_dir, draft, auditor=args.auditor, run_files=run_files,
                               display=str(args.draft),
                               initial_commit=args.initial_commit)
    except TaskError as exc:
        _print_problems(exc.problems)
        return 2
    except DraftInvalid as exc:
        _print_problems(exc.problems)
        _err(f"not submitted: fix {args.draft} and run the command again")
        return 2
    except ReviewError as exc:
        _print_problems(exc.problems)
        _err("not submitted: nothing was written or committed")
        return 2
    _print_problems(list(result.warnings))
    if args.json:
        print(json.dumps({"commit": result.commit, "record": str(result.record_path), "markdown": str(result.markdown_path),
                          "runs": [str(p) for p in result.run_paths], "review": result.record.to_dict()}, indent=2))
    else:
        rel = result.record.relpath
        _out(f"committed {result.short_commit}: {rel} (+ .md{', ' + str(len(result.run_paths)) + ' run result(s)' if result.run_paths else ''})")
    return 0

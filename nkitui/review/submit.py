"""Submit a draft: validate it, write the record, its Markdown and the cited runs, commit only those.

The UI and `nkitui review submit` both call `submit_review`; there is no other path to a review.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import git

from nkitui import __version__
from nkitui.common.atomic import atomic_write_text
from nkitui.review import gitstore
from nkitui.review.draft import Draft, DraftStore
from nkitui.review.errors import DraftInvalid, SubmitRefused
from nkitui.review.record import ReviewRecord, TaskPin, new_record_id, utc_now
from nkitui.review.render import render_markdown
from nkitui.review.rubric import Rubric, rubric_for_task
from nkitui.review.runs import RunLookup, executor_store_lookup, resolve_runs, run_relpath
from nkitui.review.validate import validate_draft
from nkitui.task.model import Task
from nkitui.task.problems import Problem

TOOL_VERSION = f"nkitui {__version__}"


@dataclass(frozen=True)
class SubmitResult:
    record: ReviewRecord
    commit: str  # sha of the review commit
    record_path: Path
    markdown_path: Path
    run_paths: tuple[Path, ...]
    warnings: tuple[Problem, ...] = ()

    @property
    def short_commit(self) -> str:
        return self.commit[:12]


def _load_task(task: Task | str | Path) -> Task:
    if isinstance(task, (str, Path)):
        from nkitui.task import load_task

        gitstore.refuse_bare(Path(task))
        return load_task(task)
    return task


def build_record(task: Task, draft: Draft, rubric: Rubric, *, auditor: str, commit: str, task_path: str,
                 dirty: list[str], now: dt.datetime, runs: list[str] | None = None) -> ReviewRecord:
    """The record a draft becomes (scores in rubric order, unscored optional criteria kept only if commented)."""
    scores = {}
    for cid in [*rubric.criterion_ids, *[c for c in draft.scores if rubric.criterion(c) is None]]:
        entry = draft.scores.get(cid)
        if entry is None or (entry.value is None and not entry.comment.strip()):
            continue
        crit = rubric.criterion(cid)
        value = crit.scale.normalize(entry.value) if crit and entry.value is not None else entry.value
        scores[cid] = type(entry)(value=value, comment=entry.comment)
    cited = [*draft.runs, *[e.ref for e in draft.evidence if e.kind == "run"], *(runs or [])]
    return ReviewRecord(
        id=new_record_id(now), auditor=auditor, submitted_at=now, tool_version=TOOL_VERSION,
        task=TaskPin(id=task.id, commit=commit, path=task_path, files=task.file_hashes(), dirty=dirty),
        rubric_id=rubric.id, rubric_version=rubric.version, verdict=draft.verdict or "", summary=draft.summary,
        scores=scores, comments=list(draft.comments), evidence=list(draft.evidence), runs=list(dict.fromkeys(cited)),
        overrides=[o for o in draft.overrides if rubric.rule(o.rule) is not None])


def commit_message(record: ReviewRecord) -> str:
    lines = [f"review({record.task.id}): {record.verdict} by {record.auditor} [{record.rubric_id} v{record.rubric_version}]", ""]
    lines += [f"{cid}: {s.value if s.value is not None else '-'}" for cid, s in record.scores.items()]
    lines += ["", f"Review-Id: {record.id}", f"Task-Commit: {record.task.commit}"]
    lines += [f"Cites-Run: {r}" for r in record.runs]
    return "\n".join(lines) + "\n"


def submit_review(task: Task | str | Path, draft: Draft, *, auditor: str | None = None, run_files: Iterable[Path] = (),
                  run_lookup: RunLookup | None = None, display: str = "draft", initial_commit: bool = False,
                  draft_store: DraftStore | None = None, now: dt.datetime | None = None) -> SubmitResult:
    """Validate `draft` against the task's rubric and commit it as a review.

    `task` is a Task or a task folder. Raises DraftInvalid (problems in the draft), SubmitRefused
    (repository state, runs, ignore rules; `.kind` says which, each problem says the way out) or
    TaskError (the task itself is broken). With `initial_commit`, a repository without commits
    first gets one holding the task's files. Cited runs are found in `run_files`, in reviews/runs/,
    then through `run_lookup` (default: the executor's run store). With `draft_store`, the saved
    draft is discarded once the review is committed.
    """
    if auditor is not None:
        gitstore.check_auditor_name(auditor)  # an explicit empty or path-like name is refused, not replaced
    task = _load_task(task)
    rubric = rubric_for_task(task)
    problems = validate_draft(draft, rubric, task_root=task.root, task_id=task.id, display=display)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise DraftInvalid(problems)
    warnings = [p for p in problems if p.severity == "warning"]

    repo = gitstore.open_repo(task.root)
    if initial_commit and not repo.head.is_valid():
        gitstore.make_initial_commit(task.root, auditor or draft.auditor)
    gitstore.preflight(repo)
    who = gitstore.resolve_auditor(repo, auditor or draft.auditor)

    work_tree = Path(repo.working_tree_dir or ".").resolve()
    task_root = Path(task.root).resolve()
    task_rel = task_root.relative_to(work_tree).as_posix()
    prefix = "" if task_rel == "." else task_rel + "/"
    if run_lookup is None:
        run_lookup = executor_store_lookup(task.id)
    runs = resolve_runs(task_root, task.id, [*draft.runs, *[e.ref for e in draft.evidence if e.kind == "run"]],
                        files=run_files, lookup=run_lookup)

    head = repo.head.commit.hexsha
    dirty = [p[len(prefix):] for p in gitstore.changed_since_head(repo, [prefix + f for f in task.file_hashes()])]
    record = build_record(task, draft, rubric, auditor=who.slug, commit=head, task_path=task_rel,
                          dirty=dirty, now=now or utc_now(), runs=[r.run_id for r in runs])
    if dirty:
        warnings.append(Problem(display, "task", f"judged files have uncommitted changes: {', '.join(dirty)}",
                                "the record pins their sha256; commit them so others can see what was judged", "warning"))

    record_rel = record.relpath
    md_rel = record_rel[: -len(".toml")] + ".md"
    run_rels = [run_relpath(r.run_id) for r in runs]
    gitstore.refuse_links(task_root, [record_rel, md_rel, *run_rels])
    gitstore.refuse_ignored(repo, [prefix + p for p in (record_rel, md_rel, *run_rels)])

    record_path, md_path = task_root / record_rel, task_root / md_rel
    if record_path.exists() or md_path.exists():
        raise SubmitRefused("id_collision", [Problem(record_rel, "", "a review file with this id already exists",
                                                   "submit again (a new id is drawn each time)")])
    created: list[Path] = []
    run_paths: list[Path] = []
    try:
        _write_shared(record_path, record.to_toml())
        created.append(record_path)
        _write_shared(md_path, render_markdown(record, rubric))
        created.append(md_path)
        for run, rel in zip(runs, run_rels):
            path = task_root / rel
            run_paths.append(path)
            if path.exists() and path.read_text(encoding="utf-8") == run.canonical_text():
                continue
            if not path.exists():
                created.append(path)
            _write_shared(path, run.canonical_text())
        outcome = gitstore.commit_only(repo, [prefix + p for p in (record_rel, md_rel, *run_rels)],
                                   commit_message(record), who.author, who.committer)
    except git.GitCommandError as exc:
        _remove(created)
        detail = (exc.stderr or str(exc)).strip().replace("stderr: ", "")
        raise SubmitRefused("git_failed", [Problem(str(work_tree), "", f"git failed: {detail}",
                                                   "fix the repository problem git reports, then submit again "
                                                   "(nothing was committed; the draft is kept)")]) from None
    except BaseException:
        _remove(created)
        raise
    if outcome.index_note:
        warnings.append(Problem(str(work_tree), "", outcome.index_note, "run the git add shown", "warning"))
    if draft_store is not None:
        draft_store.discard(task_root, task.id)
    return SubmitResult(record=record, commit=outcome.sha, record_path=record_path, markdown_path=md_path,
                        run_paths=tuple(run_paths), warnings=tuple(warnings))


def _write_shared(path: Path, text: str) -> None:
    """Atomic write with the mode git gives a checked-out file, whatever the umask."""
    atomic_write_text(path, text, mode=0o644)


def _remove(paths: list[Path]) -> None:
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass

"""Rubrics, review drafts, review records committed to the task's git repository, history, agreement.

The UI and the command line use the same calls:

    rubric = rubric_for_task(task)                     # Rubric: criteria, guidance, scales, weights
    store = DraftStore()                               # drafts in the XDG state directory
    offer = offer_restore(store, task.root, task.id)   # a draft newer than the last submission?
    draft = offer.draft if offer else Draft.new(task.id, rubric)
    saver = Autosaver(store, task.root)                # saver.changed(draft) after each edit; saver.close()
    problems = validate_draft(draft, rubric, task.root, task.id)
    result = submit_review(task, draft, draft_store=store)   # SubmitResult: record, commit sha, paths
    history = task_history(task.root, blind=True, viewer="alice")

See docs/review-format.md for the file formats and the whole API.
"""

from __future__ import annotations

from nkitui.review.agreement import AgreementReport, CriterionAgreement, agreement_under, compute_agreement
from nkitui.review.draft import Autosaver, Draft, DraftStore, RestoreOffer, offer_restore
from nkitui.review.errors import DraftInvalid, RecordError, ReviewError, RubricError, SubmitRefused
from nkitui.review.export import ExportResult, collect, export
from nkitui.review.gitstore import current_auditor
from nkitui.review.history import (
    CriterionDiff,
    FileChange,
    HistoryEntry,
    ReviewDiff,
    TaskHistory,
    diff_reviews,
    file_changes,
    task_history,
)
from nkitui.review.record import (
    EVIDENCE_KINDS,
    Evidence,
    LineComment,
    ReviewRecord,
    RuleOverride,
    Score,
    TaskPin,
    auditor_slug,
    load_record,
    parse_record,
)
from nkitui.review.render import render_markdown
from nkitui.review.rubric import (
    Criterion,
    Rubric,
    RuleViolation,
    Scale,
    VerdictRule,
    builtin_rubric_ids,
    load_builtin_rubric,
    load_rubric,
    parse_rubric,
    rubric_for_task,
)
from nkitui.review.scan import LoadedReview, ScanResult, scan_task, scan_tree
from nkitui.review.submit import SubmitResult, submit_review
from nkitui.review.template import render_template
from nkitui.review.validate import validate_draft

__all__ = [
    "EVIDENCE_KINDS", "AgreementReport", "Autosaver", "Criterion", "CriterionAgreement", "CriterionDiff", "Draft",
    "DraftInvalid", "DraftStore", "Evidence", "ExportResult", "FileChange", "HistoryEntry", "LineComment",
    "LoadedReview", "RecordError", "RestoreOffer", "ReviewDiff", "ReviewError", "ReviewRecord", "Rubric",
    "RuleOverride", "RuleViolation", "RubricError", "Scale", "ScanResult", "Score", "SubmitRefused", "SubmitResult", "TaskHistory", "TaskPin",
    "VerdictRule", "agreement_under", "auditor_slug", "current_auditor", "builtin_rubric_ids", "collect", "compute_agreement", "diff_reviews",
    "export", "file_changes", "load_builtin_rubric", "load_record", "load_rubric", "offer_restore", "parse_record",
    "parse_rubric", "render_markdown", "render_template", "rubric_for_task", "scan_task", "scan_tree",
    "submit_review", "task_history", "validate_draft",
]

"""Errors raised by the review layer. Each carries Problems that name the file, the field and the fix."""

from __future__ import annotations

from nkitui.task.problems import Problem


class ReviewError(Exception):
    """Base class: something about a rubric, a record, a draft or a submission cannot be used."""

    def __init__(self, problems: list[Problem], head: str = "review problem"):
        self.problems = list(problems)
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


class RubricError(ReviewError):
    def __init__(self, problems: list[Problem]):
        super().__init__(problems, "the rubric cannot be used")


class RecordError(ReviewError):
    """A review record or a draft file that cannot be parsed (corrupt, hand-edited, or from a newer nkitui)."""

    def __init__(self, problems: list[Problem]):
        super().__init__(problems, "the review file cannot be read")


class DraftInvalid(ReviewError):
    """A filled draft that does not satisfy its rubric (missing required scores, bad values...)."""

    def __init__(self, problems: list[Problem]):
        super().__init__(problems, "the review draft is not ready to submit")


class SubmitRefused(ReviewError):
    """The repository is in a state where a review cannot be committed; `kind` says which one.

    kinds: not_a_repo, bare_repo, no_commits, has_commits, detached_head, index_locked,
    operation_in_progress, ignored_path, run_missing, run_conflict, run_invalid, bad_auditor,
    no_identity, id_collision, git_failed, reviews_link.
    """

    def __init__(self, kind: str, problems: list[Problem]):
        self.kind = kind
        super().__init__(problems, "the review cannot be committed")

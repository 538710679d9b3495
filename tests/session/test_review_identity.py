"""The session's review, auditor and repository: evidence cites runs, a review is committed as the
auditor the session knows (config, git, or the OS account flagged), a folder outside git is said and
made a repository."""

from __future__ import annotations

import getpass
import shutil
import tomllib

import git
import pytest

from nkitui.session import events as ev
from nkitui.session.identity import IdentityError, parse_auditor, resolve_identity
from tests.app.helpers import FIXTURES, recorded_result, store_run
from tests.session.conftest import open_session


def fill(draft) -> None:
    for cid in draft.scores:
        draft.set_score(cid, 4, "fine")
    draft.verdict = "accept"


def test_evidence_from_a_run_cites_it_and_the_same_link_is_kept_once(task_dir):
    from nkitui.review import Evidence

    run = store_run(recorded_result(), "20260107T090000Z-aaaaaa")
    session, seen = open_session(task_dir, backend="emulator")
    session.review.load()
    link = Evidence(kind="metric", ref=f"{run.run_id}:y.max_abs=2.4e-07", excerpt="y max abs", criterion="numerical_correctness")
    assert session.review.attach(link, run.run_id)
    assert not session.review.attach(link, run.run_id)
    assert session.review.draft.runs == [run.run_id] and session.review.draft.evidence == [link]
    assert len(seen.of(ev.ReviewChecked)) == 2  # on load, then after the one real edit


def test_a_review_is_committed_as_the_configured_auditor_with_their_e_mail(task_dir):
    session, seen = open_session(task_dir, backend="emulator", auditor="Grace Hopper <grace@example.org>")
    assert session.identity.source == "config" and not session.identity.needs_asking
    session.review.load()
    fill(session.review.draft)
    session.review.edited()
    result = session.review.submit()
    assert result is not None, seen.of(ev.ReviewRefused)
    assert result.record.relpath.startswith("reviews/grace-hopper/")
    commit = git.Repo(task_dir).head.commit
    assert (commit.author.name, commit.author.email) == ("Grace Hopper", "grace@example.org")
    submitted = seen.of(ev.ReviewSubmitted)[0]
    assert submitted.draft is session.review.draft and submitted.draft.verdict is None  # the next starts empty
    assert seen.of(ev.ReviewHistoryLoaded)[-1].entries  # the history now holds it


def test_a_refused_review_is_an_event_and_keeps_the_draft(task_dir):
    session, seen = open_session(task_dir, backend="emulator")
    session.review.load()
    draft = session.review.draft
    assert session.review.submit() is None  # nothing scored
    refused = seen.of(ev.ReviewRefused)[0]
    assert refused.error.problems and session.review.draft is draft


def test_the_auditor_comes_from_the_config_then_git_then_the_os_account(task_dir, tmp_path):
    assert resolve_identity(task_dir, "Grace Hopper <grace@example.org>").source == "config"
    from_git = resolve_identity(task_dir)
    assert (from_git.name, from_git.email, from_git.source) == ("Ada Auditor", "ada@example.com", "git")
    assert from_git.submit_as is None and not from_git.needs_asking  # submission reads git itself
    bare = tmp_path / "plain"
    bare.mkdir()
    system = resolve_identity(bare)
    assert system.source == "system" and system.name == getpass.getuser() and system.needs_asking
    assert "no git identity" in system.warning or "shared account" in system.warning


@pytest.mark.parametrize("name", ["root", "ubuntu", "ec2-user"])
def test_shared_accounts_are_flagged_even_from_git(task_dir, name):
    repo = git.Repo(task_dir)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", name)
        cw.set_value("user", "email", f"{name}@ip-10-0-0-1.ec2.internal")
    identity = resolve_identity(task_dir)
    assert identity.source == "git" and identity.shared and identity.needs_asking
    assert "shared account" in identity.warning


def test_an_auditor_name_must_make_a_folder_name():
    assert parse_auditor("Zoë Lund").slug == "zoe-lund"
    assert parse_auditor("Ada <ada@example.com>").email == "ada@example.com"
    with pytest.raises(IdentityError, match="Latin letters"):
        parse_auditor("张伟")
    with pytest.raises(IdentityError, match="give a name"):
        parse_auditor("   ")


def test_set_auditor_holds_for_the_session_and_is_told(task_dir):
    session, seen = open_session(task_dir, backend="emulator")
    identity = session.set_auditor("Grace Hopper <grace@example.org>")
    assert session.identity is identity and seen.of(ev.AuditorResolved)[-1].identity is identity
    assert identity.submit_as == "Grace Hopper <grace@example.org>"


def test_a_folder_outside_git_is_said_on_opening_and_can_be_made_a_repository(tmp_path):
    folder = tmp_path / "scale_rows"
    shutil.copytree(FIXTURES / "scale_rows", folder)
    session, seen = open_session(folder, backend="emulator", auditor="Grace Hopper <grace@example.org>")
    session.open()
    state = seen.of(ev.RepositoryChecked)[0].state
    assert state.kind == "not_a_repo" and state.can_prepare and "not in a git repository" in state.message
    assert seen.of(ev.ReviewLoaded)  # the review can still be written meanwhile
    ready = session.prepare_repository()
    assert ready.ready and seen.of(ev.RepositoryChecked)[-1].state is ready
    repo = git.Repo(folder)
    assert "task.toml" in repo.head.commit.stats.files and not repo.is_dirty(untracked_files=True)
    assert repo.head.commit.author.email == "grace@example.org"
    fill(session.review.draft)
    assert session.review.submit() is not None  # the review can now be committed


def test_a_repository_without_a_commit_is_offered_its_first_commit(tmp_path):
    folder = tmp_path / "scale_rows"
    shutil.copytree(FIXTURES / "scale_rows", folder)
    git.Repo.init(folder).close()
    session, _ = open_session(folder, backend="emulator", auditor="Grace Hopper <grace@example.org>")
    state = session.check_repository()
    assert state.kind == "no_commits" and "first commit" in state.offer
    assert session.prepare_repository().ready
    assert tomllib.loads((folder / "task.toml").read_text())["id"] == "scale_rows"

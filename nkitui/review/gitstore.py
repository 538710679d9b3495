"""The task repository as the home of review files (GitPython).

Preflight refuses, with the way out, every repository state in which a review commit would be
wrong or surprising. `commit_only` commits exactly the given paths on top of HEAD through a
temporary index, so whatever else the auditor has staged or changed stays exactly as it was.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from nkitui.common import gitsafe
from nkitui.review.errors import SubmitRefused
from nkitui.review.record import auditor_slug
from nkitui.task.problems import Problem

_INVALID_EMAIL_DOMAIN = "nkitui.invalid"  # RFC 2606: never a real address


@dataclass(frozen=True)
class Identity:
    name: str
    email: str

    def env(self, role: str) -> dict[str, str]:
        return {f"GIT_{role}_NAME": self.name, f"GIT_{role}_EMAIL": self.email}


@dataclass(frozen=True)
class Auditor:
    slug: str  # the folder name under reviews/
    author: Identity  # who wrote the review (commit author)
    committer: Identity  # who committed it (git config identity when there is one)


def _refuse(kind: str, where: str, message: str, fix: str) -> SubmitRefused:
    return SubmitRefused(kind, [Problem(where, "", message, fix)])


def open_repo(task_root: Path) -> git.Repo:
    """The repository holding the task; refuses a folder outside git and a bare repository."""
    root = Path(task_root).resolve()
    try:
        repo = gitsafe.open_repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise _refuse("not_a_repo", str(root), "the task folder is not inside a git repository",
                      f"make it one: git -C {root} init (then commit the task files), or open a clone of the task repository") from None
    if repo.bare or repo.working_tree_dir is None:
        raise _refuse("bare_repo", str(root), "the task is in a bare repository (no working tree to write reviews into)",
                      f"clone it and review in the clone: git clone {repo.git_dir} <folder>")
    return repo


def refuse_bare(path: Path) -> None:
    """Refuse a folder that is (inside) a bare repository before anything tries to read a task there:
    a bare repository has no working tree, so "no task.toml here" would hide the real problem."""
    try:
        repo = gitsafe.open_repo(Path(path).resolve(), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return
    if repo.bare or repo.working_tree_dir is None:
        raise _refuse("bare_repo", str(Path(path)), "the task is in a bare repository (no working tree to write reviews into)",
                      f"clone it and review in the clone: git clone {repo.git_dir} <folder>")


def operation_in_progress(repo: git.Repo) -> tuple[str, str] | None:
    """(what, how to finish it) when a merge, rebase, cherry-pick or revert is under way."""
    gd = Path(repo.git_dir)
    if (gd / "rebase-merge").exists() or (gd / "rebase-apply").exists():
        return "a rebase", "finish it with `git rebase --continue` or abandon it with `git rebase --abort`"
    if (gd / "MERGE_HEAD").exists():
        return "a merge", "finish it with `git merge --continue` (after resolving conflicts) or `git merge --abort`"
    if (gd / "CHERRY_PICK_HEAD").exists():
        return "a cherry-pick", "finish it with `git cherry-pick --continue` or `git cherry-pick --abort`"
    if (gd / "REVERT_HEAD").exists():
        return "a revert", "finish it with `git revert --continue` or `git revert --abort`"
    return None


def preflight(repo: git.Repo) -> None:
    """Refuse repository states in which a review cannot be committed: no commits yet, another git
    process holding the index, a merge/rebase/cherry-pick/revert in progress (checked before the
    detached HEAD a rebase causes, so the message names the rebase), or a detached HEAD."""
    root = str(repo.working_tree_dir or repo.git_dir)
    if not repo.head.is_valid():
        raise _refuse("no_commits", root, "the repository has no commits yet, so a review has no task version to point at",
                      "commit the task first (git add . && git commit -m 'task'), or let nkitui make that first commit "
                      "(--initial-commit on the command line, or accept the offer in the UI)")
    lock = Path(repo.git_dir) / "index.lock"
    if lock.exists():
        raise _refuse("index_locked", str(lock), "another git process is using the repository (index.lock exists)",
                      f"wait for it to finish; if no git process is running, delete {lock}")
    busy = operation_in_progress(repo)
    if busy is not None:
        what, fix = busy
        raise _refuse("operation_in_progress", root, f"{what} is in progress; committing now would mix the review into it", fix)
    if repo.head.is_detached:
        raise _refuse("detached_head", root, f"HEAD is detached at {repo.head.commit.hexsha[:12]}: a review commit would belong to no branch",
                      "check out a branch first: git switch <branch>, or git switch -c reviews to keep this commit")


def ignored_paths(repo: git.Repo, rel_paths: list[str]) -> dict[str, str]:
    """Which of `rel_paths` (relative to the work tree) git would refuse to add: path -> the rule ignoring it."""
    if not rel_paths:
        return {}
    try:
        out = repo.git.check_ignore("--", *rel_paths)
    except git.GitCommandError as exc:
        if exc.status == 1:  # nothing ignored
            return {}
        raise
    ignored = [line for line in out.splitlines() if line]
    rules: dict[str, str] = {}
    verbose = repo.git.check_ignore("-v", "--", *ignored)
    for line in verbose.splitlines():
        source, _, path = line.partition("\t")
        rules[path] = source  # "<file>:<line>:<pattern>"
    return {p: rules.get(p, "an ignore rule") for p in ignored}


def refuse_links(task_root: Path, rel_paths: list[str]) -> None:
    """Refuse review paths that go through a link: `reviews` (or reviews/<auditor>, reviews/runs, a
    file) linked elsewhere would make nkitui write outside the repository, or commit a link."""
    root = Path(task_root)
    problems: list[Problem] = []
    seen: set[Path] = set()
    for rel in rel_paths:
        parts = Path(rel).parts
        for i in range(1, len(parts) + 1):
            path = root.joinpath(*parts[:i])
            if path in seen:
                continue
            seen.add(path)
            if path.is_symlink():
                shown = Path(*parts[:i]).as_posix()
                problems.append(Problem(str(path), "", f"{shown} is a link (to {os.readlink(path)}); reviews are written "
                                        "only into real folders of the task repository",
                                        f"replace the link with a real folder: rm {path} && mkdir {path} (move any "
                                        "reviews from the link's target into it first)"))
            elif i < len(parts) and path.exists() and not path.is_dir():
                problems.append(Problem(str(path), "", f"{Path(*parts[:i]).as_posix()} is a file, not a folder",
                                        f"move it away: mv {path} {path}.bak"))
    if problems:
        raise SubmitRefused("reviews_link", problems)


def refuse_ignored(repo: git.Repo, rel_paths: list[str]) -> None:
    ignored = ignored_paths(repo, rel_paths)
    if not ignored:
        return
    problems = []
    for path, rule in ignored.items():
        src, _, rest = rule.partition(":")
        lineno, _, pattern = rest.partition(":")
        reviews_dir = path[: path.index("reviews/") + len("reviews")] if "reviews/" in path else path
        fix = (f"remove or narrow the pattern {pattern!r} at {src}:{lineno}; a pattern that ignores files inside "
               f"{reviews_dir}/ can instead be countered by a line `!{reviews_dir}/**` after it"
               if pattern else "change the ignore rules so review files can be committed")
        problems.append(Problem(path, "", f"the review path is ignored by git ({rule})", fix))
    raise SubmitRefused("ignored_path", problems)


# -- identity ----------------------------------------------------------------------------------

def git_identity(repo: git.Repo) -> tuple[str | None, str | None]:
    """user.name / user.email as git would use them for the author (environment first, then config)."""
    reader = repo.config_reader()
    name = str(os.environ.get("GIT_AUTHOR_NAME") or reader.get_value("user", "name", default="") or "").strip()
    email = str(os.environ.get("GIT_AUTHOR_EMAIL") or reader.get_value("user", "email", default="") or "").strip()
    return name or None, email or None


_NAME_AND_EMAIL = re.compile(r"\s*(?P<name>[^<>]*?)\s*<(?P<email>[^<>\s@]+@[^<>\s]+)>\s*")


def split_auditor(auditor: str) -> tuple[str, str | None]:
    """"Ada Lovelace <ada@example.com>" -> ("Ada Lovelace", "ada@example.com"); a plain name keeps no e-mail."""
    m = _NAME_AND_EMAIL.fullmatch(auditor)
    if m is None:
        return auditor.strip(), None
    return (m.group("name") or m.group("email")), m.group("email")


RESERVED_AUDITORS = {"runs": "the run results that reviews cite"}


def check_auditor_name(auditor: str) -> None:
    """Refuse an auditor name that is empty, names a reserved folder, or looks like a path (it
    becomes the folder reviews/<auditor>/: `../x` or `a/b` must not quietly become `x` or `a-b`)."""
    text = auditor.strip()
    if not text:
        raise _refuse("bad_auditor", "--auditor", "the auditor name is empty",
                      "pass a name such as --auditor alice, or leave --auditor out to use git config user.name")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise _refuse("bad_auditor", "--auditor", f"{auditor!r} holds control characters",
                      "pass a plain name such as --auditor alice")
    if "/" in text or "\\" in text or text.startswith((".", "~")):
        raise _refuse("bad_auditor", "--auditor", f"{text!r} looks like a path; the name becomes the folder "
                      "reviews/<auditor>/ and may not lead elsewhere", "pass a plain name such as --auditor alice")
    slug = auditor_slug(text)
    if not slug:
        raise _refuse("bad_auditor", "--auditor", f"{auditor!r} has no letters or digits to make a folder name from",
                      "pass a name such as --auditor alice")
    if slug in RESERVED_AUDITORS:
        raise _refuse("bad_auditor", "--auditor", f"{text!r} is reserved: reviews/{slug}/ holds "
                      f"{RESERVED_AUDITORS[slug]}", f"pass another name, e.g. --auditor {slug}-auditor")


def resolve_auditor(repo: git.Repo | None, auditor: str | None = None) -> Auditor:
    """The auditor's folder name and commit identities: --auditor (a name, or "Name <e-mail>"), else
    git config, else the OS user."""
    name, email = git_identity(repo) if repo is not None else (None, None)
    config_slug = auditor_slug(name or "") or auditor_slug(email or "")
    if auditor is not None:
        check_auditor_name(auditor)
        given, given_email = split_auditor(auditor)
        if given != auditor.strip():
            check_auditor_name(given)  # the name part becomes the folder: the same rules
        slug = auditor_slug(given)
        if not slug:
            raise _refuse("bad_auditor", "--auditor", f"{auditor!r} has no letters or digits to make a folder name from",
                          "pass a name such as --auditor alice")
        same_person = slug == config_slug or (email is not None and slug == auditor_slug(email))
        author_email = given_email or (email if (same_person and email) else f"{slug}@{_INVALID_EMAIL_DOMAIN}")
        author = Identity(given, author_email)
    elif name or email:
        slug = config_slug
        if slug in RESERVED_AUDITORS:
            raise _refuse("bad_auditor", "git config", f"git's identity ({name or email}) makes the folder name "
                          f"{slug!r}, which is reserved: reviews/{slug}/ holds {RESERVED_AUDITORS[slug]}",
                          "pass --auditor NAME with another name")
        if not slug:  # e.g. a name and e-mail in a script without Latin letters: no folder name to make
            raise _refuse("bad_auditor", "git config",
                          f"git's identity ({name or ''} <{email or ''}>) has no letters or digits (a-z, 0-9) to make "
                          "the reviews/<auditor> folder name from",
                          "pass --auditor NAME with a Latin-letter name (e.g. --auditor zhang-wei)")
        author = Identity(name or slug, email or f"{slug}@{_INVALID_EMAIL_DOMAIN}")
    else:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = ""
        slug = auditor_slug(user)
        if not slug:
            raise _refuse("no_identity", "git config", "cannot tell who the auditor is (no git identity, no OS user name)",
                          "pass --auditor NAME or set git config user.name")
        author = Identity(user, f"{slug}@{_INVALID_EMAIL_DOMAIN}")
    committer = Identity(name, email) if (name and email) else author
    return Auditor(slug=slug, author=author, committer=committer)


# -- committing --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CommitOutcome:
    sha: str
    index_note: str | None = None  # set when the commit was made but the real index could not learn the paths


def commit_only(repo: git.Repo, rel_paths: list[str], message: str, author: Identity, committer: Identity) -> CommitOutcome:
    """Commit exactly `rel_paths` (relative to the work tree, as they are on disk) on top of HEAD.

    The commit's tree is HEAD's tree plus these paths, built in a temporary index; the branch is
    moved with a compare-and-swap on the old HEAD; the real index then learns only these paths, so
    every other staged or unstaged change is left as it was. Hooks do not run (this is plumbing).
    Raises GitCommandError when nothing was committed; once the branch has moved it never raises.
    """
    head = repo.head.commit.hexsha
    fd, tmp_index = tempfile.mkstemp(prefix="nkitui-index-", dir=repo.git_dir)
    os.close(fd)
    os.unlink(tmp_index)  # read-tree creates it
    env = {"GIT_INDEX_FILE": tmp_index}
    try:
        repo.git.read_tree(head, env=env)
        repo.git.add("--", *rel_paths, env=env)
        tree = repo.git.write_tree(env=env)
    finally:
        for leftover in (tmp_index, tmp_index + ".lock"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
    ident = {**author.env("AUTHOR"), **committer.env("COMMITTER")}
    sha = repo.git.commit_tree(tree, "-p", head, "-m", message, env=ident).strip()
    subject = message.splitlines()[0]
    repo.git.update_ref("-m", f"commit: {subject}", "HEAD", sha, head)
    # The real index: add only our paths (their content is exactly what was committed).
    try:
        repo.git.add("--", *rel_paths)
    except git.GitCommandError as exc:
        detail = (exc.stderr or str(exc)).strip()
        return CommitOutcome(sha, f"committed, but git could not record the review files in the index ({detail}); "
                                  f"`git status` may list them until you run: git add -- {' '.join(rel_paths)}")
    return CommitOutcome(sha)


def make_initial_commit(task_root: Path, auditor: str | None = None) -> str:
    """The first commit of a repository with no commits: the task folder's files (ignore rules apply)."""
    repo = open_repo(task_root)
    if repo.head.is_valid():
        raise _refuse("has_commits", str(task_root), "the repository already has commits", "nothing to do; submit the review")
    who = resolve_auditor(repo, auditor)
    work = Path(repo.working_tree_dir or ".").resolve()
    rel = Path(task_root).resolve().relative_to(work).as_posix() or "."
    ident = {**who.author.env("AUTHOR"), **who.committer.env("COMMITTER")}

    def staged() -> set[str]:
        return set(repo.git.diff("--cached", "--name-only", "-z", "--", rel).split("\0")) - {""}

    before = staged()
    try:
        repo.git.add("--", rel)
        # `-- rel`: only the task folder; anything staged elsewhere stays staged, uncommitted. No hooks run,
        # as for the review commit itself (a failing lint hook must not block the audit).
        repo.git.commit("--no-verify", "-m", "Add the task (first commit, made by nkitui before the first review)",
                        "--", rel, env=ident)
    except git.GitCommandError as exc:
        added = staged() - before
        if added and not repo.head.is_valid():
            repo.git.rm("--cached", "-q", "--", *sorted(added))  # leave the index as it was
        detail = (exc.stderr or str(exc)).strip().replace("stderr: ", "")
        raise _refuse("git_failed", str(work), f"git could not make the first commit: {detail}",
                      f"commit the task yourself (git -C {work} add {rel} && git commit), then submit again") from None
    return repo.head.commit.hexsha


def changed_since_head(repo: git.Repo, rel_paths: list[str]) -> list[str]:
    """Which of `rel_paths` (work-tree relative) differ from HEAD in the working tree or are untracked."""
    if not rel_paths:
        return []
    out = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all", "--", *rel_paths)
    changed = []
    for entry in out.split("\0"):
        if len(entry) > 3:
            changed.append(entry[3:])
    return [p for p in rel_paths if p in changed]


def current_auditor(task_root: Path, auditor: str | None = None) -> str:
    """The auditor slug a submission from `task_root` would use (for blind mode and restore offers)."""
    try:
        repo: git.Repo | None = open_repo(task_root)
    except SubmitRefused:
        repo = None
    return resolve_auditor(repo, auditor).slug

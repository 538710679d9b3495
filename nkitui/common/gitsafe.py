"""Every git command nkitui runs, run without the repository's hooks.

A task repository is not trusted: a kernel that escaped once, or whoever handed over the folder,
may have planted `.git/hooks/pre-commit`, `post-commit` or `reference-transaction` (which git runs
for every ref update, `update-ref` plumbing included), or set `core.fsmonitor` to a command that
`git status` runs. nkitui opens every repository through `open_repo`/`init_repo`: the Repo's git
commands (GitPython's persistent cat-file processes included) carry configuration in the
environment (GIT_CONFIG_COUNT, git 2.31+, appended after any the user set) that points
`core.hooksPath` at /dev/null (no hook can exist there) and turns `core.fsmonitor` off. Environment
configuration outranks every config file, so the repository cannot turn hooks back on.

The repository's configuration can also name filter drivers (`filter.<name>.clean`, `smudge`,
`process`, chosen by a committed `.gitattributes`): git runs them on `status`, `diff` against the
work tree, `add` and `hash-object`. `driver_overrides` reads the names the configuration defines and
empties each command (git then leaves the content as it is), so they run no more than hooks do.
Diffs are asked for with `--no-ext-diff --no-textconv` (the `diff.<name>.command`/`textconv` programs).

GitPython's own commit (`repo.index.commit`) runs hooks itself from .git/hooks: call it with
`skip_hooks=True` (nkitui commits with plumbing instead).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import git

NO_HOOKS = "/dev/null"  # a hooks "folder" in which no hook can ever exist
# ...and no signing program: a repository that asks for signed commits (commit.gpgSign, with gpg.program
# or gpg.ssh.* set to a command) would run it on the first commit nkitui makes (`git commit`), and
# log.showSignature would run it on every `git log`
SAFE_CONFIG: tuple[tuple[str, str], ...] = (("core.hooksPath", NO_HOOKS), ("core.fsmonitor", "false"),
                                            ("commit.gpgSign", "false"), ("tag.gpgSign", "false"),
                                            ("log.showSignature", "false"))


def driver_overrides(cwd: str | Path | None) -> tuple[tuple[str, str], ...]:
    """Settings that switch off every filter driver the configuration seen from `cwd` defines (its
    clean, smudge and process commands emptied, `required` false); () outside a repository."""
    if cwd is None:
        return ()
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_PARAMETERS")}
    try:
        done = subprocess.run(["git", *command_args(), "config", "-z", "--get-regexp", r"^filter\..*\."],
                              cwd=cwd, env=env, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ()
    names: list[str] = []
    for entry in done.stdout.split(b"\0"):
        key = entry.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        if key.startswith("filter.") and key.count(".") >= 2:
            name = key[len("filter."):key.rindex(".")]
            if name not in names:
                names.append(name)
    return tuple((f"filter.{name}.{var}", value) for name in names
                 for var, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")))


def config_env(base: Mapping[str, str] | None = None, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """Environment additions that apply SAFE_CONFIG (and `extra`) to a git command, after the
    GIT_CONFIG_COUNT entries already in `base` (default: os.environ), which are kept."""
    src = os.environ if base is None else base
    try:
        start = max(0, int(src.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        start = 0
    env: dict[str, str] = {}
    settings = (*SAFE_CONFIG, *extra)
    for i, (key, value) in enumerate(settings, start):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(start + len(settings))
    return env


def command_args(extra: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The same settings as `git -c` arguments, for a git started without GitPython (`extra`:
    driver_overrides(cwd) for a command that may read the work tree)."""
    return [arg for key, value in (*SAFE_CONFIG, *extra) for arg in ("-c", f"{key}={value}")]


def harden(repo: Any) -> Any:
    """Make every later git command of this GitPython Repo run without hooks, fsmonitor or filter drivers."""
    where = getattr(repo, "working_tree_dir", None) or getattr(repo, "git_dir", None)
    repo.git.update_environment(**config_env(extra=driver_overrides(where)))
    return repo


def open_repo(path: str | Path, **kwargs: Any) -> git.Repo:
    """git.Repo(path, **kwargs), hardened. Raises what git.Repo raises."""
    import git

    repo: git.Repo = harden(git.Repo(path, **kwargs))
    return repo


def init_repo(path: str | Path, **kwargs: Any) -> Any:
    """git.Repo.init(path, **kwargs), hardened."""
    import git

    return harden(git.Repo.init(path, **kwargs))

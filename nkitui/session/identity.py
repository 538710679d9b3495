"""Who the auditor is: from nkitui's config (asked once and remembered), else git, else the OS account.

A review is committed under `reviews/<auditor>/` with the auditor as its author, so the name
matters: a machine's shared account (root, ubuntu, ec2-user) says nothing about who judged the
task. Such an identity is flagged, and the app asks for a real one.
"""

from __future__ import annotations

import getpass
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nkitui.session.imports import WORKER_IMPORTS

IdentitySource = Literal["config", "git", "system"]

# Accounts that cloud images and containers share between people.
SHARED_ACCOUNTS = frozenset({"root", "ubuntu", "ec2-user", "admin", "azureuser", "centos", "debian", "fedora",
                             "opc", "user"})


class IdentityError(ValueError):
    """An auditor name nkitui cannot use (no letters or digits to name the reviews folder after)."""


@dataclass(frozen=True)
class AuditorIdentity:
    name: str
    email: str | None
    source: IdentitySource  # config: nkitui's config.toml; git: user.name/user.email; system: the OS account

    @property
    def slug(self) -> str:
        """The folder under reviews/ the reviews go to."""
        with WORKER_IMPORTS:
            from nkitui.review.record import auditor_slug

        return auditor_slug(self.name) or auditor_slug(self.email or "")

    @property
    def shared(self) -> bool:
        """A shared account (root, ubuntu, ec2-user, ...): it does not say who the auditor is."""
        local = (self.email or "").split("@", 1)[0].lower()
        return self.slug in SHARED_ACCOUNTS or (self.source == "system" and local in SHARED_ACCOUNTS)

    @property
    def needs_asking(self) -> bool:
        """True when nobody told nkitui who the auditor is (only the OS account is known) or the name is a
        shared account's: the app asks once and remembers the answer."""
        return self.source == "system" or self.shared

    @property
    def display(self) -> str:
        return f"{self.name} <{self.email}>" if self.email else self.name

    @property
    def submit_as(self) -> str | None:
        """What review submission is told (`auditor=`): None lets it read git's identity itself."""
        return None if self.source == "git" else self.display

    @property
    def warning(self) -> str:
        """Why this identity should be changed, in words ("" when it is fine)."""
        if self.shared:
            return (f"reviews would be committed as {self.display!r}, a shared account: set your own name "
                    "(it is remembered in nkitui's config)")
        if self.source == "system":
            return (f"no git identity: reviews would be committed as the OS account {self.name!r}; set your name "
                    "(it is remembered in nkitui's config), or set git config user.name")
        return ""


def parse_auditor(text: str, source: IdentitySource = "config") -> AuditorIdentity:
    """"Ada Lovelace <ada@example.com>" or "Ada Lovelace" as an identity; IdentityError when unusable."""
    with WORKER_IMPORTS:
        from nkitui.review.errors import ReviewError
        from nkitui.review.gitstore import check_auditor_name, split_auditor
        from nkitui.review.record import auditor_slug

    name, email = split_auditor(text)
    if not name.strip():
        raise IdentityError("give a name (and, if you like, an e-mail: Ada Lovelace <ada@example.com>)")
    if not auditor_slug(name):
        raise IdentityError(f"{name!r} has no letters or digits (a-z, 0-9) to name the reviews folder after; "
                            "write it with Latin letters (e.g. Zhang Wei)")
    try:
        check_auditor_name(text)  # the rules a submission applies: no path, no control character, not "runs"
        check_auditor_name(name)
    except ReviewError as exc:
        raise IdentityError(exc.problems[0].message if exc.problems else str(exc)) from None
    return AuditorIdentity(name.strip(), email, source)


def _git_config(key: str, cwd: Path) -> str | None:
    """`git config --get KEY` as git would answer in `cwd` (repository, global and system files)."""
    with WORKER_IMPORTS:
        from nkitui.common import gitsafe

    try:
        out = subprocess.run(["git", *gitsafe.command_args(), "config", "--get", key], cwd=cwd if cwd.is_dir() else None,
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = out.stdout.strip()
    return value or None


def resolve_identity(task_root: Path, configured: str | None = None) -> AuditorIdentity:
    """The auditor: `configured` (nkitui's config), else git's identity for the task folder, else the OS user."""
    if configured:
        try:
            return parse_auditor(configured, "config")
        except IdentityError:
            pass  # the config reader reports a bad value; fall back to what git knows
    root = Path(task_root)
    name = os.environ.get("GIT_AUTHOR_NAME") or _git_config("user.name", root)
    email = os.environ.get("GIT_AUTHOR_EMAIL") or _git_config("user.email", root)
    if name or email:
        with WORKER_IMPORTS:
            from nkitui.review.record import auditor_slug
        if auditor_slug(name or "") or auditor_slug(email or ""):
            return AuditorIdentity((name or email or "").strip(), email, "git")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return AuditorIdentity(user, None, "system")

"""Atomic writes: the file is replaced whole, and its permissions are what the user expects."""

import os
import stat
from pathlib import Path

from nkitui.common.atomic import atomic_write_text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_the_umask_mode_not_a_private_temporary_mode(tmp_path: Path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "export.csv", "a,b\n")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "export.csv") == 0o644
    assert (tmp_path / "export.csv").read_text() == "a,b\n"
    assert [p.name for p in tmp_path.iterdir()] == ["export.csv"]  # no temporary file left behind


def test_an_existing_file_keeps_its_mode_and_an_explicit_mode_wins(tmp_path: Path):
    target = tmp_path / "notes.toml"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert _mode(target) == 0o640 and target.read_text() == "new"
    atomic_write_text(target, "private", mode=0o600)
    assert _mode(target) == 0o600 and target.read_text() == "private"

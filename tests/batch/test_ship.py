"""Shipping task folders to Ray nodes: a git bundle of the exact commit, or a snapshot of the regular
files for tasks outside git or with changes; damaged payloads are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nkitui.batch.gitstate import read_git_state, same_task_content
from nkitui.batch.ship import ShipError, pack, unpack
from tests.batch.conftest import add_task, git_commit_all


@pytest.fixture(autouse=True)
def node_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node's temporary folder of its own (unpacked trees are cached there)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    return tmp_path / "node-tmp"


def test_a_committed_task_travels_as_a_bundle_of_its_commit(tmp_path: Path):
    repo = tmp_path / "repo"
    task = add_task(repo / "tasks" / "one")
    add_task(repo / "tasks" / "two")
    commit = git_commit_all(repo)
    shipment, data, state = pack(task)
    assert shipment.kind == "bundle" and shipment.commit == commit and shipment.rel_path == "tasks/one"
    there = unpack(shipment, data)
    assert there.name == "one" and (there / "add_nki.py").read_text() == (task / "add_nki.py").read_text()
    assert read_git_state(there).commit == commit  # the evaluation on the node reads the same commit
    assert unpack(shipment, data) == there  # unpacked once per payload


def test_uncommitted_changes_and_tasks_outside_git_travel_as_snapshots_without_links(tmp_path: Path):
    task = add_task(tmp_path / "plain")
    (task / "data").mkdir()
    (task / "data" / "x.txt").write_text("x")
    os.symlink("/etc/passwd", task / "leak")
    shipment, data, state = pack(task)
    assert shipment.kind == "snapshot" and state.commit is None
    there = unpack(shipment, data)
    assert (there / "data" / "x.txt").read_text() == "x" and not (there / "leak").exists()
    git_commit_all(task)
    (task / "add_nki.py").write_text((task / "add_nki.py").read_text() + "# changed\n")
    shipment, data, state = pack(task)
    assert shipment.kind == "snapshot" and state.dirty is True
    assert unpack(shipment, data).joinpath("add_nki.py").read_text().endswith("# changed\n")


def test_a_damaged_payload_is_refused(tmp_path: Path):
    shipment, data, _ = pack(add_task(tmp_path / "plain"))
    with pytest.raises(ShipError, match="damaged"):
        unpack(shipment, data[:-1] + bytes([data[-1] ^ 1]))


def test_a_commit_that_only_adds_reviews_keeps_the_task_content(tmp_path: Path):
    task = add_task(tmp_path / "t")
    first = git_commit_all(task)
    (task / "reviews" / "alice").mkdir(parents=True)
    (task / "reviews" / "alice" / "r.toml").write_text("x = 1\n")
    git_commit_all(task, "review")
    assert same_task_content(read_git_state(task), first)
    (task / "reference.py").write_text((task / "reference.py").read_text() + "# changed\n")
    git_commit_all(task, "change")
    assert not same_task_content(read_git_state(task), first)

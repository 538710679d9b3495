"""The evaluator reads a launch's instruction log from the child's scratch folder without following
links anywhere below that folder: the log file itself, or the request folder swapped for a link."""

from __future__ import annotations

import os
from pathlib import Path

from nkitui.evaluate.pipeline.kernel import read_replay_log


def test_a_log_in_the_request_folder_is_read(tmp_path: Path) -> None:
    out = tmp_path / "io" / "1" / "out"
    out.mkdir(parents=True)
    (out / "replay.bin").write_bytes(b"LOG")
    assert read_replay_log(out, "replay.bin", tmp_path) == b"LOG"


def test_a_request_folder_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "replay.bin").write_bytes(b"NOT THE CHILD'S")
    scratch = tmp_path / "scratch"
    (scratch / "io" / "1").mkdir(parents=True)
    os.symlink(outside, scratch / "io" / "1" / "out")
    got = read_replay_log(scratch / "io" / "1" / "out", "replay.bin", scratch)
    assert isinstance(got, str) and "could not be read" in got


def test_a_linked_log_or_another_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.bin").write_bytes(b"X")
    os.symlink(tmp_path / "real.bin", tmp_path / "replay.bin")
    assert isinstance(read_replay_log(tmp_path, "replay.bin", tmp_path), str)
    assert isinstance(read_replay_log(tmp_path, "../real.bin", tmp_path), str)

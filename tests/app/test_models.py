"""The UI's own data models: aligned rows, git history and diffs, the log store."""

from pathlib import Path

import git

from nkitui.app.gitview import WORKTREE, default_revisions, diff_revisions, list_revisions, parse_unified_diff, split_rows, unified_rows
from nkitui.app.widgets.run.logstore import LogStore, level_index
from nkitui.app.widgets.source.rows import RolePair, align_rows, pairs_at, row_index


def _pair(role, cuda, nki, match="role"):
    return RolePair(role, role, tuple(cuda), tuple(nki), match=match)


def test_paired_lines_share_a_row_and_every_line_appears_once():
    pairs = [_pair("load", [(3, 3), (6, 6)], [(2, 2), (8, 8)], "name"), _pair("guard", [(5, 5)], [(7, 7)])]
    alignment = align_rows(10, 12, pairs)
    assert alignment.anchors == [(3, 2), (5, 7), (6, 8)]
    rows = alignment.rows
    anchored = [(r.left, r.right) for r in rows if r.anchor]
    assert anchored == [(3, 2), (5, 7), (6, 8)]
    # the NKI side has 4 lines (3..6) before line 7 where CUDA has 1 (4): CUDA is padded with blanks
    assert sorted(r.left for r in rows if r.left) == list(range(1, 11))
    assert sorted(r.right for r in rows if r.right) == list(range(1, 13))
    assert [r.left for r in rows][: rows.index(next(r for r in rows if r.right == 7))].count(None) == 3


def test_crossing_anchors_keep_the_heaviest_chain_name_matches_first():
    pairs = [_pair("by-role", [(8, 8)], [(2, 2)]), _pair("by-name", [(2, 2)], [(5, 5)], "name"),
             _pair("also", [(4, 4)], [(9, 9)])]
    alignment = align_rows(10, 10, pairs)
    assert alignment.anchors == [(2, 5), (4, 9)]  # (8, 2) would cross both


def test_anchors_outside_the_files_and_one_sided_pairs_are_ignored():
    alignment = align_rows(3, 3, [_pair("gone", [(9, 9)], [(1, 1)]), _pair("nki only", [], [(2, 2)], "unmatched")])
    assert alignment.anchors == [] and len(alignment.rows) == 3


def test_pairs_at_a_line_most_specific_first_and_row_lookup():
    pairs = [_pair("wide", [(1, 9)], [(1, 9)]), _pair("narrow", [(4, 4)], [(4, 5)]),
             _pair("lonely", [], [(4, 4)], "unmatched")]
    assert pairs_at(pairs, "nki", 4) == [1, 0, 2]
    assert pairs_at(pairs, "cuda", 4) == [1, 0]
    rows = align_rows(5, 5, pairs).rows
    assert rows[row_index(rows, "nki", 4)].right == 4


def test_history_and_diff_of_a_real_repository(task_dir: Path):
    revisions = list_revisions(task_dir)
    assert [r.summary for r in revisions] == ["Mask the last partial tile", "First port of scale_rows"]
    old, new = default_revisions(revisions)
    files = diff_revisions(task_dir, old.sha, new.sha)
    assert [f.path for f in files] == ["scale_rows_nki.py"]
    f = files[0]
    added = [line.text.strip() for line in f.lines if line.kind == "add"]
    assert "valid = t * P + i_p < n_rows" in added
    assert f.added == 4 and f.deleted == 3
    assert "mask=valid" in f.new_text and "mask=valid" not in f.old_text
    # unified: a file row then the hunk; split pairs each deletion with its replacement
    assert unified_rows(files)[0].kind == "file"
    paired = [r for r in split_rows(files) if r.kind == "change" and r.left and r.right]
    assert any("nl.load" in r.left.text and "mask=valid" in r.right.text for r in paired)


def test_uncommitted_changes_are_the_working_tree_revision(task_dir: Path):
    (task_dir / "reference.py").write_text((task_dir / "reference.py").read_text() + "# note\n")
    revisions = list_revisions(task_dir)
    assert revisions[0].sha == WORKTREE
    old, new = default_revisions(revisions)
    assert new.sha == WORKTREE and old.summary == "Mask the last partial tile"
    files = diff_revisions(task_dir, old.sha, new.sha)
    assert [f.path for f in files] == ["reference.py"]
    assert [line.text for line in files[0].lines if line.kind == "add"] == ["# note"]


def test_task_in_a_subfolder_of_a_repository_shows_task_relative_paths(tmp_path: Path):
    repo = git.Repo.init(tmp_path, initial_branch="main")
    (tmp_path / "tasks" / "t").mkdir(parents=True)
    (tmp_path / "tasks" / "t" / "k.py").write_text("a = 1\n")
    (tmp_path / "other.txt").write_text("x\n")
    actor = git.Actor("A", "a@example.com")
    repo.git.add(A=True)
    first = repo.index.commit("one", author=actor, committer=actor)
    (tmp_path / "tasks" / "t" / "k.py").write_text("a = 2\n")
    (tmp_path / "other.txt").write_text("y\n")
    repo.git.add(A=True)
    second = repo.index.commit("two", author=actor, committer=actor)
    files = diff_revisions(tmp_path / "tasks" / "t", first.hexsha, second.hexsha)
    assert [f.path for f in files] == ["k.py"]
    assert files[0].old_text == "a = 1" and files[0].new_text == "a = 2"


def test_parse_renames_and_binary_files():
    text = (
        "diff --git a/old.py b/new.py\nsimilarity index 90%\nrename from old.py\nrename to new.py\n"
        "--- a/old.py\n+++ b/new.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
        "diff --git a/w.bin b/w.bin\nBinary files a/w.bin and b/w.bin differ\n"
    )
    files = parse_unified_diff(text)
    assert [(f.path, f.old_path, f.status) for f in files] == [("new.py", "old.py", "renamed"), ("w.bin", "w.bin", "binary")]
    assert [(line.kind, line.old, line.new) for line in files[0].lines[1:]] == [
        ("context", 1, 1), ("delete", 2, None), ("add", None, 2)]


def test_log_store_filters_incrementally_and_searches_with_smart_case():
    store = LogStore()
    store.extend([(level_index("info"), "compile ok"), (level_index("warning"), "Slow DMA"),
                  (level_index("error"), "mismatch at [3, 7]"), (level_index("debug"), "trace")])
    assert len(store) == 4
    store.set_min_level(level_index("warning"))
    assert [store.line(r)[2] for r in range(len(store))] == ["Slow DMA", "mismatch at [3, 7]"]
    assert store.extend([(level_index("info"), "more"), (level_index("error"), "boom")]) == 1
    assert store.line(len(store) - 1)[2] == "boom"
    store.set_min_level(0)
    assert store.find("dma", 0) == 1  # lower-case query: case-insensitive
    assert store.find("DMA", 0) == 1
    assert store.find("Dma", 0) is None  # a capital makes it case-sensitive
    assert store.find("compile", 1) == 0  # wraps around
    assert store.row_of(2) == 2
    assert level_index("WARN") == level_index("warning") and level_index(None) == level_index("info")

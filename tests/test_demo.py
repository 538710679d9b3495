from pathlib import Path

import git

from nkitui.cli import main
from nkitui.task import load_task
from nkitui.task.samples import default_demo_dir, install_samples, sample_task_names


def test_demo_copies_every_sample_task_as_a_git_repo(tmp_path: Path):
    dest = tmp_path / "demo"
    assert main(["demo", "--dir", str(dest), "--no-open"]) == 0
    names = sample_task_names()
    assert len(names) >= 12
    assert names[-1].startswith("flawed")  # good tasks are listed first
    for name in names:
        repo = git.Repo(dest / name)
        assert not repo.is_dirty(untracked_files=True)
        assert len(list(repo.iter_commits())) == 1
        assert load_task(dest / name).id
    # a second run keeps what is there (an auditor's reviews would be in it)
    (dest / names[0] / "notes.txt").write_text("mine")
    again = install_samples(dest)
    assert all(not item.created for item in again)
    assert (dest / names[0] / "notes.txt").read_text() == "mine"


def test_default_demo_dir_never_reuses_a_folder(tmp_path: Path):
    first = default_demo_dir(tmp_path)
    first.mkdir()
    assert default_demo_dir(tmp_path) == tmp_path / "nkitui-demo-2"


def test_perf_command_passes_its_arguments_through(capsys):
    code = main(["perf", "sol", "--kind", "matmul", "--in", "4096x8192:bfloat16", "--in", "8192x8192:bfloat16",
                 "--out", "4096x8192:bfloat16", "--target", "trn1"])
    assert code == 0
    assert "compute-bound" in capsys.readouterr().out
    assert main(["perf", "estimate", "/nonexistent.json"]) == 2

"""Red team, round 4: links planted in the scratch folder for the *evaluator* to follow. The kernel
process cannot write outside its scratch folder (Landlock), but the evaluator, which is not confined,
creates each request's folder there (`io/<n>/in`), writes the inputs into it, reads the outputs and the
trace back, copies outputs for the timed re-check, and removes the folder afterwards. A kernel that
replaces `io` (or a request's `out`) with a link to a folder outside made the evaluator write, read and
delete there: a confused deputy. Each folder is now opened component by component without following a
link, from the scratch folder's root down (nkitui.executor.workspace.open_beneath)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from nkitui.executor import workspace

from .conftest import require, wrong_task
from .test_containment import attack, assert_contained


def precious(folder: Path) -> dict[str, str]:
    """Folders named like request folders (1..30), each holding a file the user cares about."""
    for n in range(1, 31):
        (folder / str(n)).mkdir()
        (folder / str(n) / "thesis.txt").write_text(f"chapter {n}\n")
    return snapshot(folder)


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def more_seeds(task: Path) -> Path:
    manifest = task / "task.toml"
    manifest.write_text(manifest.read_text().replace("seeds = [0]", "seeds = [0, 1, 2, 3]"))
    return task


@pytest.mark.parametrize("what", ["io", "out"])
def test_a_link_planted_for_the_evaluator_leads_nowhere(what, tmp_path, canary, host, record_property):
    record_property("protection", f"scratch-links:{what}")
    require(host, "landlock")
    before = precious(canary)
    if what == "io":  # every later request's folder, inputs and removal through a link to the canary
        plant = f"""
            root = os.path.dirname(os.getcwd())
            io = os.path.join(root, "io")
            if not os.path.islink(io):
                os.rename(io, io + "_moved")
                os.symlink({str(canary)!r}, io)
                print("PLANTED io")
        """
    else:  # the next request's out/ (the kernel's own reply is read from there)
        plant = f"""
            root = os.path.dirname(os.getcwd())
            for name in os.listdir(os.path.join(root, "io")):
                out = os.path.join(root, "io", name, "out")
                if not os.path.lexists(out):
                    os.symlink({str(canary)!r}, out)
                    print("PLANTED out", name)
        """
    task = more_seeds(wrong_task(tmp_path / f"links-{what}",
                                 prelude='print("CWD", os.getcwd())\n' + textwrap.dedent(plant)))
    result, stdout, scratch = attack(task)
    assert any(line.startswith("PLANTED") for line in stdout), stdout
    assert snapshot(canary) == {**before, "secret.txt": snapshot(canary)["secret.txt"]}, \
        "the evaluator wrote, read or removed outside the scratch folder through a planted link"
    assert result.status != "passed"
    assert_contained(result, stdout, scratch)


def test_open_beneath_refuses_every_link_on_the_way(tmp_path):
    root = tmp_path / "root"
    (root / "real" / "deeper").mkdir(parents=True)
    (root / "real" / "deeper" / "f.npy").write_bytes(b"data")
    os.symlink(root / "real", root / "link")
    os.symlink(root / "real" / "deeper" / "f.npy", root / "real" / "deeper" / "g.npy")
    os.mkfifo(root / "real" / "fifo")
    assert workspace.read_beneath(root, "real/deeper/f.npy", max_bytes=100) == b"data"
    for rel in ("link/deeper/f.npy", "real/deeper/g.npy", "real/fifo", "../root/real/deeper/f.npy"):
        with pytest.raises(OSError):
            workspace.read_beneath(root, rel, max_bytes=100)
    with pytest.raises(OSError):
        workspace.read_beneath(root, "real/deeper/f.npy", max_bytes=2)  # larger than allowed
    fd = workspace.open_dir_beneath(root, "real/new/in", create=True)
    os.close(fd)
    assert (root / "real" / "new" / "in").is_dir()
    with pytest.raises(OSError):
        os.close(workspace.open_dir_beneath(root, "link/new2", create=True))
    assert not (root / "real" / "new2").exists()


def test_a_mutant_cannot_redirect_the_next_mutants_source_outside(tmp_path, canary, host, record_property):
    """Each mutant is the task's own code, mutated: it runs in the mutants' kernel process and may replace
    work/.nkitui-mutants with a link; the evaluator then wrote the next mutant's source through it."""
    record_property("protection", "scratch-links:mutants")
    require(host, "landlock")
    from .test_forgery import evaluate

    before = snapshot(canary)
    plant = f"""
_mutants = os.path.join(os.getcwd(), ".nkitui-mutants")
if os.path.isdir(_mutants) and not os.path.islink(_mutants):
    os.rename(_mutants, _mutants + "-moved")
if not os.path.lexists(_mutants):  # at import in the mutants' process too, before the first mutant is written
    os.symlink({str(canary)!r}, _mutants)
    print("PLANTED mutants")
"""
    # mutants run only for a port that passes: a bundled task as it is (two mutants or more), plus the planting code
    import shutil

    from nkitui.common.resources import bundled_dir

    task = tmp_path / "rmsnorm"
    shutil.copytree(bundled_dir("sample_tasks") / "rmsnorm", task)
    kernel = next(task.glob("*_nki.py"))
    kernel.write_text(kernel.read_text() + "\n\nimport os\n" + plant)
    result, events = evaluate(task, mutants=True, max_mutants_per_operator=1, timeout_s=240.0)
    stdout = [e.text for e in events if getattr(e, "stream", "") == "stdout"]
    assert "PLANTED mutants" in stdout, (result.status, [(p.name, p.status, p.detail) for p in result.phases])
    assert snapshot(canary) == before, "the evaluator wrote a mutant's source outside the scratch folder"

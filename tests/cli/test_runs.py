"""`nkitui runs list|show|compare` on real stored runs (made by `nkitui check` in real workers)."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from rich.console import Console

from nkitui.cli import main
from nkitui.evaluate.present.report import render_result
from nkitui.evaluate.run.result import RunResult
from nkitui.evaluate.run.store import RunStore

from tests.helpers.evaluation import write_task

# one worker runs every test of this file (pytest-xdist's loadgroup): the module's two stored runs
# (two `nkitui check` runs) are made once, not once per worker
pytestmark = pytest.mark.xdist_group("cli-runs")

FAST = ["--no-static", "--no-trials", "--no-precision", "--quiet", "--memory-mb", "2048", "--seeds", "1"]
BROKEN_REFERENCE = "def add(a, b, **kw):\n    return a * b\n"


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A task with two real runs in a store: first passing, then failing (the reference changed)."""
    root = tmp_path_factory.mktemp("runs")
    task = write_task(root / "task")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_DATA_HOME", str(root / "data"))
        assert main(["check", str(task), *FAST]) == 0
        (task / "reference.py").write_text(BROKEN_REFERENCE)
        assert main(["check", str(task), *FAST]) == 1
        (task / "reference.py").write_text("def add(a, b, **kwargs):\n    return a + b\n")
        runs = RunStore(root / "data" / "nkitui" / "runs").list("add")
    assert [r.status for r in runs] == ["failed", "passed"]  # newest first
    return task, root / "data", [r.run_id for r in runs]


@pytest.fixture
def store(stored, isolated_user_folders):
    """The module's stored runs, copied into this test's own data folder."""
    task, data, ids = stored
    shutil.copytree(data, isolated_user_folders / "xdg_data_home", dirs_exist_ok=True)
    return task, ids, RunStore(isolated_user_folders / "xdg_data_home" / "nkitui" / "runs")


def test_list_shows_the_runs_newest_first(store, capsys):
    task, (newest, oldest), _ = store
    assert main(["runs", "list", str(task)]) == 0
    out = capsys.readouterr().out
    assert out.index(newest) < out.index(oldest)
    assert "failed" in out and "passed" in out and "emulator/trn2" in out and "checks" in out

    assert main(["runs", "list", str(task), "--json"]) == 0
    data = _strict_json(capsys.readouterr().out)
    assert data["task_id"] == "add" and [r["run_id"] for r in data["runs"]] == [newest, oldest]
    first = data["runs"][0]
    assert first["status"] == "failed" and first["backend"] == "emulator" and first["created_at"]
    assert first["summary"].startswith(f"{first['checks_passed']}/{first['checks_total']} checks")


def test_list_of_a_task_without_runs_says_how_to_make_one(tmp_path, capsys):
    task = write_task(tmp_path / "fresh", task_id="fresh")
    assert main(["runs", "list", str(task)]) == 0
    assert "no stored runs of task 'fresh'" in capsys.readouterr().out


def test_show_prints_the_same_report_as_check(store, capsys):
    task, (newest, _), runs = store
    short = newest.rsplit("-", 1)[1]
    assert main(["runs", "show", short]) == 0
    out = capsys.readouterr().out
    buf = io.StringIO()
    Console(file=buf, width=80, highlight=False, color_system=None).print(render_result(runs.load(newest)))
    assert out == buf.getvalue()
    assert "FAILED" in out and "matches the reference" in out and newest in out

    assert main(["runs", "show", newest, "--task", str(task), "--json"]) == 0
    again = RunResult.from_json(capsys.readouterr().out)
    assert again == runs.load(newest)


def test_unknown_ids_exit_2_with_close_matches(store, capsys):
    task, (newest, oldest), _ = store
    assert main(["runs", "show", newest[:-1] + ("0" if newest[-1] != "0" else "1")]) == 2
    err = capsys.readouterr().err
    assert "no run" in err and "close matches" in err and newest in err
    assert main(["runs", "show", newest[:13]]) == 2  # a prefix of the time stamp
    err = capsys.readouterr().err
    assert newest in err and oldest in err
    assert main(["runs", "compare", "nothing-like-it", newest]) == 2
    assert "no run 'nothing-like-it'" in capsys.readouterr().err


def test_an_id_stored_under_two_tasks_is_ambiguous_until_the_task_is_named(store, tmp_path, capsys):
    task, (newest, _), runs = store
    twin = runs.root / "other-task"
    twin.mkdir()
    shutil.copy(runs.path_for("add", newest), twin / f"{newest}.json")
    assert main(["runs", "show", newest]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert main(["runs", "show", newest, "--task", str(task)]) == 0


def test_compare_shows_what_changed_between_two_runs(store, capsys):
    _, (newest, oldest), _ = store
    assert main(["runs", "compare", oldest, newest]) == 0
    out = capsys.readouterr().out
    assert "A/B comparison" in out and oldest in out and newest in out
    assert "output:out" in out and "changed" in out and "worse" in out

    assert main(["runs", "compare", oldest, newest, "--json"]) == 0
    data = _strict_json(capsys.readouterr().out)
    assert (data["a"], data["b"]) == (oldest, newest) and data["same_task"] is True
    check = next(c for c in data["checks"] if c["id"] == "output:out")
    assert (check["a"], check["b"]) == (True, False)
    assert any(m["metric"] == "max_abs" and m["change"] == "worse" for m in data["metrics"])


def test_a_broken_task_folder_exits_2_naming_the_file(tmp_path, capsys):
    task = write_task(tmp_path / "bad")
    (task / "task.toml").write_text((task / "task.toml").read_text().replace('id = "add"', "id = 5"))
    assert main(["runs", "list", str(task)]) == 2
    err = capsys.readouterr().err
    assert "task.toml" in err
    assert main(["runs", "list", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["runs"]) == 2
    assert "choose an action" in capsys.readouterr().err

"""Every headless command fits the terminal width it is given (COLUMNS=80 here): tables, progress lines,
wrapped paragraphs keep their indent, numbers are never split across lines, paths break only after a
`/` or `::`. Real commands in child processes, on a bundled task in a real git repository."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from rich.cells import cell_len

from nkitui.cli import build_parser
from tests.app.helpers import SAMPLE_TASKS, make_task_repo

# one worker runs every test of this file (pytest-xdist's loadgroup): the module's `nkitui check` at 80
# columns runs once, not once per worker
pytestmark = pytest.mark.xdist_group("cli-width")

WIDTH = 80


def _nkitui(env: dict[str, str], *args: str, code: int | None = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nkitui", *args], capture_output=True, text=True, env=env,
                          timeout=300)
    if code is not None:
        assert done.returncode == code, done.stdout + done.stderr
    return done


def _fits(text: str, width: int = WIDTH) -> None:
    long = [line for line in text.splitlines() if cell_len(line) > width]
    assert not long, "\n".join(long)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """flawed_bf16_accum (long names, a 2.1e9 ULP distance) checked once at COLUMNS=80."""
    base = tmp_path_factory.mktemp("width")
    task = make_task_repo(base / "flawed_bf16_accum", SAMPLE_TASKS / "flawed_bf16_accum")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for name in ("CONFIG", "STATE", "DATA", "CACHE"):
        env[f"XDG_{name}_HOME"] = str(base / name.lower())
    env["COLUMNS"] = str(WIDTH)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = _nkitui(env, "check", str(task), "--no-precision", code=1)
    return task, env, done


@pytest.mark.slow
def test_check_report_and_progress_lines_fit_80_columns(checked):
    _, _, done = checked
    _fits(done.stdout)
    _fits(done.stderr)  # the progress lines
    rows = [line for line in done.stdout.splitlines() if re.match(r"c\s+│\s+\d", line)]
    assert rows and all("2.1e+9" in r and "0/131072" in r for r in rows), "\n".join(rows)  # numbers whole
    # a path breaks after ::, never mid-word, and stays in its column
    lines = done.stdout.splitlines()
    compile_row = next(i for i, line in enumerate(lines) if line.startswith("compile "))
    assert lines[compile_row].rstrip(" │").endswith("matmul_bf16_f32out_nki.py::")
    assert "│ matmul_bf16_f32out_kernel" in lines[compile_row + 1]
    progress = done.stderr.splitlines()
    backend = next(i for i, line in enumerate(progress) if line.startswith("  backend:"))
    assert progress[backend + 1].startswith("    ")  # a wrapped progress line keeps its indent
    timing = lines.index("timing")
    assert lines[timing + 1].startswith("  estimated") and lines[timing + 2].startswith("    ")
    # a ULP distance that is no count of roundings says what it means
    assert "2.1e+9 (values of opposite sign or more than 2x apart)" in " ".join(done.stdout.split())


def test_runs_list_show_and_compare_fit_80_columns(checked):
    task, env, _ = checked
    listing = _nkitui(env, "runs", "list", str(task)).stdout
    _fits(listing)
    [run_id] = re.findall(r"\d{8}T\d{6}Z-[0-9a-f]{6}", listing)
    assert "ids start with the UTC time" in listing
    _fits(_nkitui(env, "runs", "show", run_id).stdout)
    _fits(_nkitui(env, "runs", "compare", run_id, run_id).stdout)
    wide = dict(env, COLUMNS="140")
    assert "times in UTC" in _nkitui(wide, "runs", "list", str(task)).stdout  # room for the time column


@pytest.mark.slow
def test_review_template_history_and_task_validate_fit_80_columns(checked, tmp_path):
    task, env, _ = checked
    template = _nkitui(env, "review", "template", str(task)).stdout
    _fits(template)
    filled = re.sub(r'^score = ""$', "score = 2", template, flags=re.M).replace('verdict = ""', 'verdict = "revise"')
    draft = tmp_path / "draft.toml"
    draft.write_text(filled)
    _fits(_nkitui(env, "review", "validate", str(task), "--from", str(draft)).stdout)
    _fits(_nkitui(env, "review", "submit", str(task), "--from", str(draft), "--auditor", "ada").stdout)
    history = _nkitui(env, "history", str(task)).stdout
    _fits(history)
    first, second = history.splitlines()[1:3]
    assert first.startswith("20") and "ada  revise" in first and second.startswith("    ")  # scores wrap indented
    _fits(_nkitui(env, "task", "validate", str(task)).stdout)
    _fits(_nkitui(env, "analyze", str(task), code=1).stdout)
    _fits(_nkitui(env, "analyze", "--rules", str(task)).stdout)


def test_help_of_every_command_fits_80_columns(checked):
    _, env, _ = checked
    for command in (["--help"], ["check", "--help"], ["runs", "list", "--help"], ["history", "--help"],
                    ["review", "submit", "--help"], ["perf", "sol", "--help"], ["emu", "run", "--help"]):
        _fits(_nkitui(env, *command).stdout)


def test_every_argument_of_every_command_has_help():
    import argparse

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                if not action.help or action.help == argparse.SUPPRESS:
                    yield " ".join(path) + " " + (action.option_strings or [action.dest])[0]

    missing = list(walk(build_parser(), ["nkitui"]))  # `nkitui perf` is a subcommand like the others
    assert missing == []


def test_perf_sol_takes_the_apps_dtype_names_and_lists_its_kinds(checked):
    _, env, _ = checked
    done = _nkitui(env, "perf", "sol", "--kind", "matmul", "--in", "256x2048:bf16", "--in", "2048x512:bf16",
                   "--out", "256x512:float32", "--json")
    assert json.loads(done.stdout)["bound"] in ("memory", "compute", "vector")
    helped = _nkitui(env, "perf", "sol", "--help").stdout
    for kind in ("matmul", "batched_matmul", "attention", "softmax", "rmsnorm", "transpose"):
        assert kind in helped
    assert "bf16" in helped
    short = _nkitui(env, "perf", "sol", "--kind", "matmul", "--in", "256x2048:bf16", "--out", "256x512:bf16", code=2)
    assert "minimal_work" not in short.stderr and "--kind matmul: needs two inputs A and B" in short.stderr
    bad = _nkitui(env, "perf", "sol", "--kind", "conv", "--in", "2x2:bf16", code=2)
    assert "invalid choice: 'conv'" in bad.stderr and "minimal_work" not in bad.stderr
    unknown = _nkitui(env, "perf", "sol", "--kind", "copy", "--in", "2x2:bf17", code=2)
    assert "unknown dtype 'bf17'" in unknown.stderr and "bfloat16" in unknown.stderr

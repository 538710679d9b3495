"""Tasks for the evaluation tests (executor, pipeline, `nkitui check`): task folders with real (legacy
NKI) kernels that behave or misbehave, real git repositories, quick requests, and the fake Neuron SDK
and tools. Plain functions and constants: import them (the folders' conftest files re-export them)."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from nkitui.evaluate.run import EvaluationRequest
from tests.helpers.add_task import add_manifest, write_files

FAKES = Path(__file__).resolve().parent.parent / "fakes"
FAKE_SDK = FAKES / "sdk"
FAKE_PLACEHOLDER = FAKES / "placeholder"
FAKE_BIN = {name: FAKES / "bin" / name for name in ("explorer", "legacy", "common")}

HEADER = """\
import os
import sys
import time

import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

ADD_KERNEL = HEADER + """

@nki.jit
def add_kernel(a, b{extra_params}):
{prelude}
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out
"""

REFERENCE = "def add(a, b, **kwargs):\n    return a + b\n"

def add_task_manifest(task_id: str = "add", kernel_extra: str = "") -> str:
    """task.toml of the add task as these tests run it: no CUDA source, tolerance 1e-6, two seeds."""
    return add_manifest(task_id=task_id, header='op = "elementwise"', cuda=False, kernel_extra=kernel_extra,
                        tolerance="1e-6", tail="[evaluation]\nseeds = [0, 1]")


def write_task(root: Path, *, prelude: str = "", kernel: str | None = None, reference: str = REFERENCE,
               kernel_extra: str = "", task_id: str = "add", extra_params: str = "", manifest: str | None = None) -> Path:
    """A task folder with the legacy NKI add kernel; `prelude` (Python lines) runs first in its body."""
    body = textwrap.indent(textwrap.dedent(prelude).strip("\n"), "    ") if prelude.strip() else "    pass"
    source = kernel if kernel is not None else ADD_KERNEL.format(prelude=body, extra_params=extra_params)
    return write_files(root, {"add_nki.py": source, "reference.py": reference,
                              "task.toml": manifest if manifest is not None else add_task_manifest(task_id, kernel_extra)})


def git_init(root: Path) -> str:
    """Make `root` a real git repository with one commit; returns the commit id."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "task"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def quick_request(task_dir: Path, **overrides) -> EvaluationRequest:
    """A request without the slower optional phases, with short limits for tests."""
    options = dict(static=False, trials=False, precision=False, goldens=False, timeout_s=60.0, memory_mb=2048,
                   store=False)
    options.update(overrides)
    return EvaluationRequest.of(task_dir, **options)


def fake_sdk_env(*, device: str | None = None, tools: tuple[str, ...] = ("explorer", "common"),
                 log: Path | None = None) -> dict[str, str]:
    """Environment additions for a run that should see the fake SDK's tools (and device)."""
    path = os.pathsep.join([*(str(FAKE_BIN[t]) for t in tools), os.environ.get("PATH", os.defpath)])
    env = {"PATH": path}
    if device:
        env["NKITUI_FAKE_NEURON_DEVICE"] = device
    if log is not None:
        env["NKITUI_FAKE_TOOL_LOG"] = str(log)
    return env

"""Capture a hardware profile of a compiled kernel (NEFF) and read its summary JSON.

  Neuron Explorer (current):  neuron-explorer capture -n K.neff -s profile.ntff --profile-nth-exec=2
                              neuron-explorer view -d DIR --output-format summary-json
  neuron-profile (legacy):    neuron-profile capture -n K.neff -s profile.ntff --profile-nth-exec=2
                              neuron-profile view -n K.neff -s profile_exec_2.ntff --output-format summary-json

Profiling the 2nd execution skips the warm-up run (nki-spec.md §8.2-8.3). The summary JSON goes
to nkitui.perf's parser, which maps it to the same PerfRecord the cost model fills.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOL_TIMEOUT_S = 300.0


class ProfileCaptureError(Exception):
    pass


@dataclass
class ProfileCapture:
    tool: str  # "neuron-explorer" | "neuron-profile"
    summary: Any  # the parsed summary-json document
    commands: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def find_neff(root: Path, since: float) -> Path | None:
    """The newest .neff under `root` written after `since` (time.time())."""
    best: tuple[float, Path] | None = None
    for path in root.rglob("*.neff"):
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if mtime >= since - 1 and (best is None or mtime > best[0]):
            best = (mtime, path)
    return best[1] if best else None


def _run(argv: list[str], cwd: Path, commands: list[str], timeout: float) -> str:
    commands.append(" ".join(argv))
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ProfileCaptureError(f"{argv[0]} {argv[1]} did not finish within {timeout:g} s") from exc
    except OSError as exc:
        raise ProfileCaptureError(f"could not run {argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise ProfileCaptureError(f"{' '.join(argv[:2])} failed with status {proc.returncode}: {err[-1] if err else 'no output'}")
    return proc.stdout


def extract_json(text: str) -> Any:
    """The JSON document in a tool's output (tools may print banner lines before it)."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise ProfileCaptureError("the profiler printed no JSON summary")
    try:
        return json.loads(text[min(starts):])
    except ValueError as exc:
        raise ProfileCaptureError(f"the profiler's summary is not valid JSON: {exc}") from exc


def capture(neff: Path, workdir: Path, tools: dict[str, str | None], timeout: float = TOOL_TIMEOUT_S) -> ProfileCapture:
    """Capture and summarise with Neuron Explorer if present, else neuron-profile."""
    commands: list[str] = []
    start = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    explorer, legacy = tools.get("neuron-explorer"), tools.get("neuron-profile")
    if explorer:
        _run([explorer, "capture", "-n", str(neff), "-s", "profile.ntff", "--profile-nth-exec=2"], workdir, commands, timeout)
        out = _run([explorer, "view", "-d", str(workdir), "--output-format", "summary-json"], workdir, commands, timeout)
        tool = "neuron-explorer"
    elif legacy:
        _run([legacy, "capture", "-n", str(neff), "-s", "profile.ntff", "--profile-nth-exec=2"], workdir, commands, timeout)
        ntff = workdir / "profile_exec_2.ntff"
        if not ntff.exists():
            ntff = workdir / "profile.ntff"
        out = _run([legacy, "view", "-n", str(neff), "-s", str(ntff), "--output-format", "summary-json"], workdir, commands, timeout)
        tool = "neuron-profile"
    else:
        raise ProfileCaptureError("neither neuron-explorer nor neuron-profile is on PATH")
    return ProfileCapture(tool=tool, summary=extract_json(out), commands=commands, duration_s=time.perf_counter() - start)

"""`nkitui batch DIR --ray ADDRESS` joining a cluster started by `ray start --head` as a lab runs it on a Trn
host (a real Ray cluster, no mocks).

A file of its own: the other Ray tests share one local Ray runtime (tests/batch/conftest.py, module-scoped),
which pytest stops when its worker leaves tests/batch/test_ray.py; so that runtime's daemons are gone
before this test starts a second Ray cluster, and the two never compete for the two cores. The same
xdist group keeps every Ray test on one worker."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.batch.conftest import add_task, git_commit_all

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


def test_ray_address_joins_a_trn_like_cluster_and_never_runs_more_kernels_than_neuron_cores(tmp_path: Path):
    """`ray start --head` as a lab runs it on a Trn host (token authentication on, Ray's default; the
    host's NeuronCores as the `neuron_cores` resource, here 1 beside 2 CPUs), then
    `nkitui batch DIR --ray ADDRESS` from another process joins it: the two kernels run one after
    the other although two CPUs are free."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = Path(sys.executable).with_name("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             '--resources={"neuron_cores": 1}',
                             "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the head's GCS accepts connections
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, "ray start --head exited"
            time.sleep(0.5)
        for name in ("one", "two"):
            add_task(tmp_path / "q" / name, prelude="time.sleep(3)")
            git_commit_all(tmp_path / "q" / name)
        done = subprocess.run(
            [sys.executable, "-m", "nkitui", "batch", str(tmp_path / "q"), "--ray", f"127.0.0.1:{port}",
             "--seeds", "1", "--no-static", "--no-trials", "--no-precision", "--jsonl", "-"],
            capture_output=True, text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        records = json_lines(done.stdout)
        assert [(r["key"], r["status"], r["executor"]) for r in records] == [("one", "passed", "ray"),
                                                                             ("two", "passed", "ray")]
        assert "Ray cluster 127.0.0.1" in done.stderr and "1 NeuronCores" in done.stderr
        # one NeuronCore: the second kernel's run began after the first one's ended (finished_at has
        # one-second resolution, hence the second of slack)
        spans = sorted((datetime.fromisoformat(r["finished_at"]).timestamp() - r["duration_s"],
                        datetime.fromisoformat(r["finished_at"]).timestamp()) for r in records)
        assert spans[1][0] >= spans[0][1] - 1.0, spans
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops what it started
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)


def json_lines(text: str) -> list[dict]:
    import json

    return sorted((json.loads(line) for line in text.splitlines() if line.startswith("{")), key=lambda r: r["key"])

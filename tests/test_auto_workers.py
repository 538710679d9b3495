"""`-n auto` starts two pytest-xdist workers per CPU (tests/conftest.py, docs/testing.md "Scheduling under
pytest-xdist"), no more than the memory gives a GiB each and never fewer than the CPUs; the variable
pytest-xdist documents still decides when set."""

from __future__ import annotations

import os

import pytest

from tests import conftest


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """Pretend to be a machine of `cpus` CPUs and `gib` GiB of memory."""
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)

    def make(cpus: int, gib: float) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
        sizes = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": int(gib * (1 << 30) / 4096)}
        monkeypatch.setattr(os, "sysconf", lambda name: sizes[name])

    return make


def test_auto_is_two_workers_per_cpu_on_the_ci_machine(machine):
    machine(2, 24)  # CI: 2 cores, 24 GiB
    assert conftest.pytest_xdist_auto_num_workers(None) == 4


def test_auto_gives_each_worker_a_gib_but_never_fewer_workers_than_cpus(machine):
    machine(8, 6)
    assert conftest.pytest_xdist_auto_num_workers(None) == 8
    machine(4, 6.5)
    assert conftest.pytest_xdist_auto_num_workers(None) == 6


def test_the_variable_pytest_xdist_documents_still_decides(machine, monkeypatch):
    machine(2, 24)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(None) == 3
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "many")  # not a number: ignored, as pytest-xdist does
    assert conftest.pytest_xdist_auto_num_workers(None) == 4

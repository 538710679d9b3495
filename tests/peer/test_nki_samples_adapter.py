"""The nki-samples peer-suite adapter (benchmarks/peer_suites/nki_samples.py): its shim and its
host-memory precheck. Runs where the runner (benchmarks/peer_suites/common.py) is present."""

from __future__ import annotations

import builtins
import types

import pytest

pytest.importorskip("benchmarks.peer_suites.common", reason="the peer-suite runner is not in this tree")

from benchmarks.peer_suites import nki_samples  # noqa: E402
from nkitui.emulator import memory  # noqa: E402


def test_the_product_name_read_answers_the_emulated_target(monkeypatch):
    monkeypatch.setattr(builtins, "open", builtins.open)  # restored after the test
    nki_samples._answer_product_name()
    with open(nki_samples.PRODUCT_NAME) as f:
        assert f.readline() == "trn2.48xlarge\n"
    with open(nki_samples.PRODUCT_NAME, "rb") as f:
        assert f.read() == b"trn2.48xlarge\n"
    with open(__file__) as f:  # every other file is the real one
        assert "product name" in f.read()


def _item(nodeid: str, **params):
    return types.SimpleNamespace(nodeid=nodeid, callspec=types.SimpleNamespace(params=params))


def test_reference_size_from_the_test_parameters():
    item = _item("test/unit/test_flash_attn_bwd.py::TestAttention::test_flash_attn_bwd_numerical[x]", nheads=8,
                 seqlen=8192)
    assert nki_samples.reference_need(item) == int(8.2 * 8 * 8192 * 8192 * 4)
    assert nki_samples.reference_need(_item("test/unit/test_flash_attn_fwd.py::t[x]", nheads=8, seqlen=8192)) == 0


def test_a_reference_too_big_for_the_host_fails_before_it_starts(monkeypatch):
    item = _item("test/unit/test_flash_attn_bwd.py::TestAttention::test_flash_attn_bwd_numerical[x]", nheads=8,
                 seqlen=8192)
    monkeypatch.setattr(memory, "host_available_bytes", lambda: 20 << 30)
    with pytest.raises(MemoryError, match=r"too big for this host: .* about 16.4 GiB .* 20.0 GiB"):
        nki_samples.pytest_runtest_call(item)
    monkeypatch.setattr(memory, "host_available_bytes", lambda: 64 << 30)
    assert nki_samples.pytest_runtest_call(item) is None  # a host with room runs it


def test_the_suite_runs_the_simulation_tests_with_this_module_as_a_plugin():
    suite = nki_samples.SUITE
    assert suite.pytest_args[:2] == ("test/unit", "--simulation-only")
    assert "benchmarks.peer_suites.nki_samples" in suite.pytest_args
    assert suite.marker == "src/nki_samples/reference" and suite.shim.endswith(":install_shims")

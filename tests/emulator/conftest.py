"""Fixtures for the emulator suite: the legacy namespace installed once per session."""

from __future__ import annotations

import numpy as np
import pytest

from nkitui import emulator


@pytest.fixture(scope="session", autouse=True)
def _installed():
    already = emulator.installed()
    emulator.install()
    yield
    if not already:
        emulator.uninstall()


@pytest.fixture(scope="session")
def nki():
    import neuronxcc.nki as nki_mod

    return nki_mod


@pytest.fixture(scope="session")
def nl():
    import neuronxcc.nki.language as nl_mod

    return nl_mod


@pytest.fixture(scope="session")
def nisa():
    import neuronxcc.nki.isa as nisa_mod

    return nisa_mod


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

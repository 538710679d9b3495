"""Fixtures for the emulator suite.

The legacy namespace is installed when this conftest is imported, so that kernel modules in this
directory can `import neuronxcc.nki` at the top like real kernel files; it is uninstalled again
at the end of the session if it was not installed before.
"""

from __future__ import annotations

import numpy as np
import pytest

from nkitui import emulator

_WAS_INSTALLED = emulator.installed()
emulator.install()


@pytest.fixture(scope="session", autouse=True)
def _installed():
    yield
    if not _WAS_INSTALLED:
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

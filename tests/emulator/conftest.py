"""Fixtures for the emulator suite.

The legacy namespace is installed when this conftest is imported, so that kernel modules in this
directory can `import neuronxcc.nki` at the top like real kernel files; it is uninstalled again
at the end of the session if it was not installed before.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.emulator_session import install_for_session

_installed = install_for_session()


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

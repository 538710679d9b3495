"""Fixtures for the nki-namespace (NKI 0.3+) emulator suite.

Both namespaces are installed when this conftest is imported, so that kernel modules here can
`import nki` (and the twin tests `import neuronxcc.nki`) at the top like real kernel files; they
are uninstalled at the end of the session if they were not installed before.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.emulator_session import install_for_session

_installed = install_for_session()


@pytest.fixture
def rng():
    return np.random.default_rng(20260901)


@pytest.fixture(autouse=True)
def _no_target_override(monkeypatch):
    # the launch target follows these variables; tests that need them set them explicitly
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.delenv("NKI_NC_VERSION", raising=False)

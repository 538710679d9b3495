"""The emulator's namespaces for a test directory whose kernel modules import them at the top."""

from __future__ import annotations

import pytest

from nkitui import emulator


def install_for_session():
    """Install the emulator's `neuronxcc.nki` and `nki` namespaces now (at conftest import, before
    the test modules are collected) and return an autouse session fixture that uninstalls them at
    the end of the session if they were not installed before. Assign it in the conftest."""
    was_installed = emulator.installed()
    emulator.install()

    @pytest.fixture(scope="session", autouse=True)
    def _installed():
        yield
        if not was_installed:
            emulator.uninstall()

    return _installed

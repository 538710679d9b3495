"""The stand-in tests import the `nki` namespace (the emulator's) at the top, like the peer suites."""

from __future__ import annotations

from tests.helpers.emulator_session import install_for_session

_installed = install_for_session()

"""Fixtures for every test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_inherited_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist workers inherit COLUMNS=80/LINES=24; commands fit their output to COLUMNS, so a test
    sees the width it sets itself (a test of 80-column output sets COLUMNS=80), never an accident."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)

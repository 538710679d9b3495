"""`neuronxcc.starfish.support.dtype`: the compiler package's host-side dtype helpers that suites
import directly (nki-library's QKV tests: `from neuronxcc.starfish.support.dtype import static_cast`)."""

from __future__ import annotations

from nkitui.emulator.frontend_common import static_cast

__all__ = ["static_cast"]

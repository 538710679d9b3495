"""`nki.typing`: kernel signature annotations (`nt.tensor[shape, dtype]`, `nt.mutable_tensor`,
`nt.scalar`), checked against the arguments at launch (the same checks as the legacy namespace)."""

from __future__ import annotations

from nkitui.emulator.legacy.typing import mutable_tensor, scalar, tensor, tile  # noqa: F401

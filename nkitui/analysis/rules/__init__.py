"""Analysis rules, one module per family. Each module exports SPECS (documented rule ids) and CHECKS."""

from __future__ import annotations

from nkitui.analysis.rules import fusion, hacks, layout, loops, matmul, partial, tiling
from nkitui.analysis.rules.base import Check, RuleInput, RuleSpec

_MODULES = (tiling, loops, matmul, fusion, layout, partial, hacks)

ALL_SPECS: list[RuleSpec] = [spec for module in _MODULES for spec in module.SPECS]
ALL_CHECKS: list[Check] = [check for module in _MODULES for check in module.CHECKS]
SPECS_BY_ID: dict[str, RuleSpec] = {spec.id: spec for spec in ALL_SPECS}

__all__ = ["ALL_CHECKS", "ALL_SPECS", "SPECS_BY_ID", "Check", "RuleInput", "RuleSpec"]

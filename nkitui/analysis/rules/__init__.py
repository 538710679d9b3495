"""Analysis rules, one module per family; each rule a small function registered with `@rule(SPEC)`.

Importing this package registers every rule; `ALL_RULES` orders them family by family as `FAMILIES` lists
them (the order of `nkitui analyze --rules` and of docs/analysis-rules.md). See `registry` for how to
write one.
"""

from __future__ import annotations

from nkitui.analysis.rules import fusion, hacks, layout, loops, matmul, partial, tiling
from nkitui.analysis.rules.registry import FILE_RULES, RULES, Rule, RuleSpec, file_rule, rule
from nkitui.analysis.rules.view import KernelView, make_finding

FAMILIES = (tiling, loops, matmul, fusion, layout, partial, hacks)
_FAMILY_ORDER = {module.__name__: index for index, module in enumerate(FAMILIES)}

# Every registered rule, family by family, each family's rules in the order they are defined.
ALL_RULES: list[Rule] = sorted(RULES, key=lambda r: _FAMILY_ORDER.get(r.check.__module__, len(FAMILIES)))
ALL_SPECS: list[RuleSpec] = list({r.spec.id: r.spec for r in ALL_RULES}.values())
SPECS_BY_ID: dict[str, RuleSpec] = {spec.id: spec for spec in ALL_SPECS}

__all__ = ["ALL_RULES", "ALL_SPECS", "FAMILIES", "FILE_RULES", "SPECS_BY_ID", "KernelView", "Rule", "RuleSpec",
           "file_rule", "make_finding", "rule"]

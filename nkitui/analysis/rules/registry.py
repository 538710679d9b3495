"""The rule registry: every analysis rule is a small function registered with the rule it reports.

    TILE_TINY = RuleSpec(id="NKI-TILE-TINY", title=..., category="performance", severity="high", summary=...)

    @rule(TILE_TINY)
    def thread_per_element_loops(view: KernelView) -> Iterator[Finding]:
        ...
        yield view.finding(TILE_TINY, severity="medium", title=..., message=..., line=...)

A rule reads one kernel through a `KernelView` and yields findings of its own rule id only (the runner
checks that). One rule id may have several functions, each one check (HACK-UNUSED-INPUT, for example: inputs
never read, inputs multiplied by zero, inputs read only in part). They run family by family in the order
of `rules.FAMILIES`, and within a family in the order they are defined.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nkitui.common.findings import Category, Finding

if TYPE_CHECKING:
    from nkitui.analysis.rules.view import KernelView

DOCS = "docs/analysis-rules.md"


@dataclass(frozen=True)
class RuleSpec:
    id: str
    title: str
    category: Category
    severity: str  # the usual severity; a finding may differ (documented per rule)
    summary: str  # one paragraph: what it detects and why it matters on a NeuronCore

    @property
    def anchor(self) -> str:
        """Where the rule is documented: `docs/analysis-rules.md#nki-tile-tiny`."""
        return f"{DOCS}#{self.id.lower()}"


Check = Callable[["KernelView"], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """One registered check and the rule it reports."""

    spec: RuleSpec
    check: Check

    @property
    def name(self) -> str:
        return getattr(self.check, "__name__", self.spec.id)

    def run(self, view: KernelView) -> Iterator[Finding]:
        for finding in self.check(view):
            if finding.rule != self.spec.id:
                raise ValueError(f"{self.name} is registered for {self.spec.id} but reported {finding.rule}")
            yield finding


RULES: list[Rule] = []
FILE_RULES: list[RuleSpec] = []  # rules checked on a whole file rather than one kernel


def rule(spec: RuleSpec) -> Callable[[Check], Check]:
    """Register the decorated function as a check of `spec`."""

    def register(check: Check) -> Check:
        RULES.append(Rule(spec, check))
        return check

    return register


def file_rule(spec: RuleSpec) -> RuleSpec:
    """Declare a rule checked on a whole file rather than one kernel (NKI-SYNTAX, CUDA-PARSE ...): it is listed
    by `nkitui analyze --rules` and documented like the others; the code that checks it calls make_finding."""
    FILE_RULES.append(spec)
    return spec

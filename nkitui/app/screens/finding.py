"""A finding in full: the strip under the code and the findings list cut its explanation to one row."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from nkitui.app import keymap
from nkitui.app.widgets.source.code_view import SEVERITY_GLYPH
from nkitui.common.findings import Finding


def finding_text(f: Finding) -> Content:
    glyph = SEVERITY_GLYPH.get(f.severity, "•")
    style = f"bold $nk-sev-{f.severity}" if f.severity in SEVERITY_GLYPH else "bold"
    origin = " · ".join(part for part in (f.category, f.source) if part)
    return Content.assemble(
        (f"{glyph} {f.severity}  ", style), (f.rule, "bold"), (f"  {f.location}", "$text-muted"), "\n",
        (f.title, "bold"), "\n\n",
        f.message,
        ("\n\n" + origin, "$text-muted") if origin else "",
    )


class FindingScreen(ModalScreen[None]):
    """Every finding on the cursor's line (or the highlighted one in the list), unabridged."""

    HELP = """\
## Finding

A finding of the analysis, the numerics checks or the cost model, unabridged: severity, rule, where,
what and why, and what to do about it. Arrows scroll; **Escape** (or **e**) closes. Back in the
Source area, **a** attaches the finding as evidence.
"""

    BINDINGS = [*keymap.bindings("finding"), *keymap.help_bindings()]

    DEFAULT_CSS = """
    FindingScreen { align: center middle; }
    FindingScreen > Vertical {
        width: 95%; max-width: 110; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    FindingScreen VerticalScroll { height: auto; max-height: 40; }
    FindingScreen .finding { margin-bottom: 1; }
    FindingScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__()
        self.findings = findings

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                for f in self.findings:
                    yield Static(finding_text(f), classes="finding")
            yield Static(f"{keymap.app_key(self, 'finding.close')} closes · ↑/↓ scroll", classes="hint")

    def on_mount(self) -> None:
        count = len(self.findings)
        self.query_one(Vertical).border_title = "Finding" if count == 1 else f"{count} findings on this line"
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)

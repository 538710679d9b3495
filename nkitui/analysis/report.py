"""The result of analysing one task: findings, the CUDA<->NKI alignment and model summaries.

`AnalysisReport.to_dict()` is what `nkitui analyze --json` prints and what the UI stores; `render()`
turns a report into Rich renderables for the terminal (no Textual here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nkitui.analysis.alignment import AlignmentPair, LineRange
from nkitui.common.findings import SEVERITY_ORDER, Finding, sort_findings

REPORT_VERSION = 1


@dataclass
class AnalysisReport:
    nki_file: str | None  # task-relative path of the NKI port
    cuda_file: str | None  # task-relative path of the CUDA source
    namespace: str | None  # "legacy" | "new" | "mixed" | None
    findings: list[Finding] = field(default_factory=list)
    alignment: list[AlignmentPair] = field(default_factory=list)
    nki: dict[str, Any] = field(default_factory=dict)  # NkiModel.summary()
    cuda: dict[str, Any] | None = None  # CudaModel.summary()
    context: bool = False  # whether task shapes/dtypes were available
    elapsed_ms: float = 0.0

    # -- queries used by the UI and the CLI ----------------------------------------------------------
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in SEVERITY_ORDER}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    @property
    def has_high(self) -> bool:
        return any(f.severity == "high" for f in self.findings)

    def findings_in(self, file: str) -> list[Finding]:
        return [f for f in self.findings if f.file == file]

    def gutter(self, file: str) -> dict[int, list[Finding]]:
        """Findings of `file` keyed by every line they cover (line..end_line), for gutter marks."""
        out: dict[int, list[Finding]] = {}
        for f in self.findings_in(file):
            if f.line is None:
                continue
            for line in range(f.line, (f.end_line or f.line) + 1):
                out.setdefault(line, []).append(f)
        return out

    def pairs_at(self, side: str, line: int) -> list[AlignmentPair]:
        """Alignment pairs whose `side` ("cuda" or "nki") ranges contain `line`."""
        out = []
        for pair in self.alignment:
            spans: list[LineRange] = pair.cuda if side == "cuda" else pair.nki
            if any(r.start <= line <= r.end for r in spans):
                out.append(pair)
        return out

    # -- serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "files": {"nki": self.nki_file, "cuda": self.cuda_file},
            "namespace": self.namespace,
            "context": self.context,
            "counts": self.counts(),
            "findings": [f.to_dict() for f in self.findings],
            "alignment": [p.to_dict() for p in self.alignment],
            "nki": self.nki,
            "cuda": self.cuda,
            "elapsed_ms": round(self.elapsed_ms, 2),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AnalysisReport":
        files = d.get("files", {})
        return cls(
            nki_file=files.get("nki"), cuda_file=files.get("cuda"), namespace=d.get("namespace"),
            findings=[Finding.from_dict(f) for f in d.get("findings", [])],
            alignment=[AlignmentPair.from_dict(p) for p in d.get("alignment", [])],
            nki=dict(d.get("nki") or {}), cuda=d.get("cuda"), context=bool(d.get("context")),
            elapsed_ms=float(d.get("elapsed_ms", 0.0)),
        )

    def sorted(self) -> "AnalysisReport":
        self.findings = sort_findings(self.findings)
        return self


_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def _ranges_text(spans: list[LineRange]) -> str:
    if not spans:
        return "—"
    parts = [str(r.start) if r.start == r.end else f"{r.start}-{r.end}" for r in spans[:6]]
    return ", ".join(parts) + (" …" if len(spans) > 6 else "")


def render(report: AnalysisReport) -> Any:
    """Rich renderables for a report: a header, findings by severity, and the alignment table."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    counts = report.counts()
    header = Text()
    header.append("NKI ", style="bold")
    header.append(f"{report.nki_file or '-'}")
    header.append(f"  ({report.namespace or 'unknown'} namespace)", style="dim")
    if report.cuda_file:
        header.append("   CUDA ", style="bold")
        header.append(report.cuda_file)
    header.append("\n")
    for sev in ("high", "medium", "low", "info"):
        header.append(f"{counts.get(sev, 0)} {sev}", style=_SEVERITY_STYLE[sev])
        header.append("  ")
    if not report.context:
        header.append("(no task shapes: size-dependent checks were symbolic)", style="dim")
    parts.append(header)
    if not report.findings:
        parts.append(Text("\nNo findings.", style="green"))
    for f in report.findings:
        title = Text()
        title.append(f"\n{f.severity.upper():<6}", style=_SEVERITY_STYLE.get(f.severity, ""))
        title.append(f" {f.rule}", style="bold")
        title.append(f"  {f.location}", style="magenta")
        if f.end_line:
            title.append(f"-{f.end_line}", style="magenta")
        title.append(f"\n       {f.title}")
        parts.append(title)
        parts.append(Padding(Text(f.message), (0, 0, 0, 7)))
    if report.alignment:
        table = Table(title="\nCUDA ↔ NKI alignment", title_justify="left", show_lines=False, expand=False)
        table.add_column("role")
        table.add_column("CUDA lines", justify="right")
        table.add_column("CUDA")
        table.add_column("NKI lines", justify="right")
        table.add_column("NKI")
        for pair in report.alignment:
            style = "dim" if pair.match == "unmatched" else ""
            # Text, not str: labels quote source code (`acc[i]`, `x[rows, :]`) that Rich would read as markup.
            table.add_row(*(Text(cell) for cell in (pair.title, _ranges_text(pair.cuda), pair.cuda_label,
                                                    _ranges_text(pair.nki), pair.nki_label)), style=style)
        parts.append(table)
    return Group(*parts)

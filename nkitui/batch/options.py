"""The options of a batch: what every task's evaluation is asked to do (the `nkitui check` options
that make sense per batch), and a stable key for them (resume matches results on it)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nkitui.evaluate.run import EvaluationRequest
from nkitui.executor.limits import DEFAULT_MEMORY_MB

from nkitui.common.names import BACKEND_CHOICES as BACKENDS
from nkitui.common.names import TARGET_NAMES as TARGETS
from nkitui.common.names import unknown

# Options that change a verdict and so belong in the resume key; store and display options do not.
_KEY_FIELDS = ("backend", "target", "seeds", "timeout_s", "memory_mb", "static", "trials", "precision", "mutants")


@dataclass(frozen=True)
class BatchOptions:
    backend: str = "auto"
    target: str | None = None  # None: each task's own
    seeds: int | None = None  # None: each task's own; N: seeds 0..N-1
    timeout_s: float | None = None  # None: each task's evaluation.timeout_s (else 300 s)
    memory_mb: int = DEFAULT_MEMORY_MB
    static: bool = True
    trials: bool = True
    precision: bool = True
    mutants: bool = False
    store: bool = True  # keep every result in the run store (resume and the aggregate need it)
    store_root: Path | None = None  # None: the XDG data folder
    extra_env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # tests: fake SDK
    python_path: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(unknown("backend", self.backend, BACKENDS))
        if self.target is not None and self.target not in TARGETS:
            raise ValueError(unknown("target", self.target, TARGETS))

    def request(self, task_dir: Path) -> EvaluationRequest:
        """The same request `nkitui check` builds from its options (results are stored by the batch
        itself, in the process that drives it, so `store` is off here)."""
        # flat keywords: EvaluationRequest.of (the frozen options record) where it exists, else the constructor
        build = getattr(EvaluationRequest, "of", EvaluationRequest)
        return build(
            task_dir, backend=self.backend, target=self.target, seeds=self.seeds, timeout_s=self.timeout_s,
            memory_mb=self.memory_mb, static=self.static, trials=self.trials, precision=self.precision,
            mutants=self.mutants, store=False, extra_env=dict(self.extra_env), python_path=list(self.python_path),
        )

    def key_fields(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: d[k] for k in _KEY_FIELDS}

    def key(self) -> str:
        """12 hex digits that change whenever an option that can change a verdict changes."""
        text = json.dumps(self.key_fields(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def with_store(self, root: Path | None) -> "BatchOptions":
        return replace(self, store_root=root)

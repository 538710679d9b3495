"""The evaluation contract: one frozen record of what to evaluate and how, built by the command line
or the app and read, unchanged, by the evaluator in the worker.

    options = EvaluationOptions(backend="emulator", seeds=2, mutants=True)
    request = EvaluationRequest(Path("rmsnorm"), options, timeout_s=60)
    request.options is what the worker decodes (nkitui.common.codec: encode / decode, strict: an
    unknown field is an error, never silently dropped)

EvaluationRequest adds what only the starter uses (limits, the run store, the environment).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from dataclasses import fields as fields_of
from pathlib import Path
from typing import Any

from nkitui.executor.limits import DEFAULT_MEMORY_MB
from nkitui.executor.timing import TimingPolicy



@dataclass(frozen=True)
class EvaluationOptions:
    backend: str = "auto"  # auto | emulator | simulator | neuron (checked when the backend is chosen)
    target: str | None = None  # trn1 | trn2 | trn3; None: the task's own
    seeds: tuple[int, ...] | int | None = None  # None: the task's; an int N: seeds 0..N-1
    precise: bool = True  # the seeds run with low-precision storage on (as the device does)
    static: bool = True  # static analysis of the port
    trials: bool = True  # adversarial inputs
    precision: bool = True  # precise off vs on
    goldens: bool = True  # the recorded GPU outputs, when the task has them
    mutants: bool = False  # mutation testing of the tolerance (slower, opt-in)
    max_mutants_per_operator: int = 2
    timing: TimingPolicy | None = None  # hardware timing (the neuron backend); None: the defaults

    def resolve_seeds(self, task_seeds: Any) -> list[int]:
        """The seeds a run uses: the task's own (None), the first N (an int), or those listed."""
        return resolve_seeds(self.seeds, task_seeds)


def resolve_seeds(requested: int | tuple[int, ...] | list[int] | None, task_seeds: Any) -> list[int]:
    if requested is None:
        return list(task_seeds)
    if isinstance(requested, int):
        return list(range(requested))
    return [int(s) for s in requested]


@dataclass(frozen=True)
class EvaluationRequest:
    task_dir: Path
    options: EvaluationOptions = field(default_factory=EvaluationOptions)
    timeout_s: float | None = None  # None: the task's evaluation.timeout_s, else 300 s
    memory_mb: int | None = DEFAULT_MEMORY_MB  # each process of the run (evaluator, kernel, reference)
    cpu_s: int | None = None
    store: bool = True  # save the result in the run store
    store_root: Path | None = None  # None: the XDG data folder
    extra_env: tuple[tuple[str, str], ...] = ()  # still filtered for secrets
    python_path: tuple[str, ...] = ()

    @classmethod
    def of(cls, task_dir: Path | str, **fields: Any) -> "EvaluationRequest":
        """A request from flat keywords, each going to the record that owns it, e.g.
        `EvaluationRequest.of(path, backend="emulator", seeds=2, timeout_s=60, store=False)`."""
        names = {f.name for f in fields_of(EvaluationOptions)}
        options = {k: v for k, v in fields.items() if k in names}
        rest = {k: v for k, v in fields.items() if k not in names}
        if isinstance(options.get("seeds"), list):
            options["seeds"] = tuple(options["seeds"])
        if isinstance(options.get("timing"), dict):
            options["timing"] = TimingPolicy(**options["timing"])
        if isinstance(rest.get("extra_env"), dict):
            rest["extra_env"] = tuple(rest["extra_env"].items())
        if isinstance(rest.get("python_path"), list):
            rest["python_path"] = tuple(rest["python_path"])
        return cls(Path(task_dir), EvaluationOptions(**options), **rest)

    def with_options(self, **changes: Any) -> "EvaluationRequest":
        return replace(self, options=replace(self.options, **changes))

    @property
    def env(self) -> dict[str, str]:
        return dict(self.extra_env)

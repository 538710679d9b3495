"""Helpers shared by the backends that drive the AWS Neuron SDK (simulator, neuron)."""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from typing import Any, Iterator

from nkitui.executor.backends.base import BackendUnavailable
from nkitui.executor.backends.detect import Probe


def sdk_namespace(task_namespace: str | None, probe: Probe) -> str:
    """"legacy" or "new": the namespace the kernel is written for, or the available one."""
    if task_namespace in ("legacy", "new"):
        return task_namespace
    return "new" if probe.new.available else "legacy"


def sdk_module(namespace: str, probe: Probe) -> Any:
    """The SDK's `nki` (new) or `neuronxcc.nki` (legacy) module; BackendUnavailable if missing."""
    pkg = probe.new if namespace == "new" else probe.legacy
    if not pkg.available:
        other = probe.legacy if namespace == "new" else probe.new
        hint = (f"; the other namespace ({other.module}) is available, but the kernel is written for "
                f"{pkg.module}" if other.available else "")
        raise BackendUnavailable(f"the kernel needs {pkg.module} from the Neuron SDK, which is {pkg.note or 'missing'}{hint}")
    return importlib.import_module(pkg.module)


@contextmanager
def env_override(**values: str | None) -> Iterator[None]:
    """Set (or, with None, unset) environment variables for the duration of a block."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def target_env(target: str) -> str:
    """NEURON_PLATFORM_TARGET_OVERRIDE value for a task target."""
    return {"trn1": "trn1", "trn2": "trn2", "trn3": "trn3"}.get(target, target)

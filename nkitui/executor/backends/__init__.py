"""Backends that run a task's kernel inside the worker: emulator, simulator (AWS SDK on CPU),
neuron (a Trainium device). `choose_backend` implements `auto` and says why."""

from __future__ import annotations

from nkitui.common.names import BACKEND_CHOICES as BACKENDS
from nkitui.executor.backends.base import Backend, BackendRun, BackendUnavailable, KernelLoadError, OutputError, ProfileOutcome
from nkitui.executor.backends.select import Choice, choose_backend, make_backend

__all__ = [
    "BACKENDS", "Backend", "BackendRun", "BackendUnavailable", "Choice", "KernelLoadError", "OutputError",
    "ProfileOutcome", "choose_backend", "make_backend",
]

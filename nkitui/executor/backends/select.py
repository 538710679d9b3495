"""`auto` and explicit backend choice, each with its reason in words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nkitui.common.names import BACKEND_CHOICES as BACKENDS
from nkitui.executor.backends.base import Backend, BackendUnavailable
from nkitui.executor.backends.detect import Probe
from nkitui.task.model import Task


@dataclass(frozen=True)
class Choice:
    name: str  # "emulator" | "simulator" | "neuron"
    reason: str


def _sdk_words(probe: Probe, namespace: str | None) -> tuple[bool, str]:
    """(usable, description) of the SDK for a kernel of `namespace`."""
    pkg = probe.sdk_for(namespace)
    if pkg is not None:
        fake = " (fake SDK, tests only)" if pkg.fake else ""
        return True, f"the Neuron SDK ({pkg.module} {pkg.version or 'version unknown'}{fake})"
    if namespace in ("legacy", "new"):
        need = "neuronxcc.nki" if namespace == "legacy" else "nki"
        other = probe.new if namespace == "legacy" else probe.legacy
        extra = f"; only {other.module} is, and the kernel is written for {need}" if other.available else ""
        wanted = probe.legacy if namespace == "legacy" else probe.new
        return False, f"no usable {need} from the Neuron SDK ({wanted.note or 'missing'}{extra})"
    return False, f"no Neuron SDK importable ({probe.describe_sdk()})"


def choose_backend(requested: str, probe: Probe, namespace: str | None) -> Choice:
    """The backend to use. Raises BackendUnavailable (with what is missing) for an explicit request
    that cannot be met, or ValueError for an unknown name."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}: use one of {', '.join(BACKENDS)}")
    sdk_ok, sdk_text = _sdk_words(probe, namespace)
    if requested == "emulator":
        return Choice("emulator", "requested (--backend emulator): nkitui's built-in emulator")
    if requested == "simulator":
        if not sdk_ok:
            raise BackendUnavailable(f"the simulator backend needs the Neuron SDK's NKI package: {sdk_text}")
        return Choice("simulator", f"requested (--backend simulator): {sdk_text} simulates the kernel on the CPU")
    if requested == "neuron":
        missing = []
        if not probe.has_device:
            missing.append(probe.device_note or "no Neuron device")
        if not sdk_ok:
            missing.append(sdk_text)
        if missing:
            raise BackendUnavailable("the neuron backend needs a Neuron device and the Neuron SDK: " + "; ".join(missing))
        return Choice("neuron", f"requested (--backend neuron): {probe.device_note} with {sdk_text}")
    # auto
    if probe.has_device and sdk_ok:
        return Choice("neuron", f"auto: {probe.device_note} and {sdk_text}: running on hardware")
    if sdk_ok:
        return Choice("simulator", f"auto: {sdk_text} is importable but {probe.device_note or 'no device'}: using the SDK's CPU simulator")
    if probe.has_device:
        return Choice("emulator", f"auto: {probe.device_note}, but {sdk_text}: using the built-in emulator")
    return Choice("emulator", f"auto: {probe.device_note or 'no Neuron device'} and {sdk_text}: using the built-in emulator")


def make_backend(choice: Choice, task: Task, target: str, probe: Probe, **options: Any) -> Backend:
    if choice.name == "emulator":
        from nkitui.executor.backends.emulator import EmulatorBackend

        return EmulatorBackend(task, target, choice.reason)
    if choice.name == "simulator":
        from nkitui.executor.backends.simulator import SimulatorBackend

        return SimulatorBackend(task, target, choice.reason, probe=probe)
    if choice.name == "neuron":
        from nkitui.executor.backends.neuron import NeuronBackend

        return NeuronBackend(task, target, choice.reason, probe=probe, timing=options.get("timing"))
    raise ValueError(f"unknown backend {choice.name!r}")

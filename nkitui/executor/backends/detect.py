"""What this machine offers for running NKI kernels: Neuron devices, the Neuron SDK's NKI packages,
and the profiler tools on PATH.

    probe = probe_environment()           # in the worker: imports the SDK packages to be sure
    probe.to_dict()                       # what was found, in a form the run result keeps

Real vs not real: a package named `nki` or `neuronxcc` can be (a) the real SDK, (b) the PyPI
placeholder, which raises ImportError when imported, or (c) nkitui's own emulator after
`emulator.install()`. Only (a) counts. The fake SDK under tests/fakes/ declares
`__nkitui_fake__ = True`; it counts as an SDK (so the simulator/neuron paths can be tested) and
is the only thing that makes NKITUI_FAKE_NEURON_DEVICE (test-only: pretend a Trn device is
present) take effect.
"""

from __future__ import annotations

import glob
import importlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any

from nkitui.common.codec import Record

FAKE_DEVICE_ENV = "NKITUI_FAKE_NEURON_DEVICE"
TOOLS = ("neuron-explorer", "neuron-profile", "neuron-ls")
_NKITUI_PREFIX = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


@dataclass
class SdkPackage(Record):
    module: str  # "nki" or "neuronxcc.nki"
    available: bool
    version: str | None = None
    fake: bool = False
    note: str = ""  # why it is not available, in words


@dataclass
class Probe(Record):
    devices: list[str] = field(default_factory=list)
    device_note: str = ""
    new: SdkPackage = field(default_factory=lambda: SdkPackage("nki", False))
    legacy: SdkPackage = field(default_factory=lambda: SdkPackage("neuronxcc.nki", False))
    tools: dict[str, str | None] = field(default_factory=dict)

    @property
    def sdk_available(self) -> bool:
        return self.new.available or self.legacy.available

    @property
    def has_device(self) -> bool:
        return bool(self.devices)

    @property
    def fake(self) -> bool:
        return self.new.fake or self.legacy.fake

    def sdk_for(self, namespace: str | None) -> SdkPackage | None:
        """The SDK package a kernel of `namespace` needs ("legacy" | "new" | None = either)."""
        if namespace == "legacy":
            return self.legacy if self.legacy.available else None
        if namespace == "new":
            return self.new if self.new.available else None
        return self.new if self.new.available else (self.legacy if self.legacy.available else None)

    def describe_sdk(self) -> str:
        parts = []
        for pkg in (self.new, self.legacy):
            if pkg.available:
                parts.append(f"{pkg.module} {pkg.version or '(version unknown)'}{' (fake, for tests)' if pkg.fake else ''}")
            else:
                parts.append(f"{pkg.module}: {pkg.note}")
        return "; ".join(parts)


def _is_emulator(module: Any) -> bool:
    path = getattr(module, "__file__", None) or ""
    return os.path.abspath(path).startswith(_NKITUI_PREFIX) or bool(getattr(module, "__nkitui_emulator__", False))


def probe_package(module_name: str) -> SdkPackage:
    """Import `module_name` to learn whether it is a usable Neuron SDK package."""
    existing = sys.modules.get(module_name)
    if existing is not None and _is_emulator(existing):
        return SdkPackage(module_name, False, note="only nkitui's emulator provides it in this process")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, ModuleNotFoundError) and exc.name and module_name.startswith(exc.name):
            return SdkPackage(module_name, False, note="not installed")
        # The PyPI names nki / neuronx-cc are placeholders that raise ImportError on import.
        return SdkPackage(module_name, False, note=f"installed but not importable (the PyPI placeholder?): {text}")
    except Exception as exc:  # noqa: BLE001 - a broken install must not stop the run
        return SdkPackage(module_name, False, note=f"import failed: {type(exc).__name__}: {exc}")
    if _is_emulator(module):
        return SdkPackage(module_name, False, note="only nkitui's emulator provides it")
    version = getattr(module, "__version__", None)
    if version is None and module_name == "neuronxcc.nki":
        version = getattr(sys.modules.get("neuronxcc"), "__version__", None)
    fake = bool(getattr(module, "__nkitui_fake__", False))
    return SdkPackage(module_name, True, version=str(version) if version is not None else None, fake=fake)


def find_devices(fake_allowed: bool) -> tuple[list[str], str]:
    devices = sorted(glob.glob("/dev/neuron*"))
    if devices:
        return devices, f"{len(devices)} Neuron device(s): {', '.join(devices[:4])}{' ...' if len(devices) > 4 else ''}"
    fake = os.environ.get(FAKE_DEVICE_ENV, "").strip()
    if fake:
        if fake_allowed:
            return [f"fake:{fake}"], f"a fake {fake} device ({FAKE_DEVICE_ENV}, tests only)"
        return [], f"no Neuron device (/dev/neuron* absent); {FAKE_DEVICE_ENV} is ignored without the fake SDK"
    return [], "no Neuron device (/dev/neuron* absent)"


def find_tools() -> dict[str, str | None]:
    return {name: shutil.which(name) for name in TOOLS}


def probe_environment() -> Probe:
    new = probe_package("nki")
    legacy = probe_package("neuronxcc.nki")
    devices, note = find_devices(fake_allowed=new.fake or legacy.fake)
    return Probe(devices=devices, device_note=note, new=new, legacy=legacy, tools=find_tools())


def probe_isolated(extra_env: dict[str, str] | None = None, python_path: list[str] | None = None,
                   timeout: float = 60.0) -> Probe:
    """probe_environment() run in a child process with a run's scrubbed environment: what a worker
    will see, without importing the Neuron SDK into the calling process (the UI)."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from nkitui.executor.env import scrubbed_env

    package_parent = str(Path(__file__).resolve().parent.parent.parent.parent)
    with tempfile.TemporaryDirectory(prefix="nkitui-probe-") as tmp:
        scratch = Path(tmp)
        (scratch / "home").mkdir()
        (scratch / "tmp").mkdir()
        env = scrubbed_env(scratch=scratch, extra=extra_env, python_path=[*(python_path or []), package_parent])
        proc = subprocess.run([sys.executable, "-P", "-m", "nkitui.executor.backends.detect"], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the backend probe failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return Probe.from_dict(json.loads(proc.stdout))


def main() -> int:
    import json

    print(json.dumps(probe_environment().to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

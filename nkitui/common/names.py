"""The one vocabulary of names a user types: backends, hardware targets and element types.

Every place that accepts or checks one of these names (argparse choices, config.toml, task.toml, batch
options, the executor's backend choice) reads it from here, so the command line, the app and the
manifest validator can never disagree on what is valid, and their error messages list the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

# Backends that run a kernel (docs/executor.md): the embedded emulator, the AWS simulator from the
# Neuron SDK, a Neuron device. "auto" picks the best available one and says why.
BACKEND_NAMES: tuple[str, ...] = ("emulator", "simulator", "neuron")
AUTO = "auto"
BACKEND_CHOICES: tuple[str, ...] = (AUTO, *BACKEND_NAMES)  # what a user may ask for

# NeuronCore generations a task may target; hardware numbers per target are in common/hardware.py.
TARGET_NAMES: tuple[str, ...] = ("trn1", "trn2", "trn3")
DEFAULT_TARGET: Final = "trn2"  # what a task that names no target, and the emulator, assume
# Other spellings accepted where the Neuron SDK accepts them (NEURON_PLATFORM_TARGET_OVERRIDE, spec §1.3).
TARGET_ALIASES: Mapping[str, str] = MappingProxyType({
    "trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2", "trn3": "trn3", "gen4": "trn3",
})

# Element types a task declares for inputs and outputs, as manifests spell them, in the order docs list
# them. tfloat32 has no storage type of its own (it lives in 4 bytes), so tasks declare float32.
FLOAT_DTYPE_NAMES: tuple[str, ...] = (
    "float32", "float16", "bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
)
DTYPE_NAMES: tuple[str, ...] = (
    *FLOAT_DTYPE_NAMES, "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool",
)
DTYPE_ALIASES: Mapping[str, str] = MappingProxyType({
    "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32",
})


def one_of(names: Iterable[str]) -> str:
    """The fix hint every validator gives: "use one of a, b, c"."""
    return f"use one of {', '.join(names)}"


def unknown(kind: str, value: object, names: Iterable[str]) -> str:
    """`unknown backend 'x'; use one of auto, emulator, simulator, neuron`."""
    return f"unknown {kind} {value!r}; {one_of(names)}"

"""Stand-in for nki-library's `test/utils/scripts/remote_lock_scripts.py`, which its harness imports
(core_lock_client.py) but the public repository does not contain at 2026-04-13. It serves only the
locking of NeuronCores on remote hardware hosts, which simulation never reaches: the names exist so
that the harness imports; using them says why they cannot work here."""

from __future__ import annotations

import enum

_WHY = ("remote NeuronCore locking needs the suite's test/utils/scripts/remote_lock_scripts.py (absent from "
        "the public repository) and a hardware host")


class LockStatus(enum.Enum):
    ALLOCATED = 0
    DRAINED = 1
    UNDRAINED = 2
    DRAINING = 3
    NO_CORES = 4
    FLOCK_TIMEOUT = 5
    ERROR = 6

    @property
    def exit_code(self) -> int:
        raise NotImplementedError(_WHY)

    @classmethod
    def from_exit_code(cls, code: int) -> LockStatus:
        raise NotImplementedError(_WHY)


class LockResult:
    def __init__(self, *args, **kwargs) -> None:
        raise NotImplementedError(_WHY)

    @classmethod
    def from_json(cls, text: str) -> LockResult:
        raise NotImplementedError(_WHY)

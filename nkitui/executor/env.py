"""The environment a worker (and so the untrusted kernel) gets: an allowlist, never the user's own.

Kept: what Python, numpy and the Neuron tools need to work (PATH, locale, terminal, timezone,
PYTHONPATH, virtualenv, library path, NEURON_*/NKI_* settings). Dropped: everything else, in
particular AWS_* credentials, tokens, secrets, passwords, keys, SSH/GPG agent sockets and git
settings. Even an allowlisted name is dropped when it looks like a secret (e.g. NEURON_API_TOKEN).
HOME and TMPDIR point into the run's scratch folder so tools that look for ~/.aws, ~/.ssh or
~/.netrc find nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TERM", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
    "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
})
ALLOWED_PREFIXES = ("LC_", "NEURON_", "NKI_", "NKITUI_FAKE_")
SECRET_PATTERN = re.compile(
    r"(TOKEN|SECRET|PASSW|PASSWD|KEY|CREDENTIAL|SESSION|COOKIE|AUTH|PRIVATE)", re.IGNORECASE
)
DENIED_PREFIXES = ("AWS_", "SSH_", "GPG_", "GIT_", "GH_", "GITHUB_")

# One thread per math library: reproducible timings and a small address space under RLIMIT_AS
# (each BLAS thread reserves its own stack and buffers).
THREAD_LIMITS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def is_denied(name: str) -> bool:
    """True for a variable that must never reach a kernel, whatever the caller asks."""
    upper = name.upper()
    return upper.startswith(DENIED_PREFIXES) or bool(SECRET_PATTERN.search(upper))


def is_allowed(name: str) -> bool:
    return (name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)) and not is_denied(name)


def scrubbed_env(
    source: Mapping[str, str] | None = None,
    *,
    scratch: Path,
    extra: Mapping[str, str] | None = None,
    python_path: list[str] | None = None,
) -> dict[str, str]:
    """The worker's environment.

    source: the parent's environment (default os.environ); only allowlisted names pass.
    scratch: the run's scratch folder; HOME is scratch/home and TMPDIR scratch/tmp.
    extra: caller additions (e.g. a test's PYTHONPATH); secret-looking names are still dropped.
    python_path: folders put in front of PYTHONPATH (the folder that holds the nkitui package).
    """
    src = os.environ if source is None else source
    env = {k: v for k, v in src.items() if is_allowed(k)}
    env.update(THREAD_LIMITS)
    for key, value in (extra or {}).items():
        if not is_denied(key):
            env[key] = value
    if python_path:
        parts = [p for p in python_path if p]
        if env.get("PYTHONPATH"):
            parts.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(scratch / "home")
    env["TMPDIR"] = str(scratch / "tmp")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ next to the task copy
    env["PYTHONIOENCODING"] = "utf-8:backslashreplace"
    # `nki.benchmark` on the emulator reports the cost model's estimate instead of host wall time
    env.setdefault("NKITUI_LATENCY_ESTIMATOR", "nkitui.perf")
    return env

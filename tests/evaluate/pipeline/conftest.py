"""The pipeline's end-to-end tests build their tasks with the executor tests' helpers (tests.executor.conftest)."""

from __future__ import annotations

# the same autouse fixture as the executor tests: run results and caches stay out of the user's folders
from tests.executor.conftest import isolated_dirs  # noqa: F401

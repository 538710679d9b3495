"""The executor tests build their tasks with tests.helpers.evaluation (re-exported here for the
tests that import them from this conftest); the root conftest isolates their XDG folders."""

from __future__ import annotations

from tests.helpers.evaluation import (  # noqa: F401 - re-exported
    ADD_KERNEL, FAKE_BIN, FAKE_PLACEHOLDER, FAKE_SDK, FAKES, HEADER, REFERENCE, add_task_manifest, fake_sdk_env,
    git_init, quick_request, write_task,
)

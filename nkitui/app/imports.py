"""The import lock of worker threads lives with the session (nkitui.session.imports); the app's
workers take the same one."""

from __future__ import annotations

from nkitui.session.imports import WORKER_IMPORTS

__all__ = ["WORKER_IMPORTS"]

"""Locate the bundled data folders (themes/, sample_tasks/) in a checkout or an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def bundled_dir(name: str) -> Path:
    """Return the bundled folder `name` ("themes" or "sample_tasks").

    A wheel carries it as nkitui/_data/<name>; an editable install or a checkout has it at the
    repository root, beside the package.
    """
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"bundled folder {name!r} not found beside the nkitui package ({_PACKAGE_DIR}); "
        "reinstall nkitui (pip install -e .) from a complete checkout"
    )

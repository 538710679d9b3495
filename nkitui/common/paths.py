"""Where nkitui keeps its own files (XDG base directories through platformdirs).

Tests point these elsewhere by setting XDG_CONFIG_HOME / XDG_STATE_HOME / XDG_DATA_HOME /
XDG_CACHE_HOME, which platformdirs honours on Linux.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "nkitui"


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME))


def state_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP_NAME))


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME))


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME))

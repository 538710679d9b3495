"""One vocabulary of backend, target and dtype names: the command line, the app's config, task manifests,
batch options and the executor all accept exactly the names in nkitui.common.names."""
from __future__ import annotations

import argparse

import pytest

from nkitui.app.config import parse_config
from nkitui.batch.options import BatchOptions
from nkitui.cli import build_parser
from nkitui.cli.batch import build_parser as build_batch_parser
from nkitui.common import names
from nkitui.common.hardware import TARGETS as HARDWARE_TARGETS
from nkitui.executor.backends.select import choose_backend
from nkitui.task.dtypes import canonical_dtype_name, numpy_dtype


def _options(parser: argparse.ArgumentParser, path: str = "nkitui"):
    for action in parser._actions:  # argparse has no public walk of sub-commands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        for flag in action.option_strings:
            yield path, flag, action


def test_every_backend_and_target_option_offers_the_vocabulary() -> None:
    seen = {"--backend": 0, "--target": 0}
    every = [*_options(build_parser()), *_options(build_batch_parser(), "nkitui batch")]
    for path, flag, action in every:
        if flag == "--backend":
            assert tuple(action.choices) == names.BACKEND_CHOICES, path
            seen[flag] += 1
        elif flag == "--target":
            assert tuple(action.choices) == names.TARGET_NAMES, path
            seen[flag] += 1
    # open, check, batch take --backend; those and emu run, perf estimate/profile/compare/sol take --target
    assert seen["--backend"] >= 3 and seen["--target"] >= 8, seen


def test_the_hardware_table_has_a_row_per_target_name() -> None:
    assert tuple(HARDWARE_TARGETS) == names.TARGET_NAMES
    assert set(names.TARGET_ALIASES.values()) == set(names.TARGET_NAMES)
    assert names.DEFAULT_TARGET in names.TARGET_NAMES


def test_every_dtype_name_has_a_numpy_dtype() -> None:
    for name in names.DTYPE_NAMES:
        assert numpy_dtype(name) is not None
    for alias, name in names.DTYPE_ALIASES.items():
        assert canonical_dtype_name(alias) == name
    assert canonical_dtype_name("float13") is None


@pytest.mark.parametrize("key, value", [("backend", "gpu"), ("target", "trn9")])
def test_config_and_batch_reject_a_name_outside_the_vocabulary_listing_it(key: str, value: str) -> None:
    valid = names.BACKEND_CHOICES if key == "backend" else names.TARGET_NAMES
    config = parse_config(f'{key} = "{value}"\n', "config.toml")
    assert len(config.problems) == 1 and ", ".join(valid) in config.problems[0]
    with pytest.raises(ValueError, match=", ".join(valid)):
        BatchOptions(**{key: value})
    for name in valid:
        assert parse_config(f'{key} = "{name}"\n', "config.toml").problems == ()
        BatchOptions(**{key: name})


def test_the_executor_knows_each_backend_name() -> None:
    from nkitui.executor.backends.detect import probe_environment as probe

    with pytest.raises(ValueError, match=", ".join(names.BACKEND_CHOICES)):
        choose_backend("gpu", probe(), "new")
    assert choose_backend("emulator", probe(), "new").name == "emulator"

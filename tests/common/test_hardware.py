"""One hardware table for the emulator and the cost model, with a source note per number (issue #15 item 4)."""

from dataclasses import fields

import pytest

from nkitui.common.hardware import ALIASES, TARGETS, HardwareTarget, resolve_target
from nkitui.emulator import targets as emulator_targets
from nkitui.perf.hardware import TARGETS as PERF_TARGETS


def test_every_number_has_a_source_note():
    for t in TARGETS.values():
        for f in fields(HardwareTarget):
            if f.name in ("name", "nc_version", "sources"):
                continue
            note = t.source(f.name)
            assert note and ("[" in note or "§" in note), f"{t.name}.{f.name} has no source note"


def test_the_emulator_and_the_cost_model_read_the_same_table():
    for name, hw in TARGETS.items():
        emu = emulator_targets.resolve_target(name)
        spec = PERF_TARGETS[name]
        assert emu is hw  # the emulator's Target is the table's entry, not a copy
        assert spec.hardware is hw
        for f in ("sbuf_bytes_per_partition", "sbuf_usable_bytes_per_partition", "psum_banks", "psum_bank_bytes",
                  "dma_engines", "dma_engine_bytes_per_s", "hbm_core_bytes_per_s", "nc_version"):
            assert getattr(spec, f) == getattr(hw, f), f"{name}.{f}"
        assert spec.clock_hz["tensor"] == hw.tensor_hz and spec.clock_hz["vector"] == hw.vector_hz


def test_trn2_usable_sbuf_is_one_number_with_the_library_budget_noted():
    hw = TARGETS["trn2"]
    assert hw.sbuf_usable_bytes_per_partition == 208 * 1024  # 224 KiB minus the compiler's 16 KiB
    assert "212,728" in hw.source("sbuf_usable_bytes_per_partition")  # nki-library's own budget, noted


def test_aliases_and_errors():
    assert resolve_target("inf2") is TARGETS["trn1"] and resolve_target(" GEN4 ") is TARGETS["trn3"]
    assert set(ALIASES.values()) == set(TARGETS)
    with pytest.raises(ValueError, match="unknown target 'trn9'"):
        resolve_target("trn9")
    with pytest.raises(KeyError):
        TARGETS["trn1"].source("no_such_field")

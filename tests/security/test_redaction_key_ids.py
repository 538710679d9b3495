"""AWS access key ids are redacted in every length a stored log may hold them: the real shape (AKIA/ASIA and
16 characters, 20 in all) and longer runs of the same alphabet (the red-team suite's 21-character canary,
tests/security/conftest.py SECRET, was stored in the clear)."""

from __future__ import annotations

import pytest

from nkitui.common.redact import redact_obj, redact_text

from .conftest import SECRET

REAL = ["AKIA" + "IOSFODNN7EXAMPLQ", "ASIA" + "Y3FDSNQ2XJ7TBWPE", "AKIA" + "0123456789ABCDEF"]


@pytest.mark.parametrize("key", [*REAL, SECRET, "ASIA" + "ZZZZSECRETCANARY7", "AKIA" + "A" * 40])
@pytest.mark.parametrize("around", ["{}", "id={}", "'{}'", "aws_access_key_id = {}\n", "[stdout] {}.", "x {} y"])
def test_key_ids_are_redacted_wherever_they_stand(key, around):
    text = around.format(key)
    out = redact_text(text)
    assert key not in out and "[REDACTED:aws-access-key-id]" in out
    assert key not in str(redact_obj({"log": [text], "detail": text}))


def test_the_suites_canary_is_redacted():
    assert len(SECRET) == 21  # the form that slipped through: one character longer than a real id
    assert redact_text(f"found {SECRET}") == "found [REDACTED:aws-access-key-id]"


@pytest.mark.parametrize("line", [
    "AKIAshort is not a key",
    "AKIA" + "0123456789ABCDE",  # 15 after the prefix: not the shape
    "ASIAN partition layout 128x512",
    "xAKIA" + "0123456789ABCDEF",  # inside a longer word
])
def test_near_misses_stay(line):
    assert redact_text(line) == line

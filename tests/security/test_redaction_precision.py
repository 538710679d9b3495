"""Redaction is precise: real credentials in `name = value` form are caught, while ordinary kernel
output that merely has a password- or token-like word before a colon stays as it was (a redacted
"passwd: PermissionError" hid the reason a kernel failed from the auditor)."""

from __future__ import annotations

import pytest

from nkitui.common.redact import redact_obj, redact_text


@pytest.mark.parametrize("line", [
    "passwd: PermissionError",
    "open /etc/passwd: PermissionError: [Errno 13] Permission denied: '/etc/passwd'",
    "secret: FileNotFoundError",
    "token: NotImplementedError_in_kernel",
    "password: KeyboardInterrupt",
    "api_key: None",
    "api_key = null",
    "password: required",
    "password = <your password here>",
    "token: ${HF_TOKEN}",
    "secret_key: [REDACTED:secret]",
    "access_key: ~/.aws/credentials",
    "private_key: ./keys/id_ed25519",
    "max_tokens: 4096",
    "tokens_per_partition: 128",
    "tokenizer: bert-base-uncased-whole-word-masking",
    "config.token: tile_size_multiplier_value",
    "Bearer tokenization_strategy_fast",
    "basic block_size_multiplier_x",
    "token definitely_not_a_token_value",
    "token: numpy.ndarray",
    "secret: torch.Tensor",
    "the secret: tile by 128 partitions and accumulate in PSUM",
])
def test_ordinary_words_after_a_credential_like_name_are_left_alone(line):
    assert redact_text(line) == line


@pytest.mark.parametrize("line, secret, kind", [
    ('password = "hunter2hunter2"', "hunter2hunter2", "secret"),
    ("password: correct-horse-battery-staple", "correct-horse-battery-staple", "secret"),
    ("DB_PASSWD=Tr0ub4dor&3", "Tr0ub4dor&3", "secret"),
    ("passphrase: 'Ab3$kLm9!pQ'", "Ab3$kLm9!pQ", "secret"),
    ("export SECRET_TOKEN=Zm9vYmFyYmF6cXV4cXV1eA==", "Zm9vYmFyYmF6cXV4cXV1eA==", "secret"),
    ('{"api_key": "sk9f8e7d6c5b4a3f2e1d0c"}', "sk9f8e7d6c5b4a3f2e1d0c", "secret"),
    ("SECRET_KEY = 'django-insecure-8f3k2j4h5g6f7d8s9a0'", "django-insecure-8f3k2j4h5g6f7d8s9a0", "secret"),
    ("client_secret: AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOpQrStUvWx", "secret"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "aws-secret"),
    ("Authorization: Bearer abcDEF123ghiJKL456mno", "abcDEF123ghiJKL456mno", "authorization"),
    ("x-api-key: 0123456789abcdef0123", "0123456789abcdef0123", "authorization"),
    ("Authorization: token 0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef", "authorization"),
    ("key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE", "aws-access-key-id"),
])
def test_real_credentials_are_redacted_and_the_rest_of_the_line_kept(line, secret, kind):
    out = redact_text(line)
    assert secret not in out and f"[REDACTED:{kind}]" in out, out
    assert out.split("[REDACTED")[0] == line.split(secret)[0], "the name, separator and quote stay"


def test_a_log_keeps_the_reason_a_kernel_failed():
    log = ["kernel.py:12: reading /etc/passwd", "passwd: PermissionError: [Errno 13] Permission denied",
           "password=s3cr3tPassw0rd!"]
    out = redact_obj({"log": log})["log"]
    assert out[:2] == log[:2]
    assert out[2] == "password=[REDACTED:secret]"


def test_terminal_controls_and_bidi_overrides_become_visible_pictures():
    from nkitui.common.redact import neutralize_obj

    text = "ESC \x1b]52;c;cHduZWQ=\x07 \x1b[31mRED\x1b[0m \x9b2J \u202eDESSAP\x7f\ttab\nnext\r"
    out = redact_text(text)
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out and "\u202e" not in out and "\x7f" not in out
    assert out == "ESC \u241b]52;c;cHduZWQ=\u2407 \u241b[31mRED\u241b[0m <U+009B>2J <U+202E>DESSAP\u2421\ttab\nnext\r"
    assert neutralize_obj({"k\x1b": ["\x1b[2K", 1, None]}) == {"k\u241b": ["\u241b[2K", 1, None]}
    assert redact_text("plain text, tabs\tand newlines\n") == "plain text, tabs\tand newlines\n"


def test_unicode_line_separators_and_bidi_marks_become_visible():
    """Red team, round 9: U+2028 reached the stored log raw (a line break to some viewers, none to the log's
    own line count), so a kernel's forged "[phase] ... ok" line could start mid-line."""
    out = redact_text("x\u2028[phase] compare ok\u2029 \u200eL\u200fR\u061c")
    assert out == "x<U+2028>[phase] compare ok<U+2029> <U+200E>L<U+200F>R<U+061C>"

"""Secret redaction for everything nkitui stores or commits: run logs, run results, cited runs.

A kernel that found a credential (it should not be able to: see nkitui.executor.confine, but the
layers may be degraded on some hosts) would print it; the log goes into the run result, the result
into the run store and, when a review cites the run, into the task repository for everyone to read.
Known secret shapes are replaced by `[REDACTED:<kind>]` before any of that happens.

    redact_text("key AKIAIOSFODNN7EXAMPLE")   -> "key [REDACTED:aws-access-key-id]"
    redact_obj(result_dict)                   every string in a JSON-like value; lists of log lines
                                              keep private-key blocks redacted across lines
    LineRedactor().line(text)                 the same for a stream of lines (the live log)

Shapes: AWS access key ids (AKIA/ASIA/...), aws_secret_access_key / aws_session_token values,
GitHub (ghp_/gho_/ghu_/ghs_/ghr_, github_pat_), GitLab (glpat-), Slack (xox?-, webhook URLs),
Google API keys, OpenAI/Anthropic/Hugging Face/npm tokens, JWTs, bearer/basic authorization
values, PEM private-key blocks, and `password|secret|token|api_key = value` pairs whose value looks
like a credential (_plausible: a password has 8+ characters with a digit, a symbol or both cases; a
token 16+ with a digit or a base64 symbol): an exception name, a placeholder, a path or a plain word
after such a name ("passwd: PermissionError", "token: None") is ordinary output and stays.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

_PATTERNS: tuple[tuple[str, str], ...] = (
    # a real id is the prefix and 16 characters (20 in all); longer runs of the same alphabet (a key id with a
    # character appended, a test canary of 21) are redacted too: a secret shape followed by more of itself is
    # still the secret, and no ordinary output is 20+ upper-case letters and digits after these prefixes
    ("aws-access-key-id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|ABIA|ACCA)[A-Z0-9]{16,128}\b"),
    ("github-token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b"),
    ("github-token", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"),
    ("gitlab-token", r"\bglpat-[A-Za-z0-9_\-]{20,}\b"),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}\b"),
    ("slack-webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    ("api-token", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}\b"),
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("private-key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----"),
)
# name = value pairs: only the value is replaced, and only when it looks like a credential (see
# _plausible): "passwd: PermissionError", "token: 5", "secret: FileNotFoundError" are ordinary output.
# The name may not be part of a path or an attribute (/etc/passwd:, config.token:).
_NAME_START = r"(?<![\w/.\-])"
_VALUE_PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("aws-secret", "token", _NAME_START + r"(?i:(aws_secret_access_key|aws_session_token|aws_security_token|secret_access_key))"
                   r"(\s*[=:]\s*|\"\s*:\s*\"|'\s*:\s*')[\"']?([A-Za-z0-9/+=]{16,})"),
    ("authorization", "token", r"\b(?i:(bearer|basic))(\s+)([A-Za-z0-9\-._~+/]{16,}=*)"),
    ("authorization", "token", r"(?i:\b(authorization|x-api-key|x-auth-token)\s*[=:]\s*(?:token\s+)?)()([A-Za-z0-9\-._~+/]{16,}=*)"),
    ("secret", "password", _NAME_START + r"(?i:([a-z0-9_\-]*(?:password|passwd|passphrase|pwd)))"
               r"(\s*[=:]\s*|\"\s*:\s*\"|'\s*:\s*')[\"']?([^\s\"',;]{8,})"),
    ("secret", "token", _NAME_START + r"(?i:([a-z0-9_\-]*(?:secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key|"
               r"client[_\-]?secret|auth[_\-]?key|secret[_\-]?key)))"
               r"(\s*[=:]\s*|\"\s*:\s*\"|'\s*:\s*')[\"']?([A-Za-z0-9/+=_\-.~]{16,})"),
)
_PLACEHOLDER = re.compile(r"(?i)^(?:none|null|nil|true|false|undefined|empty|unset|redacted|hidden|changeme|example|"
                          r"required|optional|missing|not[_\-]?set|x+|\*+|<[^>]*>|\$\{?\w+\}?|%\(?\w+\)?s|\[redacted.*)$")
# a Python type or exception name (PermissionError, FileNotFoundError, KeyboardInterrupt, torch.Tensor)
_TYPE_NAME = re.compile(r"^(?:[a-z_][\w]*\.)*[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Exit|Interrupt|Iteration|"
                        r"Tensor|Array|Type|Dtype)(?![a-z])")
_PATH_LIKE = re.compile(r"^(?:~?/|\.{1,2}/|[A-Za-z]:\\)")


def _plausible(value: str, shape: str) -> bool:
    """Does `value` (after a password/token-like name) look like a real credential?

    password: 8+ characters, not a placeholder, a type name or a path, with a digit, a symbol, or
    both cases (a password may be words: correct-horse-battery-staple has its dashes).
    token: 16+ characters of token alphabet with a digit or a base64 symbol (/+=), or 20+ with both
    cases and no word separators; never a type name (NotImplementedError_in_kernel) or a path."""
    if _PLACEHOLDER.match(value) or _TYPE_NAME.match(value) or _PATH_LIKE.match(value):
        return False
    lower = any(c.islower() for c in value)
    upper = any(c.isupper() for c in value)
    digit = any(c.isdigit() for c in value)
    symbol = any(not c.isalnum() for c in value)
    if shape == "password":
        return digit or symbol or (lower and upper)
    if digit and (lower or upper):
        return True
    if any(c in "/+=" for c in value) and (lower or upper):
        return True
    return lower and upper and len(value) >= 20 and "_" not in value and "-" not in value


# private-key blocks are found by _redact_keys (linear), not in the alternation: there `[\s\S]*?` scanned from
# every BEGIN to the end of the text when no END followed, quadratic in a kernel's 40 KB traceback of BEGIN
# lines (a second of the evaluator's CPU per error event)
_COMBINED = re.compile("|".join(f"(?P<k{i}>{p})" for i, (kind, p) in enumerate(_PATTERNS) if kind != "private-key"))
_KINDS = {f"k{i}": kind for i, (kind, _) in enumerate(_PATTERNS)}
_VALUES = tuple((kind, shape, re.compile(p)) for kind, shape, p in _VALUE_PATTERNS)
_KEY_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")
_KEY_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")
_HINTS = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA", "ABIA", "ACCA", "gh", "glpat", "xox",
          "hooks.slack", "AIza", "sk-", "hf_", "npm_", "eyJ", "PRIVATE KEY", "ecret", "ECRET", "oken", "OKEN", "assw",
          "ASSW", "earer", "EARER", "asic", "ASIC", "pwd", "Pwd", "PWD", "assphr", "ASSPHR", "uthoriz", "UTHORIZ", "pi_key", "pi-key", "PI_KEY", "ccess_key", "CCESS_KEY", "ccess-key")


_HINT = re.compile("|".join(re.escape(h) for h in _HINTS))


def _replace_value(kind: str, shape: str, m: re.Match[str]) -> str:
    if not _plausible(m.group(3), shape):
        return m.group(0)
    lead = m.group(0)[: m.start(3) - m.start(0)]  # the name, the separator and an opening quote stay
    return f"{lead}{_mark(kind)}"


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# Characters a terminal (or a Markdown viewer) acts on instead of showing: C0 controls but tab, newline
# and carriage return, DEL, C1 controls (U+009B is a CSI to some terminals), bidirectional overrides
# and isolates and the marks that reorder text like them (text that reads one way and is stored another), and
# the Unicode line and paragraph separators (U+2028/U+2029: a line break to some viewers, none to the log's
# line count, so a forged line could start mid-line). A kernel's output with ESC sequences
# could move the auditor's cursor, print a fake "PASSED", set the window title or write the clipboard
# (OSC 52); each becomes a visible picture of itself (ESC: U+241B) before anything shows or stores it.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _picture(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: ␛ for ESC, ␇ for BEL
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def neutralize_controls(text: str) -> str:
    """`text` with terminal control characters and bidi overrides shown as visible pictures."""
    return _CONTROL.sub(_picture, text) if _CONTROL.search(text) else text


def neutralize_obj(value: Any) -> Any:
    """A copy of a JSON-like value with terminal controls made visible in every string (no redaction:
    for data whose strings must otherwise stay exact, such as digests and ids)."""
    if isinstance(value, str):
        return neutralize_controls(value)
    if isinstance(value, dict):
        return {neutralize_controls(k) if isinstance(k, str) else k: neutralize_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [neutralize_obj(v) for v in value]
    return value


def redact_text(text: str) -> str:
    """`text` with every known secret shape replaced by [REDACTED:<kind>] and every terminal control
    character made visible (neutralize_controls): what a kernel prints is data, never a command to the
    auditor's terminal."""
    if not text:
        return text
    text = neutralize_controls(text)
    if not _HINT.search(text):  # the common case: nothing that could match
        return text
    out = _COMBINED.sub(lambda m: _mark(_KINDS[m.lastgroup or ""]), _redact_keys(text))
    for kind, shape, pattern in _VALUES:
        out = pattern.sub(partial(_replace_value, kind, shape), out)
    return out


def _redact_keys(text: str) -> str:
    """`text` with every BEGIN ... END private-key block replaced, in one pass: once a BEGIN has no END after
    it, no later BEGIN has one either."""
    if "-----BEGIN" not in text:
        return text
    out: list[str] = []
    pos = 0
    while True:
        begin = _KEY_BEGIN.search(text, pos)
        end = _KEY_END.search(text, begin.end()) if begin is not None else None
        if begin is None or end is None:
            break
        out += [text[pos:begin.start()], _mark("private-key")]
        pos = end.end()
    return "".join(out) + text[pos:] if out else text


class LineRedactor:
    """Redaction over a stream of lines: a private-key block spans lines, so everything from its
    BEGIN line to its END line is replaced."""

    def __init__(self) -> None:
        self.in_key = False

    def line(self, text: str) -> str:
        if self.in_key:
            if _KEY_END.search(text):
                self.in_key = False
                return _mark("private-key") + _KEY_END.split(text, 1)[-1]
            return _mark("private-key")
        begin = _KEY_BEGIN.search(text)
        if begin and not _KEY_END.search(text, begin.end()):
            self.in_key = True
            return redact_text(text[: begin.start()]) + _mark("private-key")
        return redact_text(text)


def redact_lines(lines: list[str]) -> list[str]:
    r = LineRedactor()
    return [r.line(line) if isinstance(line, str) else line for line in lines]


def redact_obj(value: Any) -> Any:
    """A copy of a JSON-like value with every string redacted (dict keys too); a list of strings
    is redacted as lines, so private-key blocks split over a log's lines are caught."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_text(k) if isinstance(k, str) else k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):
            return redact_lines(list(value))
        return [redact_obj(v) for v in value]
    return value

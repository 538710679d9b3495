"""Write review and draft documents as TOML that reads well in a diff and an editor.

tomli_w does the escaping of strings; this module only chooses the layout: short arrays of
scalars on one line, UTC date-times as 2026-11-30T14:15:02Z, tables and arrays of tables after
the plain keys.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import tomli_w

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def key(name: str) -> str:
    return name if _BARE_KEY.match(name) else tomli_w.dumps({"k": name})[len("k = "):].rstrip("\n")


def value(v: Any) -> str:
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            utc = v.astimezone(dt.timezone.utc)
            return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{utc.microsecond:06d}" if utc.microsecond else "") + "Z"
        return v.isoformat()
    if isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v):
        return "[" + ", ".join(value(x) for x in v) + "]"
    # Multi-line form for text with newlines, except where it would lose a "\r" (TOML normalises CRLF).
    multiline = isinstance(v, str) and "\r" not in v
    return tomli_w.dumps({"v": v}, multiline_strings=multiline)[len("v = "):].rstrip("\n")


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _emit(doc: dict[str, Any], prefix: str, out: list[str]) -> None:
    for k, v in doc.items():
        if not _is_table(v) and not _is_table_array(v):
            out.append(f"{key(k)} = {value(v)}")
    for k, v in doc.items():
        name = f"{prefix}{key(k)}"
        if _is_table(v):
            # a table holding only sub-tables needs no header of its own ([scores.x] defines scores)
            if not v or any(not _is_table(x) and not _is_table_array(x) for x in v.values()):
                out.append("")
                out.append(f"[{name}]")
            _emit(v, name + ".", out)
        elif _is_table_array(v):
            for item in v:
                out.append("")
                out.append(f"[[{name}]]")
                _emit(item, name + ".", out)


def dumps(doc: dict[str, Any]) -> str:
    out: list[str] = []
    _emit(doc, "", out)
    return "\n".join(out).lstrip("\n") + "\n"

"""Requests made safe for the wire: an HTTP client's UTF-8 encoding refuses the lone
surrogates that undecodable file names bring into tool output."""

from __future__ import annotations

import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def wire_safe(value: Any) -> Any:
    """A request as it can go over the wire: every str in it valid Unicode.

    A file name that is not UTF-8 reaches tool output as Python gives names (each
    undecodable byte a lone surrogate, os.fsdecode), which an HTTP client's UTF-8
    encoding refuses, ending the run. The model is shown each such byte as `\\xe9`
    (a form it can write back in bash, `$'caf\\xe9'`); the log and the history keep
    the text as it was, so fingerprints and replays are unaffected.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub(_escaped, value) if _LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {k: wire_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wire_safe(v) for v in value]
    return value

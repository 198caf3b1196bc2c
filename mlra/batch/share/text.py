"""Text from a run made fit for the shared page: secrets redacted, long texts cut to head
and tail, controls marked, and escaped once, where it is written into the page.

Everything a run holds (what the agent wrote, its commands' output, file names, task
text, people's notes) is untrusted: one `html.escape(..., quote=True)` turns every `<`,
`>`, `&`, `"` and `'` into an entity, so no tag, attribute or entity can come from it,
and nothing is ever read as Markdown or made a link. The characters a terminal would
obey, and the bidirectional overrides that reorder what a reader sees (Trojan Source),
are classified as mlra/terminal_text.py classifies them and each is shown as a visible
`⟨U+202E⟩` mark, never written raw. Data for scripts is JSON with `<`, `>`, `&`, U+2028
and U+2029 written as `\\uXXXX`, so no `</script>` can close its element.

Secrets are redacted before anything else (a key cut in half by the cut would show its
half): API keys by their known shapes and the values of `NAME=value` pairs whose name
ends as a secret's does (`OPENAI_API_KEY`, `db_password`), and the values of variables
whose names say KEY, TOKEN, SECRET or PASSWORD in the sharing user's own environment
wherever they appear. The page counts what it redacted by kind.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from collections import Counter
from typing import Any

from mlra.terminal_text import replace_controls

_KEY_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Anthropic key", re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")),
    ("OpenAI-style key", re.compile(r"sk-(?:proj-)?[A-Za-z0-9_\-]{16,}")),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    (
        "private key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    ),
)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
_ASSIGNED = re.compile(
    r"""(?P<name>\b(?:[A-Z0-9_]*KEY|[A-Za-z0-9_]*?(?i:api_?key|access_?key|secret_?key|"""
    r"""private_?key|token|secret|password|passwd)))\b"""
    r"""(?P<sep>["']?\s*[=:]\s*["']?)(?P<value>[^\s"',;]{8,})"""
)
"""`NAME=value` (or `: `) where the name ends as a secret's does: `OPENAI_API_KEY`,
`HF_TOKEN`, `db_password`, `api_key`; not `tokenizer` or `max_tokens`, so code reads
whole."""
MIN_ENV_SECRET = 8
"""An environment value shorter than this is not looked for (`TOKEN=1` would redact
every 1 on the page)."""

REDACTED = "[redacted: {}]"


class Redactor:
    """Redacts secrets from every text written into one page, counting them by kind."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        values = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= MIN_ENV_SECRET}
        self._env: re.Pattern[str] | None = (
            re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)))
            if values
            else None
        )
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        if self._env is not None:
            text = self._sub(self._env, "value of a secret environment variable", text)
        for kind, pattern in _KEY_SHAPES:
            text = self._sub(pattern, kind, text)
        if _SECRET_NAME.search(text) is None:
            return text

        def assigned(m: re.Match[str]) -> str:
            if m.group("value").startswith("[redacted"):
                return m.group()
            self.counts["value of a NAME=value whose name says KEY, TOKEN, SECRET or PASSWORD"] += 1
            return m.group("name") + m.group("sep") + REDACTED.format("value")

        return _ASSIGNED.sub(assigned, text)

    def _sub(self, pattern: re.Pattern[str], kind: str, text: str) -> str:
        def one(_: re.Match[str]) -> str:
            self.counts[kind] += 1
            return REDACTED.format(kind)

        return pattern.sub(one, text)


def _mark(char: str) -> str:
    return f'<span class="ctl">⟨U+{ord(char):04X}⟩</span>'


def esc(text: str) -> str:
    """Untrusted text as page text: escaped once, each control a visible mark."""
    return replace_controls(html.escape(text, quote=True), _mark)


def esc_line(text: str) -> str:
    """As `esc`, on one line: a line break or tab in a name is marked too."""
    return esc(text).replace("\n", _mark("\n")).replace("\t", _mark("\t"))


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def cut(text: str, limit: int) -> tuple[str, str, str | None]:
    """`text` within about `limit` characters: its head, its tail and a marker saying how
    much was left out between them and the SHA-256 of what was (None: nothing cut, all of
    it the head)."""
    if len(text) <= limit:
        return text, "", None
    head = limit * 2 // 3
    tail = limit - head
    left = text[head : len(text) - tail]
    digest = hashlib.sha256(left.encode("utf-8", "surrogatepass")).hexdigest()
    marker = f"{len(left):,} characters ({utf8_size(left):,} bytes) cut, SHA-256 {digest}"
    return text[:head], text[len(text) - tail :], marker


REDACT_MARGIN = 1024
"""Characters past each cut edge redacted with what is kept, so that a key standing on
the edge is matched whole; a cut text is redacted only there (a 1 GB output is not
scanned whole for the few kilobytes the page shows)."""


def block(text: str, limit: int, redact: Redactor) -> tuple[str, bool]:
    """A long text as a `<pre>`'s inner HTML: redacted, cut to `limit`, escaped; and
    whether it was cut."""
    if len(text) <= limit + 2 * REDACT_MARGIN:
        text = redact(text)
    head, tail, marker = cut(text, limit)
    if marker is None:
        return esc(head), False
    if len(text) > limit + 2 * REDACT_MARGIN:  # not redacted yet: the kept ends, with margins
        m = REDACT_MARGIN
        head = redact(text[: len(head) + m])[: len(head)]
        tail = redact(text[len(text) - len(tail) - m :])[-len(tail) :] if tail else ""
    return esc(head) + f'<span class="cut">[… {esc(marker)} …]</span>' + esc(tail), True


def _finite(data: Any) -> Any:
    if isinstance(data, float) and (data != data or data in (float("inf"), float("-inf"))):
        return str(data)
    if isinstance(data, dict):
        return {str(k): _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def json_for_script(data: Any) -> str:
    """JSON to embed in `<script type="application/json">`: ASCII only (every non-ASCII
    character, U+2028 and U+2029 among them, as `\\uXXXX`) and `<`, `>`, `&` escaped
    the same way, so its text can neither end the element nor open a comment."""
    text = json.dumps(
        _finite(data), ensure_ascii=True, sort_keys=True, allow_nan=False, default=str
    )
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

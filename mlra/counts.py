"""Token counts as the displays write them, shared by the console, `mlra runs` and the
headless lines: short ("4.5k"), and marked "~" where the count is mlra's estimate (four
characters a token: the server sent no counts, or a call was cut off) rather than the
server's own, so no estimate passes for a count."""

from __future__ import annotations


def format_tokens(n: int, *, estimated: bool = False) -> str:
    if estimated:
        return "~" + format_tokens(n)
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    if n >= 100_000:
        return f"{n / 1e3:.0f}k"
    return f"{n / 1e3:.1f}k" if n >= 1000 else str(n)

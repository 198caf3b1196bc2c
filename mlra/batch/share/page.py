"""The shared page's frame: its Content-Security-Policy, its one style and one script
(allowed by their SHA-256, nothing else is), and the head every page opens with.

The policy is the first element of `<head>`, before anything a browser could fetch or
run, and allows no network at all: `default-src 'none'` (no fetch, no frame, no font,
no `connect-src`), images only as `data:` URLs, a script and a style only if their
exact text hashes to what the policy names. So were any text of the run to escape its
escaping, no handler it carried would run, no script it named would load and no image
could report the reader's visit. The script only folds and unfolds the `<details>`
blocks; the page reads whole without it.
"""

from __future__ import annotations

import base64
import hashlib

from mlra.batch.compare.overlay import COLOURS

STYLE = (
    """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:72em;padding:0 1em;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f6}.num{text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2em 0;padding:.4em;background:#f7f7f9;border-radius:4px;max-height:40em;overflow:auto}
.ctl{color:#b00;background:#fee;border-radius:2px;font-size:.85em}
.cut{display:block;color:#805b00;background:#fff6d6;margin:.3em 0;font-style:italic}
.dim{color:#777}.lbl{font-size:.85em;color:#444}.ev{margin:.4em 0 .6em}
details.step{border:1px solid #e2e2e6;border-radius:4px;margin:.3em 0;padding:.2em .6em}
details.step>summary{cursor:pointer}.bad pre{background:#fff0f0}.call pre{background:#f0f5ff}
.notice pre{background:#fffbe8}.kv td:first-child{color:#555}
.curve{display:inline-block;margin:.3em 1em .3em 0}.plot{fill:#fafafc;stroke:#ccc}
.line{fill:none;stroke:#2060c0;stroke-width:1.5}.dot{fill:currentColor;color:#2060c0}.tick{font-size:11px;fill:#555}
.tree{font-family:ui-monospace,monospace;white-space:pre;overflow-x:auto}.st{font-size:.8em;color:#555}
li.done{color:#2a7a2a}li.in_progress{font-weight:600}.warn{color:#805b00}
.good{color:#2a7a2a}.poor{color:#b00}
"""
    + "".join(f".c{i}{{color:{c};stroke:{c}}}" for i, c in enumerate(COLOURS))
    + "\n"
)
"""The page's style; `.c3` is the fourth run's colour in a comparison, the one it has
in every view of `mlra compare` (its text, its swatch and its curves' stroke)."""

SCRIPT = """
document.documentElement.setAttribute('data-script', 'ran');
document.querySelectorAll('button[data-fold]').forEach(function (b) {
  b.addEventListener('click', function () {
    var open = b.getAttribute('data-fold') === 'open';
    document.querySelectorAll('details.step').forEach(function (d) { d.open = open; });
  });
});
"""


def sha256_source(text: str) -> str:
    """A CSP hash source for an inline script's or style's exact text."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


CSP = (
    "default-src 'none'; "
    f"script-src {sha256_source(SCRIPT)}; "
    f"style-src {sha256_source(STYLE)}; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def head(title: str) -> str:
    """`<!doctype html>` up to `<body>`: `title` is already escaped."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head>'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta charset="utf-8">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{STYLE}</style></head><body>\n"
    )


def fold_buttons() -> str:
    return (
        '<p><button type="button" data-fold="open">unfold all steps</button> '
        '<button type="button" data-fold="close">fold all steps</button></p>\n'
    )


def tail(data_json: str) -> str:
    """The page's data (already escaped JSON, text.json_for_script) and its script."""
    return (
        f'<script type="application/json" id="mlra-data">{data_json}</script>\n'
        f"<script>{SCRIPT}</script>\n</body></html>\n"
    )

"""The JSON a command reads on stdin and a webhook receives as its body: the same bytes
for both, so a script that forwards it to a chat (`curl -d @- https://hooks.slack.com/...`)
is as safe as a webhook to it.

Its `text` is what Slack-style webhooks (Slack, Mattermost, Rocket.Chat, Discord's
Slack-compatible hook) show, and they read markup in it: `<!channel>` notifies a whole
channel, `<https://evil|a harmless name>` hides a link under words, `@here` pings
everyone on Mattermost and Discord. The agent writes part of that text (a held call's
arguments), so `&`, `<` and `>` are escaped as Slack requires (`&amp;`, `&lt;`,
`&gt;`: no mention, no link, no disguised URL is formed) and `@channel`, `@here`,
`@everyone` and `@all` get a zero-width space after their `@`. Bold or italic marks are
left as they are (they hide nothing), and a bare URL shows as itself. The other fields
are plain text in JSON: a receiver that renders one escapes it for where it shows it.
The notification's own text has no NUL or lone surrogate (note.py), so the payload
always encodes.
"""

from __future__ import annotations

import re

from mlra.agent.notify.note import Notification

_SLACK = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKUP = re.compile("[&<>]")
_MENTION = re.compile(r"@(?=(?:channel|here|everyone|all)\b)", re.IGNORECASE)


def slack_text(text: str) -> str:
    """`text` as Slack-style chat shows it literally: no mention, link or markup formed."""
    return _MENTION.sub("@\u200b", _MARKUP.sub(lambda m: _SLACK[m.group()], text))


def payload(note: Notification) -> bytes:
    """The notification as one JSON object (UTF-8), its `text` escaped for chat."""
    text = note.text or f"{note.title}: {note.message}"
    return note.model_copy(update={"text": slack_text(text)}).model_dump_json().encode("utf-8")

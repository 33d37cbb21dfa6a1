"""How a visitor's value is written into each format a message goes out in.

Page paths, sources, utm values, goal names, props and titles are whatever a visitor sent. In a
report they may add words, never markup: a source of ``<!channel> <https://evil.example|log in>``
must reach Slack as that text, not as an @channel ping and a disguised link. Each channel passes
every visitor value (and only those: Tally's own words and markup are written as they are)
through the one function of its format, when it writes the message.
"""

from __future__ import annotations

import html

REPLACEMENT = "\ufffd"  # shown where a character was that could forge a line or reorder the text
UNSAFE_CHARACTERS = (
    *range(0x00, 0x20),  # C0 controls: newlines, ESC (terminal sequences), the separators splitlines() breaks on
    *range(0x7F, 0xA0),  # DEL and the C1 controls (NEL among them)
    0x2028,  # line separator
    0x2029,  # paragraph separator
    *range(0x202A, 0x202F),  # bidi embeddings and overrides: LRE RLE PDF LRO RLO
    *range(0x2066, 0x206A),  # bidi isolates: LRI RLI FSI PDI
)
_PLAIN = dict.fromkeys(UNSAFE_CHARACTERS, REPLACEMENT)
ZERO_WIDTH_SPACE = "\u200b"


def plain_text(value: str) -> str:
    """A visitor value for plain text (the e-mail body, a terminal): on one line, in its own order.

    ``/a\\n  status: ok`` -> ``/a�  status: ok``: the value cannot start a line of its own.
    """
    return value.translate(_PLAIN)


def slack_text(value: str) -> str:
    """A visitor value for a Slack-compatible webhook's ``text``: inert as Slack mrkdwn and as Markdown.

    Slack's escaping (``&``, ``<``, ``>`` as ``&amp;``, ``&lt;``, ``&gt;``) disarms ``<!channel>``,
    ``<@U123>`` and ``<url|label>``. The same ``text`` is rendered as Markdown by other receivers
    of Slack's payload (Mattermost, Discord's ``/slack`` endpoint), which also ping on a bare
    ``@channel``, ``@all``, ``@here`` or ``@everyone`` and link ``[label](url)``: a zero-width space
    after each ``@`` and between ``]`` and ``(`` breaks both and shows nothing in Slack, where a
    backslash escape would show.
    """
    escaped = html.escape(plain_text(value), quote=False)
    return escaped.replace("@", "@" + ZERO_WIDTH_SPACE).replace("](", "]" + ZERO_WIDTH_SPACE + "(")

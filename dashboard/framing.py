"""Who may show the dashboard in a frame: the dashboard itself, and the origins the operator lists.

Every response of the dashboard's server (Streamlit's page, its assets, the login routes) carries
``Content-Security-Policy: frame-ancestors 'self' <dashboard.frame_ancestors>``, so another site
cannot put the dashboard under a transparent frame and steer a logged-in user's clicks
(clickjacking). ``X-Frame-Options: SAMEORIGIN`` says the same to browsers that predate CSP; it is
left out when origins are listed, since it cannot name them (and browsers that read
``frame-ancestors`` ignore it). Streamlit's own component frames are same-origin: ``'self'`` keeps them.

An embedded dashboard: the page of a share link (``/?share=<token>``) may also be framed by its
site's ``embed_origins`` (``sites[].embed_origins``), when the token opens now (valid, not expired
or revoked: :meth:`dashboard.share_links.ShareLinks.read`). Every other page, a login's included,
keeps the policy above, so an origin trusted with one site's shared view can frame nothing else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dashboard.share_links import AccessDenied, ShareLinks
from tally.settings import Settings, SettingsError

log = logging.getLogger("tally.dashboard.framing")
EmbedOrigins = Callable[[str], Sequence[str]]  # a share token -> the origins that may frame its page


def framing_headers(frame_ancestors: Sequence[str]) -> dict[str, str]:
    """The headers of the framing policy for these allowed origins."""
    policy = " ".join(("frame-ancestors", "'self'", *frame_ancestors))
    headers = {"Content-Security-Policy": policy}
    if not frame_ancestors:
        headers["X-Frame-Options"] = "SAMEORIGIN"
    return headers


def share_embedders(current: Callable[[], Settings]) -> EmbedOrigins:
    """The ``embed_origins`` of a share token's site when the token opens now, else none
    (``current``: the settings with the sites configured now, runtime ones included)."""

    def origins(token: str) -> Sequence[str]:
        settings = current()
        try:
            grant = ShareLinks(settings).read(token, now=time.time())
        except (AccessDenied, SettingsError):
            return ()
        site = settings.site(grant.site)
        return site.embed_origins if site is not None else ()

    return origins


class FramingPolicy:
    """ASGI middleware: the framing policy on every HTTP response (a header the app set wins); a
    share link's page also lets its site's ``embed_origins`` frame it (``embedders``)."""

    def __init__(
        self, app: ASGIApp, *, frame_ancestors: Sequence[str] = (), embedders: EmbedOrigins | None = None
    ) -> None:
        self.app = app
        self.frame_ancestors = tuple(frame_ancestors)
        self.headers = framing_headers(frame_ancestors)
        self.embedders = embedders

    def policy(self, scope: Scope) -> dict[str, str]:
        """The headers for this request: a share link's page with its site's embedders, else the default."""
        if self.embedders is None or scope.get("path") != "/":
            return self.headers
        tokens = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("share")
        if not tokens:
            return self.headers
        extra = tuple(o for o in self.embedders(tokens[0]) if o not in self.frame_ancestors)
        return framing_headers((*self.frame_ancestors, *extra)) if extra else self.headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chosen = self.policy(scope)

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in chosen.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_policy)

"""Who may show the dashboard in a frame: the dashboard itself, and the origins the operator lists.

Every response of the dashboard's server (Streamlit's page, its assets, the login routes) carries
``Content-Security-Policy: frame-ancestors 'self' <dashboard.frame_ancestors>``, so another site
cannot put the dashboard under a transparent frame and steer a logged-in user's clicks
(clickjacking). ``X-Frame-Options: SAMEORIGIN`` says the same to browsers that predate CSP; it is
left out when origins are listed, since it cannot name them (and browsers that read
``frame-ancestors`` ignore it). Streamlit's own component frames are same-origin: ``'self'`` keeps them.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def framing_headers(frame_ancestors: Sequence[str]) -> dict[str, str]:
    """The headers of the framing policy for these allowed origins."""
    policy = " ".join(("frame-ancestors", "'self'", *frame_ancestors))
    headers = {"Content-Security-Policy": policy}
    if not frame_ancestors:
        headers["X-Frame-Options"] = "SAMEORIGIN"
    return headers


class FramingPolicy:
    """ASGI middleware: the framing policy on every HTTP response (a header the app set wins)."""

    def __init__(self, app: ASGIApp, *, frame_ancestors: Sequence[str] = ()) -> None:
        self.app = app
        self.headers = framing_headers(frame_ancestors)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_policy)

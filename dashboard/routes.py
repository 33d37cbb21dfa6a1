"""The dashboard's own HTTP routes beside Streamlit's: log in and log out (``dashboard/server.py``).

``POST /login`` checks the form's token and that the request comes from this site (``Origin``,
else ``Referer``, must name the ``Host`` it was sent to), counts the attempt in the login
throttle, checks the password (scrypt, off the event loop), then records a session and sets
the ``tally_session`` cookie: ``HttpOnly``, ``SameSite=Lax``, ``Path=/``, for
``dashboard.session_minutes``, and ``Secure`` when the request came over https (or
``dashboard.secure_cookie`` is on). ``POST /logout`` (its token is bound to the session)
deletes the record and clears the cookie. ``GET /login`` serves the form on its own.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from dashboard.auth import load_users, upgrade_password_hash
from dashboard.forms import LOGIN_PATH, LOGOUT_PATH, login_page, safe_next
from dashboard.sessions import COOKIE_NAME, Sessions
from dashboard.throttle import LoginThrottle, check_password
from tally.settings import Settings, SettingsError, load_settings

log = logging.getLogger("tally.dashboard.routes")

THROTTLE = LoginThrottle()  # module state: shared by every request of this dashboard process
FAILURE_DELAY_SECONDS = 0.5  # slows scripted guessing; the throttle bounds it across connections
LOCAL_CLIENT = "local"  # the address of a browser on this machine
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
MAX_FORM_BYTES = 16 * 1024
SettingsSource = Callable[[], Settings]


def client_address(request: Request) -> str:
    """The browser's address as uvicorn saw it (``X-Forwarded-For`` only from a trusted proxy); ``local`` here."""
    host = request.client.host if request.client else ""
    return LOCAL_CLIENT if not host or host in _LOOPBACK else host


def same_origin(request: Request) -> bool:
    """True if the browser says the form was on this site: ``Origin`` (else ``Referer``) names the ``Host``."""
    host = request.headers.get("host", "")
    sent = request.headers.get("origin") or request.headers.get("referer")
    if not host or not sent or sent == "null":
        return False
    return urlsplit(sent).netloc.lower() == host.lower()


def wait_text(seconds: float) -> str:
    return f"{math.ceil(seconds)} s" if seconds < 60 else f"{math.ceil(seconds / 60)} min"


def secure_request(request: Request, settings: Settings) -> bool:
    return request.url.scheme == "https" or settings.dashboard.secure_cookie


class LoginRoutes:
    """``/login`` and ``/logout``, reading the settings on each request (users change without a restart)."""

    def __init__(self, *, settings: SettingsSource = load_settings, throttle: LoginThrottle | None = None) -> None:
        self.settings = settings
        self.throttle = throttle or THROTTLE

    def routes(self) -> list[Route]:
        return [
            Route(LOGIN_PATH, self.login_form, methods=["GET"]),
            Route(LOGIN_PATH, self.log_in, methods=["POST"]),
            Route(LOGOUT_PATH, self.log_out, methods=["POST"]),
        ]

    def _page(self, sessions: Sessions, next_url: str, *, error: str = "", status: int = 200) -> HTMLResponse:
        token = sessions.form_token("login", now=time.time())
        response = HTMLResponse(login_page(token, next_url=next_url, error=error), status_code=status)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    async def login_form(self, request: Request) -> Response:
        sessions = Sessions(self.settings())
        return self._page(sessions, safe_next(request.query_params.get("next")))

    async def _form(self, request: Request) -> dict[str, str]:
        if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
            return {}
        form = await request.form(max_files=0, max_fields=10)
        return {key: value for key, value in form.items() if isinstance(value, str)}

    async def log_in(self, request: Request) -> Response:
        now = time.time()
        try:
            settings = self.settings()
            users = load_users(settings)
        except SettingsError as e:
            log.error("dashboard access config unreadable", extra={"fields": {"error": str(e)}})
            return HTMLResponse("The dashboard's access settings cannot be read; see the logs.", status_code=500)
        sessions = Sessions(settings)
        form = await self._form(request)
        next_url = safe_next(form.get("next"))
        if not same_origin(request) or not sessions.form_token_ok(form.get("csrf", ""), "login", now=now):
            log.warning("dashboard login refused", extra={"fields": {"reason": "form token or origin"}})
            error = "This login form expired or was sent from another site: log in again below."
            return self._page(sessions, next_url, error=error, status=403)
        name, password = form.get("user", "")[:256], form.get("password", "")[:1024]
        cost = settings.dashboard.password_scrypt_n
        address = client_address(request)
        checked = await run_in_threadpool(
            check_password, self.throttle, users, name, password, address=address, now=now, n=cost
        )
        if checked.wait_seconds > 0:
            log.warning("dashboard login throttled", extra={"fields": {"user": repr(name[:64])}})
            wait = wait_text(checked.wait_seconds)
            error = f"Too many failed logins for this user name from your address: try again in {wait}."
            response = self._page(sessions, next_url, error=error, status=429)
            response.headers["Retry-After"] = str(math.ceil(checked.wait_seconds))
            return response
        if checked.user is None:
            log.warning("dashboard login failed", extra={"fields": {"user": repr(name[:64])}})
            await asyncio.sleep(FAILURE_DELAY_SECONDS)
            return self._page(sessions, next_url, error="Wrong user or password.", status=401)
        user = await run_in_threadpool(upgrade_password_hash, settings, checked.user, password)
        session_id = sessions.create(user, now=now)
        log.info("dashboard login", extra={"fields": {"user": user.name}})
        redirect = RedirectResponse(next_url, status_code=303)
        redirect.set_cookie(
            COOKIE_NAME,
            sessions.cookie_value(session_id),
            max_age=settings.dashboard.session_minutes * 60,
            path="/",
            httponly=True,
            samesite="lax",
            secure=secure_request(request, settings),
        )
        return redirect

    async def log_out(self, request: Request) -> Response:
        settings = self.settings()
        sessions = Sessions(settings)
        form = await self._form(request)
        session_id = sessions.session_id(request.cookies.get(COOKIE_NAME))
        if session_id is not None:
            token_ok = sessions.form_token_ok(form.get("csrf", ""), "logout", now=time.time(), bound_to=session_id)
            if not same_origin(request) or not token_ok:
                log.warning("dashboard logout refused", extra={"fields": {"reason": "form token or origin"}})
                return HTMLResponse("This logout was not sent from the dashboard; nothing changed.", status_code=403)
            record = sessions.read(session_id)
            sessions.delete(session_id)
            log.info("dashboard logout", extra={"fields": {"user": record.user if record else "-"}})
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(
            COOKIE_NAME, path="/", httponly=True, samesite="lax", secure=secure_request(request, settings)
        )
        return response

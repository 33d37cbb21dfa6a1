"""The HTML of the login and logout forms, shared by the page (``st.html``) and the login route.

Plain forms that post to the dashboard's own routes (``dashboard/routes.py``), each with a
signed token (:meth:`dashboard.sessions.Sessions.form_token`). Every value is escaped; the
field names avoid those that DOMPurify (which ``st.html`` runs) strips as DOM clobbering.
"""

from __future__ import annotations

from html import escape

LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"

_PAGE_STYLE = (
    "<style>body { font-family: system-ui, sans-serif; max-width: 24rem; margin: 3rem auto; padding: 0 1rem;"
    " color: #262730; }</style>"
)
FORM_STYLE = """
<style>
  .tally-form label { display: block; margin: .8rem 0 .3rem; font-size: .9rem; }
  .tally-form input[type=text], .tally-form input[type=password] {
    width: 100%; box-sizing: border-box; padding: .5rem; font-size: 1rem; border: 1px solid #ccc; border-radius: .4rem;
  }
  .tally-form button { margin-top: 1rem; padding: .5rem 1.2rem; font-size: 1rem; border-radius: .4rem;
    border: 1px solid #ccc; background: #fff; cursor: pointer; }
  .tally-error { color: #7d1a1a; background: #ffecec; padding: .6rem .8rem; border-radius: .4rem; }
</style>
"""


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path on this site (``/…``), never another site; ``/`` otherwise."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")) or len(target) > 4000:
        return "/"
    if any(ord(c) < 32 for c in target):
        return "/"
    return target


def login_form(token: str, *, next_url: str) -> str:
    """The login form (User, Password, Log in), posting to the login route."""
    return (
        f'{FORM_STYLE}<form class="tally-form" method="post" action="{LOGIN_PATH}">'
        f'<input type="hidden" name="csrf" value="{escape(token)}">'
        f'<input type="hidden" name="next" value="{escape(safe_next(next_url))}">'
        '<label for="tally-user">User</label>'
        '<input id="tally-user" type="text" name="user" autocomplete="username" required>'
        '<label for="tally-password">Password</label>'
        '<input id="tally-password" type="password" name="password" autocomplete="current-password" required>'
        '<button type="submit">Log in</button>'
        "</form>"
    )


def logout_form(token: str) -> str:
    """The "Log out" button, posting to the logout route."""
    return (
        f'<form class="tally-form" method="post" action="{LOGOUT_PATH}" style="margin:0">'
        f'<input type="hidden" name="csrf" value="{escape(token)}">'
        '<button type="submit" style="margin-top:0">Log out</button>'
        "</form>"
    )


def login_page(token: str, *, next_url: str, error: str = "") -> str:
    """The whole login page the route serves (after a failed attempt, or at ``/login``)."""
    message = f'<p class="tally-error" role="alert">{escape(error)}</p>' if error else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Tally · log in</title>{_PAGE_STYLE}{FORM_STYLE}</head><body>"
        "<h1>Tally</h1><p>Analytics data is private: log in to see the sites shared with you.</p>"
        f"{message}{login_form(token, next_url=next_url)}</body></html>"
    )

"""Login throttling: password guesses per (user name, client address), counted before the check.

Two properties matter, and both are tested:

- **Counted first, atomically.** :meth:`LoginThrottle.attempt` decides and records the attempt
  under one lock, *before* the password is checked; a success clears the count afterwards. So
  sessions racing in parallel get no more guesses than one session would.
- **Keyed by client address too.** The count is per (name, address): guessing ``admin``'s
  password from one address delays that address only, and ``admin`` still logs in from another.

Delays grow: the first ``free_attempts`` go at once, then each attempt must wait twice as long as
the one before (1 s, 2 s, 4 s, …), and after ``max_attempts`` within ``window_seconds`` the pair
waits until the oldest attempt leaves the window.

The state is in memory, shared by every browser session of one dashboard process (Streamlit
serves all sessions from one process); restarting the dashboard clears it. The client address is
what Streamlit saw (``dashboard.login.client_address``): behind a reverse proxy that does not pass
``X-Forwarded-For`` from 127.0.0.1, every client has the proxy's address, and the throttle is
effectively per name again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from dashboard.passwords import SCRYPT_N, authenticate
from tally.settings import DashboardUser


class LoginThrottle:
    """Login attempts per (user name, client address) in a sliding window, with growing delays."""

    def __init__(
        self,
        *,
        max_attempts: int = 10,
        window_seconds: float = 900.0,
        free_attempts: int = 3,
        first_delay_seconds: float = 1.0,
        max_keys: int = 100_000,
    ) -> None:
        assert 0 <= free_attempts <= max_attempts, "free attempts are part of the allowed attempts"
        self.max_attempts, self.window_seconds = max_attempts, window_seconds
        self.free_attempts, self.first_delay_seconds, self.max_keys = free_attempts, first_delay_seconds, max_keys
        self._attempts: OrderedDict[tuple[str, str], list[float]] = OrderedDict()  # oldest activity first
        self._lock = threading.Lock()

    def _wait(self, recent: list[float], now: float) -> float:
        if len(recent) >= self.max_attempts:
            return recent[-self.max_attempts] + self.window_seconds - now
        if len(recent) < self.free_attempts:
            return 0.0
        delay = min(self.first_delay_seconds * 2.0 ** (len(recent) - self.free_attempts), self.window_seconds)
        return max(0.0, recent[-1] + delay - now)

    def attempt(self, name: str, address: str, now: float) -> float:
        """Count one login attempt and return 0.0, or return the seconds to wait and count nothing.

        Call it before checking the password; call :meth:`succeeded` when the password was right.
        """
        key = (name[:64], address[:64])
        with self._lock:
            recent = [t for t in self._attempts.pop(key, []) if now - t < self.window_seconds]
            wait = self._wait(recent, now)
            if wait <= 0:
                recent.append(now)
            if recent:
                self._attempts[key] = recent[-self.max_attempts :]
            self._forget_oldest()
            return wait if wait > 0 else 0.0

    def succeeded(self, name: str, address: str) -> None:
        """The password was right: this name may log in from this address at once again."""
        with self._lock:
            self._attempts.pop((name[:64], address[:64]), None)

    def _forget_oldest(self) -> None:
        # Names and addresses are attacker-chosen: bound the memory. The dict is ordered by last
        # activity, so the pairs dropped are the least recently active (expired ones first);
        # pushing out a live pair takes max_keys fresh attempts, each a costly password check.
        while len(self._attempts) > self.max_keys:
            self._attempts.popitem(last=False)


@dataclass(frozen=True)
class PasswordCheck:
    """The outcome of one password login: the user, or None; ``wait_seconds`` > 0 if it was throttled."""

    user: DashboardUser | None = None
    wait_seconds: float = 0.0  # > 0: too many attempts, the password was not checked


def check_password(
    throttle: LoginThrottle,
    users: Mapping[str, DashboardUser],
    name: str,
    password: str,
    *,
    address: str,
    now: float,
    n: int = SCRYPT_N,
) -> PasswordCheck:
    """Count the attempt, then check the password (in that order: a check is never free of the count)."""
    wait = throttle.attempt(name, address, now)
    if wait > 0:
        return PasswordCheck(wait_seconds=wait)
    user = authenticate(users, name, password, n=n)
    if user is not None:
        throttle.succeeded(name, address)
    return PasswordCheck(user=user)

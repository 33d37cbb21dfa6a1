"""Password hashes: scrypt from the standard library, self-describing, raised in cost on the next login.

A stored hash is ``scrypt$N$r$p$salt$digest`` (URL-safe base64, random 16-byte salt), so a hash
made with an older cost still verifies. New hashes use N=2^17, r=8, p=1 (OWASP's current minimum
for scrypt): each check needs 128 MiB and a few tenths of a second, which makes offline guessing
of a stolen ``users.yaml`` costly. Hashes from before (N=2^14) are replaced on their user's next
successful login (:func:`dashboard.auth.upgrade_password_hash`).

``dashboard.password_scrypt_n`` sets the cost of new hashes. It exists so that tests can run fast
(``conf/test.yaml``); the default is the one to keep in production.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
import threading
from collections.abc import Mapping

from tally.settings import DashboardUser

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**17, 8, 1  # 128 MiB per check: the cost of new hashes
MAX_SCRYPT_N = 2**18  # a stored hash asking for more (256 MiB per check at r=8) is refused, not computed
_MAX_MEMORY = 128 * MAX_SCRYPT_N * SCRYPT_R
# Each check holds up to 128 MiB for a few tenths of a second: parallel logins (of anyone, for any
# name) wait for one of these slots instead of adding up to gigabytes.
_CHECK_SLOTS = threading.BoundedSemaphore(2)


def b64_url(raw: bytes) -> str:
    """URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unb64_url(text: str) -> bytes:
    """The bytes of :func:`b64_url` text; raises binascii.Error or ValueError on bad input."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, *, n: int, r: int, p: int, length: int) -> bytes:
    # OpenSSL needs 128·r·(N + p + 2) bytes; allow exactly that plus a little slack.
    maxmem = 128 * r * (n + p + 2) + 1024 * 1024
    with _CHECK_SLOTS:
        return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=length)


def hash_password(password: str, *, n: int = SCRYPT_N) -> str:
    """A new hash of ``password`` at cost ``n`` (a power of two; default N=2^17, 128 MiB)."""
    assert n > 1 and n & (n - 1) == 0 and n <= MAX_SCRYPT_N, f"scrypt N must be a power of two ≤ 2^18, got {n}"
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, n=n, r=SCRYPT_R, p=SCRYPT_P, length=32)
    return f"scrypt${n}${SCRYPT_R}${SCRYPT_P}${b64_url(salt)}${b64_url(digest)}"


def _parameters(stored: str) -> tuple[int, int, int, bytes, bytes] | None:
    """(n, r, p, salt, digest) of a well-formed, affordable scrypt hash; None otherwise."""
    try:
        scheme, n_text, r_text, p_text, salt_text, digest_text = stored.strip().split("$")
        n, r, p = int(n_text), int(r_text), int(p_text)
        salt, digest = unb64_url(salt_text), unb64_url(digest_text)
    except (ValueError, binascii.Error):
        return None
    affordable = n > 1 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16 and 128 * n * r <= _MAX_MEMORY
    if scheme != "scrypt" or not affordable or not salt or len(digest) < 16:
        return None
    return n, r, p, salt, digest


def verify_password(password: str, stored: str) -> bool:
    """True if ``password`` matches ``stored``; a malformed or unaffordable stored hash is False, never an error."""
    parameters = _parameters(stored)
    if parameters is None:
        return False
    n, r, p, salt, expected = parameters
    try:
        actual = _scrypt(password, salt, n=n, r=r, p=p, length=len(expected))
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(actual, expected)


def needs_rehash(stored: str, *, n: int = SCRYPT_N) -> bool:
    """True if ``stored`` is a usable hash made at a lower cost than ``n`` (or with a smaller r) than new hashes use."""
    parameters = _parameters(stored)
    return parameters is not None and (parameters[0] < n or parameters[1] < SCRYPT_R)


@functools.cache
def _decoy_hash(n: int) -> str:
    return hash_password(secrets.token_urlsafe(16), n=n)


def authenticate(
    users: Mapping[str, DashboardUser], name: str, password: str, *, n: int = SCRYPT_N
) -> DashboardUser | None:
    """The user if name and password match; None otherwise, after the same work either way (no enumeration).

    An unknown name (or a user without a password) is checked against a decoy hash of cost ``n``,
    the cost of current hashes.
    """
    user = users.get(name)
    stored = user.password_hash if user and user.password_hash else _decoy_hash(n)
    matches = verify_password(password, stored)
    return user if user is not None and user.password_hash and matches else None

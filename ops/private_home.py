"""Tally's home is private to the user who runs it: events, logs and Kafka's files are not for other users.

Keys, salts and sessions were always written 0600 (:mod:`tally.private_files`), but the warehouse,
Kafka's log directories, the spool and the service logs hold the stored events too, and came out
0755/0644 under a usual umask of 022. So every ``tally`` command, and every service the supervisor
starts, runs under the umask 077 (files 0600, folders 0700), and the home itself is made 0700,
tightened if an older Tally left it open.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from tally.log import kv

log = logging.getLogger("ops.home")

PRIVATE_UMASK = 0o077  # no bits for the group or others on anything Tally creates


def make_home_private(home: Path) -> None:
    """Create ``home`` 0700, or tighten an existing one of this user's to 0700; set the umask."""
    os.umask(PRIVATE_UMASK)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = home.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        home.chmod(0o700)
        log.info("home made private", extra=kv(home=str(home), was=oct(stat.S_IMODE(info.st_mode))))

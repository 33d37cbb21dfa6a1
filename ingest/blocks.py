"""Follow the compacted ``ratelimit.blocks`` topic into a :class:`BlockList` (a background thread).

Every ingest worker reads the whole topic from the start with its own consumer (no group
offsets), so each replica honours every block the Spark rate-limit job publishes. The thread is a
:class:`topics.follower.TopicFollower`'s, as for the sites topic (``topics/sites.py``).
Record: key = client hash, value = ``{"blocked_until": <epoch ms>}``; a null value lifts the block.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from ingest.ratelimit import BlockList
from tally.log import kv
from topics.follower import TopicFollower

log = logging.getLogger("tally.ingest.blocks")


class BlockFollower(TopicFollower):
    """Every record of the blocks topic applied to ``blocks``; ``close()`` it on the way out."""

    def __init__(self, *, client_config: Mapping[str, str | int | float | bool], topic: str, blocks: BlockList) -> None:
        self.blocks = blocks
        super().__init__(client_config=client_config, topic=topic, apply=self._block, reader="ingest-blocks")

    def _block(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record; a bad one is logged and ignored (a record without a key is no block)."""
        if not key:
            return
        try:
            until = json.loads(value)["blocked_until"] if value else None
            self.blocks.update(key.decode(), int(until) if until is not None else None)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("bad block record ignored", extra=kv(error=str(e)))

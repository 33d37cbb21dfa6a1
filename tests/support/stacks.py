"""What a test's running stack is reached at, written once for every stack a test starts
(the fault tests' ``FaultStack``, the replicated-Kafka test's ``Replicated``)."""

from __future__ import annotations

from ops.stack import ingest_url
from tally.settings import Settings


class OnStack:
    """A mixin for a dataclass with the stack's ``settings``: its first configured site and ingest's URL."""

    settings: Settings

    @property
    def site(self) -> str:
        """conf/test.yaml's first site: the one the tests send to and reconcile."""
        return self.settings.sites[0].site_id

    @property
    def ingest_url(self) -> str:
        return ingest_url(self.settings)

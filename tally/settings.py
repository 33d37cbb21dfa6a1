"""Typed settings: conf/tally.yaml, merged with conf/<TALLY_ENV>.yaml, then environment overrides.

Lookup order for every key (as in Starlette's ``Config``): the environment variable
``TALLY_<SECTION>__<KEY>`` first, then the environment file, then ``conf/tally.yaml``,
then the dataclass default. A bad value raises :class:`SettingsError` naming key and value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import shlex
import types
import typing
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tally.salt_periods import SALT_PERIODS
from tally.spans import parse_span

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENV_PREFIX = "TALLY_"


class SettingsError(ValueError):
    """A configuration key holds a value Tally cannot use."""


def _properties(key: str, entries: tuple[str, ...]) -> dict[str, str]:
    """``("k=v", …)`` as a dict; ``${NAME}`` in a value is replaced by the environment variable NAME."""
    found = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"{key}: expected 'property=value' entries, got {entry!r}")

        def from_env(match: re.Match[str], entry: str = entry) -> str:
            if match.group(1) not in os.environ:
                raise SettingsError(f"{key}: {entry!r} needs the environment variable {match.group(1)}; set it")
            return os.environ[match.group(1)]

        found[name.strip()] = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", from_env, value.strip())
    return found


def check_nice(key: str, value: int) -> None:
    """A niceness for a batch service: 0 (as ingest) to 19 (the lowest CPU priority)."""
    if not 0 <= value <= 19:
        raise SettingsError(f"{key}: {value} is not a CPU niceness; use 0 (no change) to 19 (lowest priority)")


# Java's short options whose value is the next word (``-cp a.jar``); a long one takes the next word
# unless it has ``=`` (``--add-opens java.base/java.lang=ALL-UNNAMED``).
_JAVA_OPTIONS_WITH_A_VALUE = ("-cp", "-classpath", "-p")


_SPARK_HEAPS = "spark.driver_memory (batch jobs) or spark.views_driver_memory (the views job)"


def check_java_options(key: str, value: str, heap_setting: str = _SPARK_HEAPS) -> None:
    """JVM options for a Spark driver or the bundled broker: words quoted as a shell would
    (``-Dname="a b"``), each an option beginning with ``-`` (or an ``@argfile``), or the value of
    the option before it (``--add-opens java.base/java.lang=ALL-UNNAMED``); no maximum heap
    (``-Xmx``, which Spark refuses there, nor ``-XX:MaxHeapSize``, which would override it): the
    heap is ``heap_setting``. Whether the JVM knows each option shows only when it starts: an
    unknown one stops it, with its name in the job's output."""
    try:
        words = shlex.split(value)
    except ValueError as e:
        raise SettingsError(f"{key}: {value!r} cannot be read as JVM options ({e}); check its quotes") from e
    before = ""
    for word in words:
        takes_value = (before.startswith("--") and "=" not in before) or before in _JAVA_OPTIONS_WITH_A_VALUE
        if not word.startswith(("-", "@")) and not takes_value:
            raise SettingsError(
                f"{key}: {word!r} is not a JVM option; each begins with '-', such as -XX:+UseParallelGC"
            )
        if word.startswith(("-Xmx", "-XX:MaxHeapSize")):
            raise SettingsError(
                f"{key}: {word!r} sets the maximum heap, which Tally sets itself; set {heap_setting} instead"
            )
        before = "" if takes_value else word


_JVM_SIZE = re.compile(r"(\d+)([kmgt])", re.IGNORECASE)


def jvm_size_bytes(text: str, key: str = "memory") -> int:
    """A JVM memory size with its unit (``1536m``, ``6g``, ``512k``) in bytes, as Spark reads its
    ``spark.driver.memory``; ``key`` names the setting in the error."""
    found = _JVM_SIZE.fullmatch(text.strip())
    if found is None:
        raise SettingsError(f"{key}: {text!r} is not a memory size; use a number with k, m, g or t, e.g. 1536m or 6g")
    power = " kmgt".index(found.group(2).lower())
    return int(found.group(1)) << (10 * power)


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = ""
    port: int = 9792
    controller_port: int = 9793
    heap: str = "1g"
    # More JVM options of the bundled broker and the Kafka tools Tally runs, after Tally's own (the
    # heap, G1): a collector's tuning, say, or -XX:TieredStopAtLevel=1 for short-lived test brokers.
    java_options: str = ""
    pageviews_topic: str = "pageviews"
    # One per core of a one-machine install: each partition is a batch of its own in every produce
    # request, so more partitions than the readers need make the batches smaller and cost ingest
    # and the broker CPU per event. A cluster sets it (docs/DEPLOYMENT.md, "Sizing").
    pageviews_partitions: int = 2
    rejected_topic: str = "pageviews.rejected"
    ratelimit_topic: str = "ratelimit.blocks"
    # Sites added, changed and removed at runtime (`tally site`), over the seed of `sites:`:
    # compacted, keyed by site_id; every ingest and API process follows it (tally.site_registry).
    sites_topic: str = "tally.sites"
    retention_hours: int = 168
    replication_factor: int = 1  # of every topic Tally creates
    min_insync_replicas: int = 1  # replicas that must have a write before acks=all succeeds
    # Extra client properties ("name=value"; ${VAR} reads an environment variable), e.g. SASL/TLS:
    client_properties: tuple[str, ...] = ()  # librdkafka names: ingest, archiver, audit, topic admin
    spark_properties: tuple[str, ...] = ()  # Java client names: the streaming job's Kafka source

    def __post_init__(self) -> None:
        check_java_options("kafka.java_options", self.java_options, heap_setting="kafka.heap")
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise SettingsError(
                f"kafka.min_insync_replicas: {self.min_insync_replicas} must be between 1 and "
                f"kafka.replication_factor ({self.replication_factor})"
            )
        for key, entries in (
            ("client_properties", self.client_properties),
            ("spark_properties", self.spark_properties),
        ):
            bad = [e for e in entries if "=" not in e or not e.partition("=")[0].strip()]
            if bad:
                raise SettingsError(f"kafka.{key}: expected 'property=value' entries, got {bad[0]!r}")

    @property
    def bundled(self) -> bool:
        """True when Tally runs its own single-node broker (no external cluster configured)."""
        return not self.bootstrap_servers

    @property
    def servers(self) -> str:
        """The bootstrap servers every client uses."""
        return self.bootstrap_servers or f"127.0.0.1:{self.port}"

    def client_config(self) -> dict[str, str | int | float | bool]:
        """Base configuration of every confluent-kafka client: servers plus ``client_properties``."""
        return {"bootstrap.servers": self.servers, **_properties("kafka.client_properties", self.client_properties)}

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source: ``kafka.``-prefixed servers plus ``spark_properties``."""
        extra = _properties("kafka.spark_properties", self.spark_properties)
        return {"kafka.bootstrap.servers": self.servers, **{f"kafka.{k}": v for k, v in extra.items()}}


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"
    # Heap of the batch jobs' driver (backfill, `tally sql`): "auto" is a quarter of the machine's
    # memory, 1g to 8g (jobs.spark.batch_driver_memory); or a JVM size such as "1536m".
    driver_memory: str = "auto"
    # Heap of the long-running streaming views job (its window state is in RocksDB, off the heap).
    # With the state on the heap and G1, 768m ran out at 500 events/s (OutOfMemoryError after 18
    # minutes, bench.soak). The serial collector fills the heap with garbage up to this maximum
    # between full collections; views_gc_seconds keeps it near the live set (about 0.2 GiB).
    views_driver_memory: str = "1g"
    # JVM options of the batch jobs' driver (backfill, `tally sql`); a job with options of its own (the views
    # job: views_java_options) has those instead. The parallel collector: the 10M-event backfill
    # took 7% less time than with the JVM's default, G1 (docs/OPERATIONS.md, "Backfill").
    java_options: str = "-XX:+UseParallelGC"
    # JVM options of the views job only. The serial collector: on local[2] no concurrent GC threads
    # compete with the job, no per-region tables (G1's were 75 MiB), and at most 30% of the heap
    # left free after a full collection. The code cache is bounded: the JIT kept adding 3-5 MiB a
    # minute to it after 8 minutes (140 MiB, of 240 MiB by default).
    views_java_options: str = (
        "-XX:+UseSerialGC -XX:ReservedCodeCacheSize=160m -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    )
    # 0 = one per core of a local master (local[*], local[N]); on a cluster, set it (2-3 x the
    # executor cores). More partitions than cores only add tasks, state files and small output
    # files to every micro-batch.
    shuffle_partitions: int = 0
    trigger_seconds: int = 5
    # Sessions are written only once closed (session_gap + watermark after their last event), so
    # their query gains nothing from the 1-minute view's short trigger; it yields the cores instead,
    # and so do the props (1-day) and vitals (1-hour) queries on the same trigger. Every micro-batch
    # costs seconds of the job's cores however few its events: at 30 s, the three of them held the
    # 1-minute view's batches up (docs/OPERATIONS.md, "The views' share of the cores").
    sessions_trigger_seconds: int = 60
    # The rate-limit counters: a client over its hourly limit is blocked within about twice this.
    # Run every 5 s, their MERGE kept a core busy beside the 1-minute view's.
    ratelimit_trigger_seconds: int = 15
    # Time spans, "10 minutes" or "1 day" in the file, parsed here once; Spark gets them back as
    # tally.spans.spark_interval(...), messages as describe_span(...).
    watermark: dt.timedelta = dt.timedelta(minutes=10)  # how late an event may be and still count
    session_gap: dt.timedelta = dt.timedelta(minutes=30)  # a visit ends after this much inactivity
    # A visit still open (not yet written by the views) is read from raw events at query time, over
    # the watermark, the gap and this much more before the site's newest event: an open visit longer
    # than this shows only its newest events until it closes (query/open_visits.py).
    open_visit_lookback: dt.timedelta = dt.timedelta(hours=3)
    rollup_seconds: float = 30.0  # how often the 5-minute realtime windows are re-rolled from the minutes
    # How often the hour and day views (what the reports read) are re-rolled. Raise it to spare cores: each run
    # costs about 15 s of the views job's, whatever its range (docs/OPERATIONS.md, "The views' share of the cores").
    hours_rollup_seconds: float = 30.0
    # A full collection of the views job's heap this often (Spark's spark.cleaner.periodicGC.interval,
    # 30 min by default): the serial collector then gives back the heap the live set does not need
    # (docs/OPERATIONS.md, "Memory").
    views_gc_seconds: float = 120.0
    metrics_port: int = 8794  # Prometheus /metrics of the streaming views on 127.0.0.1; 0 = off
    # A backfill recomputes at most this many dates per Spark job, and at most backfill_chunk_events
    # events: 0 = what the driver's heap holds, 2M per GiB (jobs.backfill_chunks.chunk_events). A date with
    # more events than that is a job of its own.
    backfill_chunk_days: int = 31
    backfill_chunk_events: int = 0
    # Views a backfill job writes at once: each write plans, commits and waits for its stage's last
    # tasks on one thread, and another keeps the cores busy meanwhile (2 on local[2]: 1M events in
    # 62.8 s against 67.2 one at a time; docs/OPERATIONS.md, "Two views at a time").
    backfill_views_at_once: int = 2
    # CPU niceness `tally up` starts the views job with (0-19): on a shared machine the batch work
    # yields the cores to ingest, so a page view never waits on an aggregate.
    nice: int = 10
    # Run the views job under Linux's SCHED_IDLE policy: it gets a core only when nothing of normal
    # priority wants it, and a waking ingest worker takes the core at once. Where the policy is not
    # available (not Linux, no `chrt`, or refused), the niceness alone applies.
    idle_priority: bool = True

    def __post_init__(self) -> None:
        check_nice("spark.nice", self.nice)
        if self.views_gc_seconds < 1:
            raise SettingsError(f"spark.views_gc_seconds: {self.views_gc_seconds} must be 1 second or more")
        for name in ("rollup_seconds", "hours_rollup_seconds"):
            if getattr(self, name) < 0:
                raise SettingsError(
                    f"spark.{name}: {getattr(self, name)} must be 0 (every spark.trigger_seconds, when the"
                    " views job's main loop wakes) or more"
                )
        if self.shuffle_partitions < 0:
            raise SettingsError(
                f"spark.shuffle_partitions: {self.shuffle_partitions} must be 0 (one per local core) or more"
            )
        if self.driver_memory != "auto":
            jvm_size_bytes(self.driver_memory, "spark.driver_memory (or auto)")
        jvm_size_bytes(self.views_driver_memory, "spark.views_driver_memory")
        check_java_options("spark.java_options", self.java_options)
        check_java_options("spark.views_java_options", self.views_java_options)
        if self.backfill_chunk_days < 1:
            raise SettingsError(f"spark.backfill_chunk_days: {self.backfill_chunk_days} must be 1 or more")
        if self.backfill_views_at_once < 1:
            raise SettingsError(
                f"spark.backfill_views_at_once: {self.backfill_views_at_once} must be 1 (one view at a time) or more"
            )
        if self.backfill_chunk_events < 0:
            raise SettingsError(
                f"spark.backfill_chunk_events: {self.backfill_chunk_events} must be 0 (what the driver's heap"
                " holds) or more"
            )


@dataclass(frozen=True)
class ScheduledJob:
    """One recurring job: a ``tally`` command line run when the cron expression matches (UTC)."""

    name: str
    cron: str
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class WarehouseSettings:
    """Where the Delta tables live: a local folder, or ``s3a://bucket/prefix`` on S3 or an S3-compatible store."""

    path: str = ""
    endpoint: str = ""  # S3 API endpoint, e.g. http://127.0.0.1:9000; empty = AWS S3
    region: str = ""  # empty = the AWS default chain (AWS_REGION), else us-east-1
    access_key_id: str = ""  # empty = the AWS default chain (AWS_* variables, profile, instance role)
    secret_access_key: str = ""  # from TALLY_WAREHOUSE__SECRET_ACCESS_KEY, never from a file in git
    path_style_access: bool = False  # https://endpoint/bucket/key instead of https://bucket.endpoint/key
    allow_http: bool = False  # plain-HTTP endpoint (a local test server only)
    delta_rs_commit: str = "conditional_put"  # how delta-rs commits on S3: conditional_put | unsafe_rename

    def __post_init__(self) -> None:
        scheme = self.path.partition("://")[0] if "://" in self.path else ""
        if scheme not in ("", "s3a"):
            raise SettingsError(
                f"warehouse.path: {self.path!r} uses {scheme}://; Tally supports a local folder or s3a://bucket/prefix"
                + (" (write s3a:// for S3)" if scheme == "s3" else "")
            )
        if self.delta_rs_commit not in ("conditional_put", "unsafe_rename"):
            raise SettingsError(
                f"warehouse.delta_rs_commit: expected conditional_put or unsafe_rename, got {self.delta_rs_commit!r}"
            )
        if self.endpoint.startswith("http://") and not self.allow_http:
            raise SettingsError(f"warehouse.endpoint: {self.endpoint!r} is plain HTTP; set warehouse.allow_http: true")

    @property
    def on_object_store(self) -> bool:
        """True for an ``s3a://`` warehouse."""
        return self.path.startswith("s3a://")


@dataclass(frozen=True)
class IngestSettings:
    host: str = "127.0.0.1"
    port: int = 8791
    workers: int = 2
    max_body_bytes: int = 65536
    max_batch: int = 50
    # The reverse proxies in front of ingest, as CIDR ranges (a bare address is a /32 or /128).
    # Only a request whose TCP peer is in one of them has its client address read from
    # ``proxy_header``, walked from the right past every trusted hop.
    trusted_proxies: tuple[str, ...] = ("127.0.0.1/32", "::1/128")
    proxy_header: str = "x-forwarded-for"  # what those proxies write: x-forwarded-for | forwarded (RFC 7239)
    metrics_port: int = 8795  # Prometheus /metrics on 127.0.0.1 only, never the public port; 0 = off
    # How long the Kafka producer waits to fill a batch. Longer: fewer, bigger produce requests
    # (less CPU for ingest and broker per event) but every 202 waits that much longer.
    linger_ms: float = 10.0
    # How long a request waits for Kafka's acknowledgement before the event is fsync'd to the
    # spool instead and answered 202 (a partition leader election must not stall the visitor);
    # the replay and event_id deduplication downstream make a later duplicate harmless.
    ack_timeout_ms: int = 500

    def __post_init__(self) -> None:
        import ipaddress  # only this check needs it; ingest parses the ranges once at start-up

        if not 0 <= self.linger_ms <= 1000:
            raise SettingsError(f"ingest.linger_ms: {self.linger_ms} must be between 0 and 1000 (milliseconds)")
        if not 50 <= self.ack_timeout_ms <= 60000:
            raise SettingsError(
                f"ingest.ack_timeout_ms: {self.ack_timeout_ms} must be between 50 and 60000 (milliseconds)"
            )
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy)
            except ValueError as e:
                raise SettingsError(
                    f"ingest.trusted_proxies: {proxy!r} is not an IP address or CIDR range ({e}); "
                    "write e.g. 10.0.0.0/8, 192.0.2.7 or 2001:db8::/32"
                ) from e
        if self.proxy_header not in ("x-forwarded-for", "forwarded"):
            raise SettingsError(
                f"ingest.proxy_header: expected x-forwarded-for or forwarded, got {self.proxy_header!r}"
            )
        if not 0 <= self.metrics_port <= 65535:
            raise SettingsError(f"ingest.metrics_port: {self.metrics_port} must be a port number, or 0 for off")


@dataclass(frozen=True)
class GeoSettings:
    # A MaxMind DB city database (GeoLite2-City or dbip-city-lite .mmdb) the operator downloaded,
    # under its licence. Set: ingest stores region and city too, from this file, for IPv4 and IPv6.
    # Empty: the country only, from the database bundled with geoip2fast. Read by ingest only,
    # which refuses to start when the file is missing.
    city_db: str = ""

    @property
    def city_db_path(self) -> Path | None:
        """The city database file (a relative path is taken from the project root), or None for none."""
        if not self.city_db:
            return None
        path = Path(self.city_db).expanduser()
        return path if path.is_absolute() else PROJECT_ROOT / path


@dataclass(frozen=True)
class RateLimitSettings:
    client_pageviews_per_hour: int = 100
    # Events other than page views (custom, engagement, vitals) per hashed client per site per
    # clock hour: a page view sends a few; 0 = no bound.
    client_events_per_hour: int = 1000
    site_events_per_second: float = 1000.0
    # Dead letters stored whole per hashed client per clock minute (per ingest worker); past it,
    # refusals are counted per client, site and kind, and one summary record per count is stored
    # when the minute closes (ingest/PAYLOAD.md). 0 = store every refusal whole.
    client_refusals_per_minute: int = 10

    def __post_init__(self) -> None:
        if self.client_events_per_hour < 0:
            raise SettingsError(
                f"ratelimit.client_events_per_hour: {self.client_events_per_hour} must be 0 (no limit) or more"
            )
        if self.client_refusals_per_minute < 0:
            raise SettingsError(
                f"ratelimit.client_refusals_per_minute: {self.client_refusals_per_minute} must be 0 (no limit) or more"
            )


@dataclass(frozen=True)
class ArchiverSettings:
    max_batch: int = 20000
    max_wait_seconds: float = 2.0
    dedup_days: int = 2
    metrics_port: int = 8793  # Prometheus /metrics on 127.0.0.1; 0 = off
    stall_seconds: float = 60.0  # no message this long while Kafka holds unarchived ones: replace the consumer
    # `tally maintain` deletes raw.rejected rows older than this (dead letters hold whole payloads,
    # client-sent and unbounded in number); 0 = keep forever.
    rejected_retention_days: int = 30
    nice: int = 10  # CPU niceness `tally up` starts the archiver with (0-19), as spark.nice
    idle_priority: bool = True  # under SCHED_IDLE where available, as spark.idle_priority

    def __post_init__(self) -> None:
        check_nice("archiver.nice", self.nice)
        if self.rejected_retention_days < 0:
            raise SettingsError(
                f"archiver.rejected_retention_days: {self.rejected_retention_days} must be 0 (keep forever) or more"
            )


@dataclass(frozen=True)
class DashboardUser:
    """Who may log in to the dashboard, and the sites they may see (``["*"]`` = every configured site)."""

    name: str
    password_hash: str = ""  # scrypt$n$r$p$salt$hash from `tally user add`; empty = OIDC login only
    sites: tuple[str, ...] = ()
    email: str = ""  # matched against the identity provider's e-mail when dashboard.oidc is on


@dataclass(frozen=True)
class DashboardSettings:
    host: str = "127.0.0.1"
    port: int = 8792
    users: tuple[DashboardUser, ...] = ()  # plus <home>/dashboard/users.yaml, managed by `tally user`
    secret_key: str = ""  # signs share links; empty = generated once into <home>/dashboard/secret.key
    share_link_days: int = 7  # default lifetime of `tally share create` links
    session_minutes: int = 10080  # a password login lasts this long (7 days), then the form asks again
    secure_cookie: bool = False  # mark the session cookie Secure even on http (TLS ends at a proxy elsewhere)
    refresh_seconds: int = 10  # realtime, KPIs and chart of a range ending today refresh this often; 0 = off
    oidc: bool = False  # offer "Log in with <provider>" (st.login) when .streamlit/secrets.toml has [auth]
    # scrypt cost N of new password hashes: 2^17 needs 128 MiB and a few tenths of a second per
    # check. Keep the default; conf/test.yaml lowers it so that tests run fast.
    password_scrypt_n: int = 2**17
    # Origins whose pages may show the dashboard in a frame (a share link embedded in a site's own
    # page), e.g. ["https://www.example.com"]; none: only the dashboard itself (frame-ancestors 'self').
    frame_ancestors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for origin in self.frame_ancestors:
            if not FRAME_ANCESTOR.fullmatch(origin):
                raise SettingsError(
                    f"dashboard.frame_ancestors: {origin!r} is not an origin; write scheme and host, "
                    "e.g. https://www.example.com (or https://example.com:8443), without a path"
                )
        n = self.password_scrypt_n
        if not 2**10 <= n <= 2**18 or n & (n - 1):
            raise SettingsError(
                f"dashboard.password_scrypt_n: {n} must be a power of two from 1024 to 262144; "
                "leave it unset for the default 131072 (2^17)"
            )
        if self.session_minutes < 1:
            raise SettingsError(f"dashboard.session_minutes: {self.session_minutes} must be 1 or more (10080 = 7 days)")
        if self.refresh_seconds < 0:
            raise SettingsError(f"dashboard.refresh_seconds: {self.refresh_seconds} must be 0 (off) or more")


# An origin a page may be framed by: http(s), a host name (or *. and a name), an optional port.
FRAME_ANCESTOR = re.compile(r"https?://(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?")


@dataclass(frozen=True)
class TrafficSettings:
    rate: float = 20.0
    visitors: int = 2000
    site_id: str = "demo.tally.local"


@dataclass(frozen=True)
class QualitySettings:
    """Thresholds of the data-quality suites (``tally check``) and the audit (``tally audit``)."""

    freshness_minutes: int = 60  # today's newest raw event / view window must be younger; 0 = off
    clock_skew_minutes: int = 10  # no timestamp may be later than the check's time plus this
    earliest_year: int = 2020  # no timestamp may be older (catches epoch-0 and seconds-for-ms bugs)
    max_engagement_minutes: int = 1440  # upper bound of engagement_ms (time on one page)
    max_load_seconds: int = 600  # upper bound of load_ms
    max_session_hours: int = 24  # upper bound of a visit's duration
    audit_lookback_hours: int = 6  # the audit reads Kafka from this long before --from (message time)
    audit_read_timeout_seconds: float = 300.0  # give up reading the topic after this long


# A raw question's DuckDB needs room to work in: at 100 MB a 400-day question over 1M events failed
# out of memory, at 256 MB it finished (spilling, 2.4 times as long as at 2 GB).
MIN_RAW_SLOT_MEMORY = 256 << 20
MAX_RAW_WAIT_SECONDS = 30  # a request held longer holds one of the server's threads as long
MAX_RAW_THREADS = 64  # DuckDB threads of one raw question


@dataclass(frozen=True)
class ApiSettings:
    """The Stats API (``POST /api/v2/query``, Plausible v2 compatible): docs/API.md."""

    host: str = "127.0.0.1"
    port: int = 8796
    requests_per_hour: int = 600  # per API key, as Plausible's default; past it: 429 with Retry-After
    max_body_bytes: int = 65536
    # Questions answered from raw events (not the views) at once in one API or `tally mcp` process:
    # at most raw_slots, sharing raw_memory (each one's DuckDB may take raw_memory / raw_slots), at
    # most raw_slots_per_key of them one key's, each on raw_threads of DuckDB's threads (one question
    # per core a key: on 2 cores, one key's questions leave the other core to the next key's). A
    # question waits up to raw_wait_seconds for a slot,
    # then is refused with Retry-After: 429 when its key's share is taken, 503 when every slot is.
    raw_slots: int = 4
    raw_slots_per_key: int = 1
    raw_threads: int = 1
    raw_memory: str = "4g"
    raw_wait_seconds: float = 2.0
    # Each raw question in a worker process of its own (api/raw_workers.py), so one key's heavy
    # answers cannot hold the interpreter another key's question needs; false: in the API's threads.
    raw_in_processes: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.port <= 65535:
            raise SettingsError(f"api.port: {self.port} must be a port number")
        if self.requests_per_hour < 1:
            raise SettingsError(f"api.requests_per_hour: {self.requests_per_hour} must be at least 1")
        if self.raw_slots < 1:
            raise SettingsError(f"api.raw_slots: {self.raw_slots} must be at least 1")
        if not 1 <= self.raw_slots_per_key <= self.raw_slots:
            raise SettingsError(
                f"api.raw_slots_per_key: {self.raw_slots_per_key} must be between 1 and"
                f" api.raw_slots ({self.raw_slots})"
            )
        if not 1 <= self.raw_threads <= MAX_RAW_THREADS:
            raise SettingsError(f"api.raw_threads: {self.raw_threads} must be between 1 and {MAX_RAW_THREADS}")
        if self.raw_slot_memory_bytes < MIN_RAW_SLOT_MEMORY:
            raise SettingsError(
                f"api.raw_memory: {self.raw_memory!r} over {self.raw_slots} slots is"
                f" {self.raw_slot_memory_bytes >> 20} MiB a question; give each at least"
                f" {MIN_RAW_SLOT_MEMORY >> 20}m (raise api.raw_memory or lower api.raw_slots)"
            )
        if not 0 <= self.raw_wait_seconds <= MAX_RAW_WAIT_SECONDS:
            raise SettingsError(
                f"api.raw_wait_seconds: {self.raw_wait_seconds} must be between 0 and {MAX_RAW_WAIT_SECONDS} (seconds)"
            )

    @property
    def raw_slot_memory_bytes(self) -> int:
        """What one raw question's DuckDB may take: ``raw_memory`` shared by the ``raw_slots``."""
        return jvm_size_bytes(self.raw_memory, "api.raw_memory") // self.raw_slots


@dataclass(frozen=True)
class LogSettings:
    """Service logs (``<home>/logs/<name>.log``): rotated by the watchdog past ``max_mib``."""

    max_mib: int = 50  # a service's log past this is copied to <name>.log.1 and emptied
    keep: int = 3  # rotated copies kept of each: <name>.log.1 … .3 (the oldest dropped)

    def __post_init__(self) -> None:
        for key in ("max_mib", "keep"):
            if getattr(self, key) < 1:
                raise SettingsError(f"logs.{key}: {getattr(self, key)} must be at least 1")


@dataclass(frozen=True)
class AlertSettings:
    lag_minutes: int = 10  # an archive or views lag growing this long is logged as an alert and shown red

    def __post_init__(self) -> None:
        if self.lag_minutes < 1:
            raise SettingsError(f"alerts.lag_minutes: {self.lag_minutes} must be at least 1 (minutes)")


NOTIFY_TLS = ("starttls", "ssl", "none")
REPORT_PERIODS = ("weekly", "monthly")


def _check_webhooks(key: str, urls: tuple[str, ...]) -> None:
    for url in urls:
        if not url.startswith(("https://", "http://")):
            raise SettingsError(f"{key}: {url!r} is not an http(s) URL; write e.g. https://hooks.slack.com/services/…")


@dataclass(frozen=True)
class SmtpSettings:
    """The mail server reports and alerts are sent through; the password comes from ``TALLY_SMTP_PASSWORD``."""

    host: str = ""  # empty = no e-mail (webhooks only)
    port: int = 587
    username: str = ""  # empty = no login
    sender: str = ""  # the From: address
    tls: str = "starttls"  # starttls (port 587) | ssl (port 465) | none (a local relay only)
    timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.tls not in NOTIFY_TLS:
            raise SettingsError(f"notify.smtp.tls: expected one of {', '.join(NOTIFY_TLS)}, got {self.tls!r}")
        if not 0 < self.port <= 65535:
            raise SettingsError(f"notify.smtp.port: {self.port} must be a port number")
        if self.host and not self.sender:
            raise SettingsError("notify.smtp.sender: set the From: address (e.g. tally@example.org) with smtp.host")


@dataclass(frozen=True)
class ReportSubscription:
    """One scheduled report: a site's digest every week or month, to e-mail addresses and webhooks."""

    site: str
    period: str = "weekly"  # weekly (Monday to Sunday) | monthly (calendar month), UTC dates
    emails: tuple[str, ...] = ()
    webhooks: tuple[str, ...] = ()  # Slack-compatible incoming webhooks, or any endpoint taking JSON

    def __post_init__(self) -> None:
        key = f"notify.reports ({self.site})"
        if self.period not in REPORT_PERIODS:
            raise SettingsError(f"{key}.period: expected weekly or monthly, got {self.period!r}")
        if not self.emails and not self.webhooks:
            raise SettingsError(f"{key}: list at least one of emails or webhooks")
        _check_webhooks(f"{key}.webhooks", self.webhooks)


@dataclass(frozen=True)
class AlertRuleSettings:
    """The alert rules of ``tally alerts check`` (docs/REPORTS-AND-ALERTS.md states each one)."""

    sites: tuple[str, ...] = ()  # empty = every configured site
    emails: tuple[str, ...] = ()  # no e-mail and no webhook: alerts are off
    webhooks: tuple[str, ...] = ()
    quiet_minutes: int = 60  # after an alert, the same site and rule stay quiet this long
    pageviews_per_hour_above: int = 0  # the last full hour above this: an alert; 0 = off
    pageviews_per_hour_below: int = 0  # below this: an alert; 0 = off
    usual_factor: float = 5.0  # far from usual: |hour - median| > factor x spread; 0 = off
    usual_history_days: int = 28  # the same hour of day over this many days is "usual"
    usual_min_days: int = 7  # fewer days of history: no usual-level or tracking-stopped rule
    tracking_stopped_minutes: int = 60  # no page view this long while some are expected; 0 = off
    deadletter_window_minutes: int = 15
    deadletter_min_count: int = 50  # dead letters in the window needed for a surge; 0 = off
    deadletter_factor: float = 5.0  # and this many times the window's average over the previous day

    def __post_init__(self) -> None:
        _check_webhooks("notify.alerts.webhooks", self.webhooks)
        if self.quiet_minutes < 0:
            raise SettingsError(f"notify.alerts.quiet_minutes: {self.quiet_minutes} must be 0 or more")
        if not 1 <= self.usual_min_days <= self.usual_history_days:
            raise SettingsError(
                f"notify.alerts.usual_min_days: {self.usual_min_days} must be between 1 and "
                f"notify.alerts.usual_history_days ({self.usual_history_days})"
            )
        if self.deadletter_window_minutes < 1:
            raise SettingsError(
                f"notify.alerts.deadletter_window_minutes: {self.deadletter_window_minutes} must be at least 1"
            )


@dataclass(frozen=True)
class NotifySettings:
    """Scheduled reports and alerts by e-mail and webhook (``tally report send``, ``tally alerts check``)."""

    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    attempts: int = 3  # tries per delivery in one run, then it is recorded as failed
    retry_seconds: float = 5.0  # wait before the second try, doubled before each further one
    reports: tuple[ReportSubscription, ...] = ()
    alerts: AlertRuleSettings = field(default_factory=AlertRuleSettings)

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= 10:
            raise SettingsError(f"notify.attempts: {self.attempts} must be between 1 and 10")
        emails = [r.site for r in self.reports if r.emails] + (["alerts"] if self.alerts.emails else [])
        if emails and not self.smtp.host:
            raise SettingsError(f"notify.smtp.host: e-mail is listed ({emails[0]}) but no SMTP server is set")


@dataclass(frozen=True)
class SiteSettings:
    site_id: str
    domains: tuple[str, ...] = ()
    hash_routing: bool = False  # keep URL fragments: the site routes by #/path
    client_pageviews_per_hour: int = 0  # 0 = ratelimit.client_pageviews_per_hour
    # Query parameters kept in stored page URLs besides utm_* and the ad click ids; every other
    # one is dropped at ingest, since URLs carry tokens, e-mail addresses and search terms.
    query_params: tuple[str, ...] = ()
    # Goals the Stats API's event:goal reports: "event:<name>" or "page:/path". None listed:
    # every custom event name is a goal.
    goals: tuple[str, ...] = ()
    # How long visitor ids last (tally.salt_periods): day (default, most private), week or month.
    salt_period: str = "day"
    # Honour the browser's opt-out signals (Do-Not-Track ``DNT: 1``, Global Privacy Control
    # ``Sec-GPC: 1``): ingest drops such a request's events for this site unstored (docs/CONFIGURATION.md).
    honour_opt_out: bool = False
    # The IANA time zone the site's days are counted in (dashboard and API ranges); the views stay in UTC.
    timezone: str = "UTC"
    # Origins whose pages may show this site's share links in a frame (an embedded dashboard), e.g.
    # ["https://www.example.com"]; no other page of the dashboard may be framed by them.
    embed_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for origin in self.embed_origins:
            if not FRAME_ANCESTOR.fullmatch(origin):
                raise SettingsError(
                    f"sites ({self.site_id}).embed_origins: {origin!r} is not an origin; write scheme and host,"
                    " e.g. https://www.example.com (or https://example.com:8443), without a path"
                )
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise SettingsError(
                f"sites ({self.site_id}).timezone: {self.timezone!r} is not an IANA time zone; "
                "write e.g. Europe/Berlin, America/New_York or UTC"
            ) from e
        if self.salt_period not in SALT_PERIODS:
            raise SettingsError(
                f"sites ({self.site_id}).salt_period: {self.salt_period!r} is not one of {', '.join(SALT_PERIODS)}"
            )
        for goal in self.goals:
            kind, sep, value = goal.partition(":")
            if not sep or kind not in ("event", "page") or not value:
                raise SettingsError(
                    f"sites ({self.site_id}).goals: {goal!r} is not a goal; write event:<name> or page:/path"
                )
        for name in self.query_params:
            if not name or any(c in name for c in "&=#? "):
                raise SettingsError(
                    f"sites ({self.site_id}).query_params: {name!r} is not a query parameter name; "
                    "list names only, e.g. [page, lang]"
                )


@dataclass(frozen=True)
class Settings:
    home: str = ".tally"
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    warehouse: WarehouseSettings = field(default_factory=WarehouseSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    geo: GeoSettings = field(default_factory=GeoSettings)
    ratelimit: RateLimitSettings = field(default_factory=RateLimitSettings)
    archiver: ArchiverSettings = field(default_factory=ArchiverSettings)
    dashboard: DashboardSettings = field(default_factory=DashboardSettings)
    traffic: TrafficSettings = field(default_factory=TrafficSettings)
    quality: QualitySettings = field(default_factory=QualitySettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    logs: LogSettings = field(default_factory=LogSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    sites: tuple[SiteSettings, ...] = ()
    schedule: tuple[ScheduledJob, ...] = ()

    @cached_property
    def home_dir(self) -> Path:
        """Local state directory (absolute); relative paths are taken from the project root."""
        home = Path(self.home)
        return home if home.is_absolute() else PROJECT_ROOT / home

    @property
    def warehouse_uri(self) -> str:
        """Root of the Delta tables: a local folder by default, or an object-store URI."""
        return self.warehouse.path or str(self.home_dir / "warehouse")

    def table_uri(self, name: str) -> str:
        """Location of a Delta table such as ``raw.pageviews`` or ``agg.traffic_1m``."""
        schema, _, table = name.partition(".")
        assert table, f"table names are '<schema>.<table>', got {name!r}"
        return f"{self.warehouse_uri.rstrip('/')}/{schema}/{table}"

    def site(self, site_id: str) -> SiteSettings | None:
        """The configured site with this id, or None for an unknown site."""
        return self._sites_by_id.get(site_id)

    @cached_property
    def _sites_by_id(self) -> dict[str, SiteSettings]:
        return {s.site_id: s for s in self.sites}

    def client_limit(self, site: SiteSettings) -> int:
        """Page views per hour one client may send to this site."""
        return site.client_pageviews_per_hour or self.ratelimit.client_pageviews_per_hour

    def with_sites(self, sites: tuple[SiteSettings, ...]) -> Settings:
        """These settings with another site list: the seed folded with the runtime records
        (:mod:`tally.site_registry`), for code that looks sites up through :meth:`site`."""
        return dataclasses.replace(self, sites=sites)


def site_settings(values: Mapping[str, Any], *, key: str) -> SiteSettings:
    """One site's settings from a mapping (a YAML entry or a runtime record's JSON), checked as the
    file's are: unknown keys, types and values raise :class:`SettingsError` naming ``key``."""
    if not isinstance(values.get("site_id"), str) or not values["site_id"]:
        raise SettingsError(f"{key}.site_id: required, a non-empty string such as example.com")
    return _build(SiteSettings, values, key)


T = TypeVar("T")


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Convert a YAML or environment value to the annotated type, or name the bad key."""
    origin = typing.get_origin(annotation)
    try:
        if dataclasses.is_dataclass(annotation):
            if not isinstance(value, Mapping):
                raise SettingsError(f"{key}: expected a mapping, got {value!r}")
            return _build(annotation, value, key)  # type: ignore[arg-type]
        if origin is tuple:
            (item_type, _ellipsis) = typing.get_args(annotation)
            if isinstance(value, str):
                value = yaml.safe_load(value)
            if not isinstance(value, list | tuple):
                raise SettingsError(f"{key}: expected a list, got {value!r}")
            return tuple(_coerce(f"{key}[{i}]", v, item_type) for i, v in enumerate(value))
        if origin in (typing.Union, types.UnionType):
            return value
        if annotation is dt.timedelta:
            try:
                return parse_span(str(value))
            except ValueError as e:
                raise SettingsError(f"{key}: {e}") from e
        if annotation is bool and isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if annotation in (int, float, str, bool):
            if annotation is str and not isinstance(value, str | int | float):
                raise ValueError(value)
            return annotation(value)
    except SettingsError:
        raise
    except (TypeError, ValueError) as e:
        name = getattr(annotation, "__name__", str(annotation))
        raise SettingsError(f"{key}: expected {name}, got {value!r}") from e
    raise AssertionError(f"settings type {annotation!r} of {key} is not supported")


def _build(cls: type[T], values: Mapping[str, Any], prefix: str) -> T:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(values) - known
    if unknown:
        raise SettingsError(f"{prefix or 'config'}: unknown key(s) {sorted(unknown)}; known keys: {sorted(known)}")
    kwargs = {}
    for name in known:
        key = f"{prefix}.{name}" if prefix else name
        env_name = ENV_PREFIX + key.replace(".", "__").upper()
        if env_name in os.environ and not dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _coerce(env_name, os.environ[env_name], hints[name])
        elif name in values:
            kwargs[name] = _coerce(key, values[name], hints[name])
        elif dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _coerce(key, {}, hints[name])
    return cls(**kwargs)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        # libyaml's loader when PyYAML has it (ten times quicker; the same safe subset), else Python's
        loaded = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except yaml.YAMLError as e:
        raise SettingsError(f"{path}: not valid YAML ({e}); fix the file") from e
    if not isinstance(loaded, dict):
        raise SettingsError(f"{path}: expected a mapping at the top level")
    return loaded


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(conf_dir: Path | None = None) -> Settings:
    """Load settings from ``conf/`` (or ``$TALLY_CONF_DIR``), the environment file and env vars."""
    conf = conf_dir or Path(os.environ.get("TALLY_CONF_DIR", PROJECT_ROOT / "conf"))
    values = _read_yaml(conf / "tally.yaml") if (conf / "tally.yaml").exists() else {}
    env = os.environ.get("TALLY_ENV", "")
    if env:
        env_file = conf / f"{env}.yaml"
        if not env_file.exists():
            raise SettingsError(f"TALLY_ENV={env!r} but {env_file} does not exist")
        values = _merge(values, _read_yaml(env_file))
    return _build(Settings, values, "")

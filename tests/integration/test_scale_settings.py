"""Scale-out configuration without services: extra Kafka client properties reach every client,
the object-store settings become delta-rs and Spark s3a options, and bad values are refused."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from archiver.consumer import Archiver
from ingest.blocks import BlockFollower
from ingest.eventlog import EventLog
from ingest.ratelimit import BlockList
from jobs.spark import s3a_config
from quality.kafka_log import scan_topic
from tally.settings import KafkaSettings, Settings, SettingsError, WarehouseSettings
from tally.storage import delta_uri, storage_options

BAD = ("socket.timeout.ms=not-a-number",)  # librdkafka refuses it when the client is built


CLIENTS: dict[str, Callable[[Settings], object]] = {
    "ingest's producer": lambda s: EventLog(client_config=s.kafka.client_config()),
    "ingest's block follower": lambda s: BlockFollower(
        client_config=s.kafka.client_config(), topic="t", blocks=BlockList()
    ),
    "the archiver": Archiver,
    "the audit's reader": lambda s: scan_topic(s, since=dt.datetime.now(dt.UTC)),
}


@pytest.mark.parametrize("client", CLIENTS, ids=list(CLIENTS))
def test_client_properties_reach_every_python_kafka_client(tmp_path: Path, client: str) -> None:
    settings = Settings(home=str(tmp_path), kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1", client_properties=BAD))
    with pytest.raises(KafkaException, match=r"socket\.timeout\.ms"):
        CLIENTS[client](settings)


def test_client_properties_read_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = KafkaSettings(
        bootstrap_servers="broker:9093",
        client_properties=("security.protocol=SASL_SSL", "sasl.password=${TALLY_TEST_KAFKA_PASSWORD}"),
        spark_properties=("security.protocol=SASL_SSL",),
    )
    with pytest.raises(SettingsError, match="TALLY_TEST_KAFKA_PASSWORD"):
        kafka.client_config()
    monkeypatch.setenv("TALLY_TEST_KAFKA_PASSWORD", "s3cret")
    assert kafka.client_config() == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.password": "s3cret",
    }
    assert kafka.spark_options() == {"kafka.bootstrap.servers": "broker:9093", "kafka.security.protocol": "SASL_SSL"}


@pytest.mark.parametrize(
    "kafka",
    [{"client_properties": ("no-equals-sign",)}, {"replication_factor": 1, "min_insync_replicas": 2}],
    ids=["a property without a value", "more in-sync replicas than replicas"],
)
def test_bad_kafka_settings_are_refused_naming_the_key(kafka: dict[str, object]) -> None:
    with pytest.raises(SettingsError, match="kafka\\."):
        KafkaSettings(**kafka)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "warehouse",
    [{"path": "s3://bucket/x"}, {"path": "gs://bucket/x"}, {"path": "s3a://b/x", "endpoint": "http://127.0.0.1:9"}],
    ids=["s3 instead of s3a", "another scheme", "plain http without allow_http"],
)
def test_bad_warehouse_settings_are_refused_naming_the_key(warehouse: dict[str, Any]) -> None:
    with pytest.raises(SettingsError, match="warehouse\\."):
        WarehouseSettings(**warehouse)


def test_an_s3a_warehouse_becomes_delta_rs_and_spark_options(tmp_path: Path) -> None:
    local = Settings(home=str(tmp_path))
    assert storage_options(local) == {} and s3a_config(local) == {}
    on_s3 = dataclasses.replace(
        local,
        warehouse=WarehouseSettings(
            path="s3a://bucket/tally",
            endpoint="http://127.0.0.1:9000",
            access_key_id="key",
            secret_access_key="secret",
            path_style_access=True,
            allow_http=True,
        ),
    )
    assert on_s3.table_uri("raw.pageviews") == "s3a://bucket/tally/raw/pageviews"  # Spark's name
    assert delta_uri(on_s3, "raw.pageviews") == "s3://bucket/tally/raw/pageviews"  # delta-rs's name
    options = storage_options(on_s3)
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and options["AWS_ALLOW_HTTP"] == "true"
    assert options["AWS_CONDITIONAL_PUT"] == "etag" and "AWS_S3_ALLOW_UNSAFE_RENAME" not in options
    assert options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"
    spark = s3a_config(on_s3)
    assert spark["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert spark["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert spark["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert spark["spark.hadoop.fs.s3a.secret.key"] == "secret"
    default_chain = dataclasses.replace(on_s3, warehouse=WarehouseSettings(path="s3a://bucket/tally"))
    assert "AWS_ACCESS_KEY_ID" not in storage_options(default_chain)
    assert "spark.hadoop.fs.s3a.access.key" not in s3a_config(default_chain)

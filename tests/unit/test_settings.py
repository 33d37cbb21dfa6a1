import datetime as dt
import os
from pathlib import Path

import pytest

from jobs.spark import shuffle_partitions
from tally.settings import SettingsError, load_settings


def write_conf(folder: Path, text: str, env: str | None = None, env_text: str = "") -> Path:
    (folder / "tally.yaml").write_text(text)
    if env:
        (folder / f"{env}.yaml").write_text(env_text)
    return folder


def test_defaults_apply_when_the_file_is_silent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    settings = load_settings(write_conf(tmp_path, "home: /tmp/x\n"))
    assert settings.kafka.pageviews_topic == "pageviews"
    assert settings.spark.master == "local[*]"
    assert settings.home_dir == Path("/tmp/x")


def test_environment_variable_overrides_file_and_environment_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_conf(tmp_path, "kafka: {port: 1000}\n", env="stage", env_text="kafka: {port: 2000, heap: 2g}\n")
    monkeypatch.setenv("TALLY_ENV", "stage")
    monkeypatch.setenv("TALLY_KAFKA__PORT", "3000")
    settings = load_settings(tmp_path)
    assert settings.kafka.port == 3000
    assert settings.kafka.heap == "2g"


def test_a_bad_value_names_the_key_and_the_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    monkeypatch.setenv("TALLY_INGEST__PORT", "eighty")
    with pytest.raises(SettingsError, match=r"TALLY_INGEST__PORT.*'eighty'"):
        load_settings(write_conf(tmp_path, ""))


def test_an_unknown_key_is_refused_with_the_known_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    with pytest.raises(SettingsError, match=r"kafka: unknown key\(s\) \['prot'\]"):
        load_settings(write_conf(tmp_path, "kafka: {prot: 1}\n"))


def test_time_spans_are_read_once_into_timedeltas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    settings = load_settings(write_conf(tmp_path, "spark: {session_gap: 1 day}\n"))
    assert settings.spark.session_gap == dt.timedelta(days=1)
    assert settings.spark.watermark == dt.timedelta(minutes=10)  # the default


def test_the_session_gap_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_conf(tmp_path, "spark: {session_gap: 1 day}\n", env="stage", env_text="spark: {session_gap: 45 minutes}\n")
    monkeypatch.setenv("TALLY_ENV", "stage")
    monkeypatch.setenv("TALLY_SPARK__SESSION_GAP", "2 hours")
    assert load_settings(tmp_path).spark.session_gap == dt.timedelta(hours=2)


@pytest.mark.parametrize(
    ("yaml_text", "env", "message"),
    [
        (
            "spark: {session_gap: 3 fortnights}\n",
            {},
            "spark.session_gap: '3 fortnights' is not a time span like '30 minutes' (seconds, minutes, hours or days)",
        ),
        ("spark: {watermark: 10}\n", {}, "spark.watermark: '10' is not a time span like '30 minutes'"),
        ("", {"TALLY_SPARK__WATERMARK": "ten minutes"}, "TALLY_SPARK__WATERMARK: 'ten minutes' is not a time span"),
    ],
)
def test_a_bad_time_span_is_refused_with_the_key_and_the_value(
    yaml_text: str, env: dict[str, str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as refused:
        load_settings(write_conf(tmp_path, yaml_text))
    assert str(refused.value).startswith(message)


def test_sites_and_lists_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    monkeypatch.setenv("TALLY_SITES", '[{"site_id": "a.com", "domains": ["a.com", "www.a.com"]}]')
    settings = load_settings(write_conf(tmp_path, ""))
    site = settings.site("a.com")
    assert site is not None and site.domains == ("a.com", "www.a.com")
    assert settings.site("b.com") is None


def test_a_missing_environment_file_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_ENV", "nope")
    with pytest.raises(SettingsError, match=r"nope\.yaml"):
        load_settings(write_conf(tmp_path, ""))


def test_table_uris_live_under_the_warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    settings = load_settings(write_conf(tmp_path, "home: /h\nwarehouse: {path: 's3a://bucket/wh/'}\n"))
    assert settings.table_uri("raw.pageviews") == "s3a://bucket/wh/raw/pageviews"


def test_the_shipped_config_files_load(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("", "test"):
        monkeypatch.setenv("TALLY_ENV", env)
        settings = load_settings()
        assert settings.sites, "the shipped config defines the demo site"


@pytest.mark.parametrize(
    ("master", "configured", "expected"),
    [
        ("local[2]", 0, 2),
        ("local[8, 3]", 0, 8),
        ("local", 0, 1),
        ("local[*]", 0, len(os.sched_getaffinity(0))),
        ("spark://10.0.0.5:7077", 0, None),  # a cluster: Spark's own default, unless set
        ("spark://10.0.0.5:7077", 24, 24),
        ("local[2]", 6, 6),
    ],
)
def test_shuffle_partitions_default_to_one_per_local_core(
    master: str, configured: int, expected: int | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_SPARK__MASTER", master)
    monkeypatch.setenv("TALLY_SPARK__SHUFFLE_PARTITIONS", str(configured))
    assert shuffle_partitions(load_settings()) == expected


def test_negative_shuffle_partitions_are_refused_with_the_key_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_SPARK__SHUFFLE_PARTITIONS", "-1")
    with pytest.raises(SettingsError, match=r"spark\.shuffle_partitions"):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("TALLY_INGEST__LINGER_MS", "-1", r"ingest\.linger_ms"),
        ("TALLY_INGEST__LINGER_MS", "1001", r"ingest\.linger_ms"),
        ("TALLY_SPARK__VIEWS_GC_SECONDS", "0", r"spark\.views_gc_seconds"),
        ("TALLY_SPARK__VIEWS_GC_SECONDS", "-1", r"spark\.views_gc_seconds"),
        ("TALLY_SPARK__ROLLUP_SECONDS", "-1", r"spark\.rollup_seconds"),
        ("TALLY_SPARK__HOURS_ROLLUP_SECONDS", "-1", r"spark\.hours_rollup_seconds"),
        ("TALLY_SPARK__BACKFILL_VIEWS_AT_ONCE", "0", r"spark\.backfill_views_at_once: 0 must be 1"),
    ],
)
def test_an_out_of_range_setting_is_refused_with_the_key_named(
    variable: str, value: str, key: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=key):
        load_settings()


def test_the_producer_linger_reaches_the_kafka_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ingest.eventlog

    seen: dict[str, object] = {}
    monkeypatch.setattr(ingest.eventlog, "Producer", lambda config: seen.update(config))
    ingest.eventlog.EventLog(client_config={"bootstrap.servers": "127.0.0.1:1"}, linger_ms=12.5)
    assert seen["linger.ms"] == 12.5 and seen["acks"] == "all"


def test_a_niceness_outside_0_to_19_names_the_key_and_the_range() -> None:
    import pytest

    from tally.settings import SettingsError, SparkSettings

    with pytest.raises(SettingsError, match=r"spark\.nice: 20 .*0 \(no change\) to 19"):
        SparkSettings(nice=20)
    assert SparkSettings().nice == 10


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("UseParallelGC", r"spark\.java_options: 'UseParallelGC' is not a JVM option; each begins with '-'"),
        ('-Dname="a b', r"spark\.java_options: .* cannot be read as JVM options .*quotes"),
        ("-XX:+UseParallelGC -Xmx2g", r"spark\.java_options: '-Xmx2g' sets the maximum heap.*spark\.driver_memory"),
        ("-XX:MaxHeapSize=2g", r"spark\.java_options: '-XX:MaxHeapSize=2g' sets the maximum heap"),
        ("--add-opens=java.base/java.lang=ALL-UNNAMED x", r"spark\.java_options: 'x' is not a JVM option"),
        ("--add-opens a b", r"spark\.java_options: 'b' is not a JVM option"),
    ],
)
def test_jvm_options_that_would_stop_the_jvm_are_refused_with_the_key_named(options: str, message: str) -> None:
    from tally.settings import SparkSettings

    with pytest.raises(SettingsError, match=message):
        SparkSettings(java_options=options)
    with pytest.raises(SettingsError, match=message.replace("java_options", "views_java_options")):
        SparkSettings(views_java_options=options)


def test_the_brokers_jvm_options_are_checked_alike_and_name_its_heap() -> None:
    from tally.settings import KafkaSettings

    with pytest.raises(SettingsError, match=r"kafka\.java_options: '-Xmx2g' sets the maximum heap.*set kafka\.heap"):
        KafkaSettings(java_options="-XX:TieredStopAtLevel=1 -Xmx2g")
    with pytest.raises(SettingsError, match=r"kafka\.java_options: 'C1' is not a JVM option"):
        KafkaSettings(java_options="C1")


def test_jvm_options_quoted_as_a_shell_would_are_taken() -> None:
    from tally.settings import SparkSettings

    options = '-XX:+UseParallelGC -Dtally.note="two words" -Xms512m'
    assert SparkSettings(java_options=options).java_options == options
    spaced = "--add-opens java.base/java.lang=ALL-UNNAMED -cp /opt/extra.jar @/etc/tally/jvm.args -XX:+UseSerialGC"
    assert SparkSettings(views_java_options=spaced).views_java_options == spaced
    assert SparkSettings(java_options="").java_options == ""

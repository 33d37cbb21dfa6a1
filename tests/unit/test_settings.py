from pathlib import Path

import pytest

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

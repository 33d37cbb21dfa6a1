"""The bundled broker's server.properties: thread pools sized to the machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tally.broker import broker_properties, thread_pools
from tally.settings import load_settings


def pools(lines: list[str]) -> dict[str, int]:
    return {name: int(value) for name, value in (line.split("=") for line in lines)}


@pytest.mark.parametrize(
    ("cores", "io", "network", "background"),
    [(1, 2, 1, 2), (2, 2, 1, 2), (4, 4, 2, 4), (8, 8, 3, 8), (64, 8, 3, 10)],
)
def test_thread_pools_follow_the_cores_up_to_kafkas_defaults(
    cores: int, io: int, network: int, background: int
) -> None:
    assert pools(thread_pools(cores)) == {
        "num.io.threads": io,
        "num.network.threads": network,
        "background.threads": background,
    }


def test_server_properties_name_each_pool_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    lines = broker_properties(load_settings()).splitlines()
    names = [line.split("=")[0] for line in lines if line]
    for pool in ("num.io.threads", "num.network.threads", "background.threads"):
        assert names.count(pool) == 1, pool
    assert len(names) == len(set(names)), "a property set twice"

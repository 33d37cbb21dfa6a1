import base64
import errno
import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.spool import Spool, SpoolWriteFailed


def test_spooled_records_are_read_back_in_order_and_truncated(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([("pageviews", b"k1", b"v1"), ("pageviews.rejected", None, b"\x00\xff")])
    spool.append([("pageviews", b"k2", b"v2")])
    records, offset = spool.read_own(0)
    assert records == [
        ("pageviews", b"k1", b"v1"),
        ("pageviews.rejected", None, b"\x00\xff"),
        ("pageviews", b"k2", b"v2"),
    ]
    assert offset == spool.size() and spool.spooled == 3
    spool.truncate()
    assert spool.size() == 0 and spool.spooled == 0


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([("t", b"k", b"v")])
    with open(spool.path, "ab") as f:
        f.write(b'{"t":"t","k":nu')  # a crash mid-write: never acknowledged
    records, _ = spool.read_own(0)
    assert records == [("t", b"k", b"v")]


def test_a_dead_workers_spool_is_adopted_but_a_live_ones_is_not(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from ingest.spool import Spool; "
        f"s = Spool(Path({str(tmp_path)!r})); s.append([('t', b'k', b'from-child')]); "
        "print('ready', flush=True); time.sleep(float(sys.argv[1]))"
    )
    live = subprocess.Popen([sys.executable, "-c", code, "60"], stdout=subprocess.PIPE, cwd=os.getcwd())
    assert live.stdout is not None and live.stdout.readline().strip() == b"ready"
    mine = Spool(tmp_path)
    with mine.orphans() as files:
        assert files == []  # the child holds its lock
    live.kill()
    live.wait()
    with mine.orphans() as files:
        assert [records for _, records in files] == [[("t", b"k", b"from-child")]]


def half_then_disk_full(fail_on: int) -> Callable[[int, bytes | memoryview], int]:
    """A writer whose ``fail_on``-th write puts half its bytes on disk, then fails as a full disk would."""
    calls = 0

    def write(fd: int, data: bytes | memoryview) -> int:
        nonlocal calls
        calls += 1
        if calls == fail_on:
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    return write


def test_a_write_that_fails_half_way_is_cut_back_and_refused_and_the_next_record_is_kept(tmp_path: Path) -> None:
    spool = Spool(tmp_path, writer=half_then_disk_full(fail_on=2))
    spool.append([("t", b"k", b"first")])
    with pytest.raises(SpoolWriteFailed, match=r"No space left on device.*Free space on"):
        spool.append([("t", b"k", b"torn"), ("t", b"k", b"torn too")])
    spool.append([("t", b"k", b"after")])
    records, offset = spool.read_own(0)
    assert records == [("t", b"k", b"first"), ("t", b"k", b"after")]
    assert spool.spooled == 2 and offset == spool.path.stat().st_size


def test_a_write_past_a_real_file_size_limit_is_cut_back_to_the_last_complete_record(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel write part of a record and then refuse (EFBIG), as a full disk does."""
    code = f"""
import resource, signal, sys
from pathlib import Path
from ingest.spool import Spool
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
spool = Spool(Path({str(tmp_path)!r}))
resource.setrlimit(resource.RLIMIT_FSIZE, (300, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
stored = 0
for i in range(100):
    try:
        spool.append([("pageviews", b"k", b"event-%03d" % i + b"x" * 40)])
        stored += 1
    except Exception as e:
        print("refused:", type(e).__name__, file=sys.stderr)
        break
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
spool.append([("pageviews", b"k", b"after-the-disk-was-freed")])
print(stored)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stderr
    stored = int(done.stdout)
    (path,) = tmp_path.glob("*.spool")
    lines = path.read_bytes().splitlines(keepends=True)
    assert all(line.endswith(b"\n") for line in lines)
    values = [json.loads(line)["v"] for line in lines]
    assert len(values) == stored + 1, "the file does not hold exactly the acknowledged records"
    assert base64.b64decode(values[-1]) == b"after-the-disk-was-freed"


def test_an_undecodable_line_is_logged_and_kept_aside_not_skipped_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = b'{"t":"t","k":"k","v":"not base64!"}\n'

    def corrupting(fd: int, data: bytes | memoryview) -> int:  # the disk hands back other bytes than written
        return os.write(fd, bad) and len(data) if b"YmFk" in bytes(data) else os.write(fd, data)  # b"bad"

    spool = Spool(tmp_path, writer=corrupting)
    spool.append([("t", b"k", b"one")])
    spool.append([("t", b"k", b"bad")])
    spool.append([("t", b"k", b"two")])
    with caplog.at_level(logging.ERROR, logger="tally.ingest.spool"):
        records, _ = spool.read_own(0)
    assert records == [("t", b"k", b"one"), ("t", b"k", b"two")]
    assert any("undecodable" in r.getMessage() for r in caplog.records), caplog.text
    aside = spool.path.with_name(spool.path.name + ".undecodable")
    assert aside.read_bytes() == bad


def test_a_spool_file_is_private_and_its_creation_is_made_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []  # per fsync: was it a directory?
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    spool = Spool(tmp_path / "spool")
    assert stat.S_IMODE(spool.path.stat().st_mode) == 0o600
    assert True in synced, "the folder was not fsync'd after the file was created"


def test_a_dead_workers_file_adopted_by_another_worker_since_the_listing_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = Spool(tmp_path)
    gone = tmp_path / "123-gone.spool"  # listed, then replayed and unlinked by another worker before we open it
    real_glob = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: [*real_glob(self, pattern), gone])
    with mine.orphans() as files:
        assert files == []

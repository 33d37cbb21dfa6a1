import os
import subprocess
import sys
from pathlib import Path

from ingest.spool import Spool


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

"""An uploaded export ZIP opened with limits, so that a hostile archive is refused before it costs
memory: the number of files, each file's size and the whole archive's once unpacked, and how many
times a file grows when unpacked (a ZIP bomb grows a thousand times; Plausible's export is stored,
not compressed, and CSV compressed by a ZIP tool grows 5 to 20 times). Nothing is written to disk.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tally.plausible_export import FormatError

_CHUNK = 1 << 20
# What a ZIP tool adds beside the files it was given: skipped, not refused.
_TOOL_FILES = ("__MACOSX/", ".DS_Store")


@dataclass(frozen=True)
class Limits:
    """How much an archive may hold; the defaults take a 3-year export of a site with 10,000 pages."""

    max_files: int = 32
    max_file_bytes: int = 1 << 30  # Plausible's own upload limit is 1 GB a file
    max_total_bytes: int = 4 << 30
    max_ratio: int = 100  # unpacked size / packed size, for each file


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Entry:
    """One file of the archive: its name without folders, and its bytes."""

    name: str
    data: bytes


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, read in chunks: the same archive imported twice is found by it."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def entries(path: Path, limits: Limits = DEFAULT_LIMITS, *, content: bytes | None = None) -> Iterator[Entry]:
    """The files of the ZIP at ``path`` (or of ``content``, a ZIP's bytes that came in ``path``, as
    in Umami's JSON answer), checked against ``limits`` before any is unpacked."""
    source: Path | io.BytesIO = path if content is None else io.BytesIO(content)
    if not zipfile.is_zipfile(source):
        raise FormatError(path.name, "not a ZIP archive; give the .zip file the export downloaded, unopened")
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as e:
        raise FormatError(path.name, f"the ZIP archive cannot be read ({e})") from None
    with archive:
        files = [i for i in archive.infolist() if not i.is_dir() and not i.filename.startswith(_TOOL_FILES)]
        files = [i for i in files if PurePosixPath(i.filename).name not in _TOOL_FILES]
        _check(path.name, files, limits)
        for info in files:
            yield Entry(PurePosixPath(info.filename).name, _unpacked(path.name, archive, info, limits))


def _check(archive: str, files: list[zipfile.ZipInfo], limits: Limits) -> None:
    if len(files) > limits.max_files:
        raise FormatError(archive, f"{len(files)} files; an export holds at most {limits.max_files}")
    total = 0
    for info in files:
        where = f"{archive}: {info.filename}"
        if info.flag_bits & 0x1:
            raise FormatError(where, "encrypted; export it again without a password")
        if info.file_size > limits.max_file_bytes:
            raise FormatError(where, f"{info.file_size:,} bytes unpacked, over the limit of {limits.max_file_bytes:,}")
        if info.compress_size and info.file_size / info.compress_size > limits.max_ratio:
            raise FormatError(
                where,
                f"grows {info.file_size // info.compress_size:,} times when unpacked (at most {limits.max_ratio}):"
                " refused as a ZIP bomb",
            )
        total += info.file_size
    if total > limits.max_total_bytes:
        raise FormatError(archive, f"{total:,} bytes unpacked in all, over the limit of {limits.max_total_bytes:,}")


def _unpacked(name: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limits: Limits) -> bytes:
    """The file's bytes, read no further than its stated size allows (zipfile checks its CRC)."""
    where = f"{name}: {info.filename}"
    try:
        with archive.open(info) as source:
            data = source.read(min(info.file_size, limits.max_file_bytes) + 1)
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, ValueError) as e:
        raise FormatError(where, f"cannot be unpacked ({e})") from None
    if len(data) > info.file_size:
        raise FormatError(where, "holds more than its stated size: refused as a damaged or hostile archive")
    return data

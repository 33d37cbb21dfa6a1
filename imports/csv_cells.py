"""What every import's CSV reader checks the same way: the text is UTF-8, a count is a whole number
of 0 or more below 2⁶³ (Delta's BIGINT), a value is at most 2,048 characters. Each says what is
wrong in words a refusal can end with; the reader says where (file, line, column)."""

from __future__ import annotations

from tally.plausible_export import FormatError

MAX_VALUE_CHARS = 2048  # a dimension value longer than this is refused (ingest keeps URLs shorter)
MAX_COUNT = 2**63 - 1
BOM = b"\xef\xbb\xbf"


def utf8_text(name: str, data: bytes) -> str:
    """``data`` as text; FormatError naming ``name`` and the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise FormatError(f"{name}, line {line}", "not UTF-8 text; save the file as UTF-8") from None


def whole_number_problem(cell: str) -> str:
    """What is wrong with ``cell`` as a whole number ("" when it is one); a sign is the reader's to refuse."""
    digits = cell.lstrip("-")
    if not digits.isdigit() or not cell.isascii():
        return f"{cell[:40]!r} is not a whole number"
    # Measured before int() reads it: Python refuses to read more than 4,300 digits.
    if len(digits.lstrip("0")) > len(str(MAX_COUNT)) or int(digits) > MAX_COUNT:
        return f"{cell[:40]} is too large"
    return ""

"""Evidence points at file:line, so the block scanner's line numbers must equal a plain
split on b"\\n" for any bytes: carriage returns, quotes, NULs, separators, invalid UTF-8,
empty lines, a missing final newline."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from crashscope.bundle import PeekStream
from crashscope.ingest import FileRecord, _block_hits, iter_blocks

MARK = b"NCCL WARN marker"
pieces = st.sampled_from([b"\n", b"\r", b"\r\n", b'"', b"'", b"\x00", b"\x1f", b",", b"\xff\xfe", b"x" * 50, b"  ", MARK, "é".encode(), b"\t"])


def _expected(data: bytes) -> list[int]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [i + 1 for i, ln in enumerate(lines) if MARK in ln]


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=60))
def test_line_numbers_match_a_plain_split(parts: list[bytes]) -> None:
    data = b"".join(parts)
    rec = FileRecord("f", "x")
    got: list[int] = []
    first = 1
    for block in iter_blocks(PeekStream(b"", io.BytesIO(data)), rec, []):
        ns, texts, n = _block_hits(block, first, [])
        got += [num for num, t in zip(ns, texts) if "NCCL WARN" in t]
        first += n
    assert got == _expected(data)

"""sacct -p/-P text and sacct --json."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import FileSource, ParseContext


class SacctSource(FileSource):
    name = "sacct"
    description = "sacct -p/-P text and sacct --json"

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        return None


SOURCE = SacctSource()

"""torchelastic error.json files (TORCHELASTIC_ERROR_FILE) written by @record."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import FileSource, ParseContext


class TorchelasticSource(FileSource):
    name = "torchelastic"
    description = "torchelastic error.json files (TORCHELASTIC_ERROR_FILE) written by @record"

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        return None


SOURCE = TorchelasticSource()

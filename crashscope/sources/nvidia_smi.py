"""nvidia-smi and nvidia-smi -q text reports."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import FileSource, ParseContext


class NvidiaSmiSource(FileSource):
    name = "nvidia_smi"
    description = "nvidia-smi and nvidia-smi -q text reports"

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        return None


SOURCE = NvidiaSmiSource()

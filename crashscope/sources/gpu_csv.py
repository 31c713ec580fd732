"""nvidia-smi --query-gpu CSV time series."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import FileSource, ParseContext


class GpuCsvSource(FileSource):
    name = "gpu_csv"
    description = "nvidia-smi --query-gpu CSV time series"

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        return None


SOURCE = GpuCsvSource()

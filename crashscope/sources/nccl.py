"""NCCL_DEBUG output (VERSION/WARN/INFO/TRACE lines, NCCL_DEBUG_FILE files)."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import LineSource, ParseContext


class NcclSource(LineSource):
    name = "nccl"
    description = "NCCL_DEBUG output (VERSION/WARN/INFO/TRACE lines, NCCL_DEBUG_FILE files)"

    prefilter = r"[^\s\S]"  # matches nothing until implemented

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        return None


SOURCE = NcclSource()

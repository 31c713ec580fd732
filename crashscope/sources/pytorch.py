"""PyTorch distributed: c10d watchdog/errors, desync, torchrun agent, ChildFailedError, tracebacks, CUDA OOM."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import LineSource, ParseContext


class PytorchSource(LineSource):
    name = "pytorch"
    description = "PyTorch distributed: c10d watchdog/errors, desync, torchrun agent, ChildFailedError, tracebacks, CUDA OOM"

    prefilter = r"[^\s\S]"  # matches nothing until implemented

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        return None


SOURCE = PytorchSource()

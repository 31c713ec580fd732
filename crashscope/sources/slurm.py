"""Slurm job output banners, srun lines, slurmctld/slurmd logs, scontrol show job, jobcomp."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import LineSource, ParseContext


class SlurmSource(LineSource):
    name = "slurm"
    description = "Slurm job output banners, srun lines, slurmctld/slurmd logs, scontrol show job, jobcomp"

    prefilter = r"[^\s\S]"  # matches nothing until implemented

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        return None


SOURCE = SlurmSource()

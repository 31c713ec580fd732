"""Kernel logs: dmesg raw/-T/iso, journalctl short/precise/iso/json, syslog; NVRM Xid, mlx5, NFS/Lustre/GPFS, hung tasks, OOM killer, AER, MCE, panic."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import LineSource, ParseContext


class KernelSource(LineSource):
    name = "kernel"
    description = "Kernel logs: dmesg raw/-T/iso, journalctl short/precise/iso/json, syslog; NVRM Xid, mlx5, NFS/Lustre/GPFS, hung tasks, OOM killer, AER, MCE, panic"

    prefilter = r"[^\s\S]"  # matches nothing until implemented

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        return None


SOURCE = KernelSource()

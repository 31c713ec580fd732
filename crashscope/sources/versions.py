"""per-node version files: pip freeze, ofed_info -s, /proc/driver/nvidia/version, uname, collected versions."""

from __future__ import annotations

from typing import Sequence

from crashscope.sources.base import FileSource, ParseContext


class VersionsSource(FileSource):
    name = "versions"
    description = "per-node version files: pip freeze, ofed_info -s, /proc/driver/nvidia/version, uname, collected versions"

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        return None


SOURCE = VersionsSource()

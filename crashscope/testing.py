"""Helpers for tests: run one source over text exactly as the ingest does."""

from __future__ import annotations

import polars as pl

from crashscope.sources import get_source
from crashscope.sources.base import FileInfo, FileSource, LineSource, ParseContext, ParseOptions, ParseWarning


def parse_text(
    source: str,
    text: str | bytes,
    name: str = "input.log",
    *,
    host_hint: str | None = None,
    rank_hint: int | None = None,
    options: ParseOptions | None = None,
) -> tuple[pl.DataFrame, list[ParseWarning]]:
    """Parse ``text`` with one source. Line sources see only the lines their prefilter
    selects, through the same Rust regex the ingest uses, so a prefilter that polars
    cannot compile or that misses a line fails here too."""
    src = get_source(source)
    data = text.encode() if isinstance(text, str) else text
    ctx = ParseContext(FileInfo(path=name, name=name, host_hint=host_hint, rank_hint=rank_hint), src.name, options)
    if isinstance(src, LineSource):
        lines = data.decode("utf-8", "backslashreplace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        df = pl.DataFrame({"l": lines}, schema={"l": pl.String}).with_row_index("n", offset=1)
        hit = df.filter(pl.col("l").str.contains(src.prefilter))
        src.parse_lines(list(zip(hit["n"].to_list(), hit["l"].to_list())), ctx)
    elif isinstance(src, FileSource):
        src.parse_file(data, ctx)
    return ctx.frame(), ctx.warnings

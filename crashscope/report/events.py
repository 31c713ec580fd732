"""Event rows as report JSON: one timeline event (``event_json``) and the excerpt around
an instant. Used by the verdict (``timeline_excerpt``) and the report builder
(``anomalies``); depends on nothing but polars, so neither imports the other."""

from __future__ import annotations

from typing import Any

import polars as pl

from crashscope.report.model import EventRow

EXCERPT_BEFORE = 8
EXCERPT_AFTER = 12


def iso_ns(t: Any) -> str | None:
    """A timeline time (datetime, UTC) as the report writes it, microseconds and ``Z``."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if t is not None else None


def iso_expr(col: str) -> pl.Expr:
    """:func:`iso_ns` of a column of timeline times, in polars (one pass, not a Python call
    per row); null stays null. Only for years 1000-9999 (Python pads no year below 1000,
    polars does): callers check :func:`iso_expr_ok`."""
    return pl.col(col).dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")


def iso_expr_ok(times: pl.Series) -> bool:
    """Every time of ``times`` is written alike by :func:`iso_expr` and :func:`iso_ns`."""
    t = times.drop_nulls()
    return t.len() == 0 or (1000 <= int(t.min().year) and int(t.max().year) <= 9999)  # type: ignore[union-attr]


def event_row(r: dict[str, Any], count: int | None = None) -> EventRow:
    """One timeline event (a row of the events frame) as ``anomalies`` and ``timeline_excerpt`` hold it."""
    return EventRow(
        time=iso_ns(r.get("time")), time_quality=str(r.get("time_quality")), node=r.get("host"), rank=r.get("rank"),
        gpu=r.get("gpu"), source=str(r.get("source")), kind=str(r.get("kind")), severity=str(r.get("severity")),
        message=r.get("message") or "", file=r.get("file"), line=r.get("line"), count=count,
    )


def one_row_per_line() -> pl.Expr:
    """True for the first event of each log line: one line can be read as two events (a
    source's reading and a catalog's), and a list of lines shows it once."""
    return pl.col("line").is_null() | pl.struct("file", "line").is_first_distinct()


def excerpt_around(ev: pl.DataFrame, t_ns: int | None, limit_before: int = EXCERPT_BEFORE, limit_after: int = EXCERPT_AFTER) -> list[EventRow]:
    """Non-info events just before and after ``t_ns`` (the first failure)."""
    if t_ns is None or ev.height == 0:
        return []
    ev = ev.filter(pl.col("time").is_not_null() & (pl.col("severity") != "info"))
    ev = ev.filter(one_row_per_line())
    t = pl.lit(t_ns).cast(pl.Datetime("ns", "UTC"))
    before = ev.filter(pl.col("time") < t).tail(limit_before)
    after = ev.filter(pl.col("time") >= t).head(limit_after)
    return [event_row(r) for r in pl.concat([before, after]).iter_rows(named=True)]

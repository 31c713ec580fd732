"""Tiny events frames built in code for engine tests (flight recorder's ``create_one_event``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import polars as pl

from crashscope.schema import EVENT_SCHEMA

T0 = int(datetime(2026, 9, 14, 8, 0, 0, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
SEC = 1_000_000_000

_DEFAULTS: dict[str, Any] = {
    "time": T0,
    "time_quality": "exact",
    "host": "node001",
    "rank": None,
    "local_rank": None,
    "gpu": None,
    "gpu_index": None,
    "pid": None,
    "job_id": None,
    "source": "nccl",
    "kind": "log_error",
    "severity": "error",
    "message": "",
    "attrs": None,
    "file": "logs/rank0.log",
    "line": 1,
    "year_assumed": None,
}


def make_event(**overrides: Any) -> pl.DataFrame:
    """One-row frame in ``EVENT_SCHEMA``. ``time`` is UTC ns (int) or None; ``attrs`` may be a
    dict (JSON-encoded here); ``t=<seconds>`` is a shortcut for ``time=T0 + seconds``."""
    row = dict(_DEFAULTS)
    if "t" in overrides:
        row["time"] = T0 + int(overrides.pop("t") * SEC)
    unknown = set(overrides) - set(row)
    if unknown:
        raise TypeError(f"unknown event fields: {sorted(unknown)}")
    row.update(overrides)
    if isinstance(row["attrs"], dict):
        row["attrs"] = json.dumps(row["attrs"])
    df = pl.DataFrame([row], schema_overrides={k: v for k, v in EVENT_SCHEMA.items() if k != "time"}, strict=False)
    return df.with_columns(pl.col("time").cast(pl.Int64).cast(pl.Datetime("ns", "UTC"))).select(
        [pl.col(c).cast(t) for c, t in EVENT_SCHEMA.items()]
    )


def make_events(*rows: dict[str, Any]) -> pl.DataFrame:
    """Several events: ``make_events(dict(kind="xid", ...), dict(...))``."""
    return pl.concat([make_event(**r) for r in rows]) if rows else pl.DataFrame(schema=EVENT_SCHEMA)

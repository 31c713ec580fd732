"""Throughput collapse: the job's step time jumped and stayed up.

In a synchronous job every rank's step time is the slowest rank's, so one GPU throttling,
one CPU-starved host or one slow link shows up as the whole job slowing down at one
moment, often with no error at all (the job may even complete, slowly: an incident all
the same). The step times come from the trainers' own progress lines (``applog``).
Which rank is slow cannot be read from synchronous step times; per-rank telemetry, traces
or the slow-rank rule (ranks whose own step times differ) name it.
"""

from __future__ import annotations

import polars as pl

from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind

RULE_ID = "throughput-collapse"
WEIGHT = 0.4
MIN_STEPS = 8  # per rank, before and after together
FACTOR = 1.8  # median step time after the jump over the median before


def throughput_collapse(events: pl.DataFrame, world: int | None) -> list[Finding]:
    steps = events.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("time").is_not_null())
    if steps.height < MIN_STEPS:
        return []
    steps = steps.with_columns(
        pl.col("attrs").str.json_path_match("$.step_ms").cast(pl.Float64, strict=False).alias("_ms"),
        pl.col("attrs").str.json_path_match("$.step").cast(pl.Int64, strict=False).alias("_step"),
    ).filter(pl.col("_step").is_not_null())
    # Lines that print no step time ("step 120 loss 2.31") give it by their stamps: the time
    # between two of a rank's progress lines over the steps between them (the series is sampled).
    by = ["file", "rank"]
    steps = steps.sort([*by, "_step"], nulls_last=True).with_columns(
        (
            (pl.col("time") - pl.col("time").shift(1).over(by)).dt.total_microseconds() / 1000.0
            / (pl.col("_step") - pl.col("_step").shift(1).over(by))
        ).alias("_dms")
    )
    steps = steps.with_columns(
        pl.when(pl.col("_ms").is_null() & (pl.col("_step") > pl.col("_step").shift(1).over(by))).then(pl.col("_dms")).otherwise(pl.col("_ms")).alias("_ms")
    ).filter(pl.col("_ms").is_not_null() & (pl.col("_ms") > 0))
    # One series for the job: the median over ranks at each step (ranks run in lock-step).
    series = steps.group_by("_step").agg(pl.col("_ms").median(), pl.col("time").min()).drop_nulls("_step").sort("_step")
    if series.height < MIN_STEPS:
        return []
    ms = series["_ms"].to_list()
    # Skip the warm-up steps (compilation, first allocation): the baseline is after them.
    warm = max(2, len(ms) // 10)
    best = None
    for i in range(warm + 2, len(ms) - 2):
        before = _median(ms[warm:i])
        after = _median(ms[i:])
        if before > 0 and after / before >= FACTOR and min(ms[i:i + 3]) / before >= FACTOR * 0.8:
            best = (i, before, after)
            break
    if best is None:
        return []
    i, before, after = best
    row = series.row(i, named=True)
    # The slowdown began where the last step at the old speed ended: that progress line, then
    # the first slow one. The lines are one rank's, the slowdown the whole job's: no node or
    # rank is implied.
    evidence = []
    for step in (series.row(i - 1, named=True)["_step"], row["_step"]):
        r = steps.filter(pl.col("_step") == step).sort(["rank", "file", "line"], nulls_last=True).row(0, named=True)
        t = r["time"]
        evidence.append(Evidence(
            time=int(t.timestamp() * 1_000_000_000) if t is not None else None, host=None, rank=None, gpu=None,
            gpu_index=None, file=r["file"] or "", line=r["line"], source=str(r["source"]), kind=str(r["kind"]),
            message=r["message"] or "",
        ))
    t_ns = evidence[0].time
    title = f"The job slowed down {after / before:.1f}x from step {row['_step']} on (median step time {before:.0f} ms -> {after:.0f} ms) and stayed slow"
    return [
        Finding(
            rule_id=RULE_ID, title=title, cause="gpu_throttle", role="cause", status="stable", weight=WEIGHT,
            first_time=t_ns, count=series.height - i, hosts=(), ranks=(), gpus=(), evidence=tuple(evidence),
            explanation=(
                "Every rank of a synchronous job waits for the slowest one, so a single throttled GPU (thermal, "
                "power cap, HW slowdown), a CPU-starved host or a degraded link slows the whole job at once. "
                "Step times alone cannot say which rank: GPU telemetry (clock event reasons), traces or a "
                "per-rank slow-step finding do."
            ),
            actions=(
                "Look at GPU clocks and clock-event reasons around that time (nvidia-smi -q -d PERFORMANCE, DCGM), host CPU load and the fabric's counters; an Nsight Systems trace of a few steps shows the rank the others wait for.",
            ),
        )
    ]


def _median(v: list[float]) -> float:
    s = sorted(v)
    n = len(s)
    if n == 0:
        return 0.0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

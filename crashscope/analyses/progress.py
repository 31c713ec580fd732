"""Throughput collapse: the job's step time jumped and stayed up.

In a synchronous job every rank's step time is the slowest rank's, so one GPU throttling,
one CPU-starved host or one slow link shows up as the whole job slowing down at one
moment, often with no error at all (the job may even complete, slowly: an incident all
the same). The step times come from the trainers' own progress lines (``applog``).
Which rank is slow cannot be read from synchronous step times; per-rank telemetry, traces
or the slow-rank rule (ranks whose own step times differ) name it.

Slow, then stuck (``slow-then-stuck``): a step that took longer than the process group's
collective timeout and still completed on the ranks means every collective of that step
finished, each within the timeout, just slowly: no rank was dead or stopped then (a stopped
or killed rank ends in a timeout after at most one timeout's worth of waiting). When such
a step is the job's last, with no checkpoint inside it, and the hang that follows names the
rank that did not arrive (``monitoredBarrier`` / desync report), that rank was the slow one:
a straggler (the taxonomy's ``gpu_throttle``, "one rank ran slow") that finally fell behind
by a whole timeout, not a node failure.
"""

from __future__ import annotations

import polars as pl

from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind

RULE_ID = "throughput-collapse"
WEIGHT = 0.4
STUCK_RULE_ID = "slow-then-stuck"
STUCK_WEIGHT = 0.7  # above a hang's "who never arrived" (0.55-0.6): the same rank, and why
STUCK_FACTOR = 10.0  # the slow step over the rank's median step
STUCK_MIN_S = 60.0  # the slow step's length when no collective timeout is known
MIN_STEPS = 8  # per rank, before and after together
FACTOR = 1.8  # median step time after the jump over the median before


def throughput_collapse(events: pl.DataFrame, world: int | None) -> list[Finding]:
    out = _collapse(events)
    out.extend(slow_then_stuck(events, world))
    return out


def _collapse(events: pl.DataFrame) -> list[Finding]:
    steps = events.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("time").is_not_null())
    if steps.height < MIN_STEPS:
        return []
    steps = steps.with_columns(
        pl.col("attrs").str.json_path_match("$.step_ms").cast(pl.Float64, strict=False).alias("_ms"),
        pl.col("attrs").str.json_path_match("$.step").cast(pl.Int64, strict=False).alias("_step"),
    )
    # Progress lines that number no step (HF Trainer's printed dicts: loss, learning_rate, epoch) come one
    # per logging interval (every `logging_steps` steps): when no line of the job numbers its step, a
    # line's place in its series (the source's `seen`, which counts the lines its sampling skipped) is.
    ordinal = steps["_step"].null_count() == steps.height
    if ordinal:
        steps = steps.with_columns(pl.col("attrs").str.json_path_match("$.seen").cast(pl.Int64, strict=False).alias("_step"))
    steps = steps.filter(pl.col("_step").is_not_null())
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
    at = f"progress line {row['_step']} (its steps are not numbered)" if ordinal else f"step {row['_step']}"
    unit = "time between progress lines" if ordinal else "step time"
    title = f"The job slowed down {after / before:.1f}x from {at} on (median {unit} {before:.0f} ms -> {after:.0f} ms) and stayed slow"
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


def _ns(t) -> int | None:  # type: ignore[no-untyped-def]
    return int(t.timestamp() * 1_000_000_000) if t is not None else None


def _ev(r: dict) -> Evidence:  # type: ignore[type-arg]
    return Evidence(time=_ns(r["time"]), host=r["host"], rank=r["rank"], gpu=None, gpu_index=None, file=r["file"] or "",
                    line=r["line"], source=str(r["source"]), kind=str(r["kind"]), message=r["message"] or "")


def slow_then_stuck(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """See the module docstring: the job's last step outlasted the collective timeout and
    completed, then the hang named the rank that did not arrive."""
    steps = events.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("time").is_not_null())
    named = events.filter((pl.col("kind") == Kind.DESYNC_REPORT.value) & pl.col("time").is_not_null())
    if steps.height < MIN_STEPS or named.height == 0:
        return []
    lagging: set[int] = set()
    timeout_ms: list[float] = []
    for a in named["attrs"].drop_nulls().to_list():
        d = _attrs(a)
        lagging.update(int(r) for r in d.get("lagging_ranks") or () if isinstance(r, int))
        if isinstance(d.get("timeout_ms"), (int, float)):
            timeout_ms.append(float(d["timeout_ms"]))
    to = events.filter(pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value)["attrs"].drop_nulls().to_list()
    timeout_ms += [float(v) for a in to if isinstance(v := _attrs(a).get("timeout_ms"), (int, float))]
    if len(lagging) != 1:
        return []  # one rank fell behind; several named is another story
    culprit = next(iter(lagging))
    t_named = named["time"].min()
    floor_s = max(timeout_ms) / 1000.0 if timeout_ms else STUCK_MIN_S
    ckpts = events.filter((pl.col("kind") == Kind.CHECKPOINT.value) & pl.col("time").is_not_null())["time"].to_list()
    # HF Trainer's dicts name no step: the ordinal of the progress line in its file stands in
    idx = pl.coalesce(
        pl.col("attrs").str.json_path_match("$.step").cast(pl.Int64, strict=False),
        pl.col("attrs").str.json_path_match("$.seen").cast(pl.Int64, strict=False),
    )
    steps = steps.with_columns(idx.alias("_step"))
    steps = steps.filter(pl.col("_step").is_not_null()).sort(["file", "rank", "_step", "line"], nulls_last=True)
    slow: list[tuple[dict, dict, float, float]] = []  # (line before, line after, seconds, x median) per series
    series = 0
    for _, g in steps.group_by(["file", "rank"], maintain_order=True):
        rows = [r for r in g.unique(subset=["_step"], keep="first", maintain_order=True).iter_rows(named=True) if r["time"] <= t_named]
        if len(rows) < MIN_STEPS:
            continue
        series += 1
        per = [((b["time"] - a["time"]).total_seconds() / (b["_step"] - a["_step"]), a, b) for a, b in zip(rows, rows[1:])]
        base = _median([p for p, _, _ in per[:-1]])
        p, a, b = per[-1]
        dt = (b["time"] - a["time"]).total_seconds()
        if base <= 0 or p < STUCK_FACTOR * base or dt <= floor_s:
            continue
        if any(a["time"] < c <= b["time"] for c in ckpts):
            continue  # a checkpoint inside the long step: the save took the time
        slow.append((a, b, dt, p / base))
    if not series or len(slow) * 2 <= series:
        return []  # the job as a whole did not crawl through its last step
    mine = [x for x in slow if x[0]["rank"] == culprit] or slow
    a, b, dt, factor = min(mine, key=lambda x: (x[0]["time"], x[0]["file"]))
    first = dict(a, rank=culprit if a["rank"] is None else a["rank"])
    nrow = named.sort("time").row(0, named=True)
    title = (f"Rank {culprit} was slow, not dead: the job's last step took {dt:.0f} s ({factor:.0f}x its usual) "
             f"and still completed (each collective within the {floor_s:.0f} s timeout), then rank {culprit} "
             "did not reach the next collective")
    return [
        Finding(
            rule_id=STUCK_RULE_ID, title=title, cause="gpu_throttle", role="cause", status="stable", weight=STUCK_WEIGHT,
            first_time=_ns(a["time"]), count=len(slow), hosts=tuple(h for h in {first["host"]} if h), ranks=(culprit,), gpus=(),
            evidence=(_ev(first), _ev(b), _ev(nrow)),
            explanation=(
                "A stopped or killed rank makes its peers time out one collective timeout after it stopped. Here the "
                "job's last step lasted longer than that timeout and completed, so every rank, this one included, was "
                "still answering, only very slowly; then this rank fell a whole timeout behind. That is a straggler "
                "(a throttled GPU, a CPU-starved or overloaded host), not a dead node."
            ),
            actions=(
                f"Look at what slowed rank {culprit}'s host around the start of that step: GPU clocks and clock-event "
                "reasons (nvidia-smi -q -d PERFORMANCE, DCGM), CPU quota/cgroup throttling (cpu.stat nr_throttled), "
                "other processes on the node, swap.",
            ),
        )
    ]


def _attrs(a: str | None) -> dict:  # type: ignore[type-arg]
    import json

    try:
        d = json.loads(a or "{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}

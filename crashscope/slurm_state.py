"""The job's final Slurm state, computed once (for the verdict and the classifier's features).

``job_state`` events come from three places: ``sacct`` (the accounting database: one row for
the job, one per step), ``scontrol show job`` / jobcomp records and slurmctld's log lines
(``_job_complete``, ``Time limit exhausted``, requeue, preemption, kill RPCs). The job's
final state is read from them in this order:

1. the job row (no step) of ``sacct``: the accounting record is Slurm's own verdict;
2. else a job-level record of another source (scontrol, jobcomp, slurmctld);
3. else the ``batch`` step (the batch script's own end), which some ``sacct`` selections keep
   when the job row is cut off;

and within the first tier that has one, the **latest** record (a requeued job is
PREEMPTED or NODE_FAIL first, then REQUEUED, then whatever its last run ended in); records
without a time count as earlier than timed ones, then file order decides. Other steps
(``0``, ``extern``, ``interactive``, ...) never give the job's state: a step ends
CANCELLED or FAILED whenever the job is torn down, whatever the job's own reason.

The state is the first word, upper-cased, without sacct's truncation mark: ``CANCELLED by
1000`` and ``CANCELLED+`` are both ``CANCELLED``.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from crashscope.schema import Kind

JOB_STEPS = (None, "", "batch")  # rows that speak for the job; "batch" only as the last resort


def normalize_state(raw: Any) -> str | None:
    """``CANCELLED by 1000`` / ``cancelled+`` / ``TIMEOUT`` -> ``CANCELLED`` / ``CANCELLED`` / ``TIMEOUT``."""
    if raw is None:
        return None
    words = str(raw).split()
    if not words:
        return None
    s = words[0].upper().rstrip("+")
    return s or None


def _tier(source: str | None, step: Any) -> int | None:
    if step in (None, ""):
        return 0 if source == "sacct" else 1
    if step == "batch":
        return 2
    return None


def final_state(events: pl.DataFrame, job_id: str | None = None) -> str | None:
    """The job's final Slurm state from its ``job_state`` events (see the module docstring), or None.

    With ``job_id``, records about other jobs (a slurmctld log covers the whole cluster) are left
    out; records without a job id are kept."""
    if events.height == 0 or "kind" not in events.columns:
        return None
    st = events.filter(pl.col("kind") == Kind.JOB_STATE.value)
    if job_id:
        st = st.filter(pl.col("job_id").is_null() | (pl.col("job_id") == job_id) | pl.col("job_id").str.starts_with(job_id + "."))
    if st.height == 0:
        return None
    st = st.with_columns(pl.col("time").dt.epoch("ns").alias("_t"), pl.col("source").cast(pl.String).alias("_src"))
    best: tuple[int, int, int, int, int] | None = None
    state: str | None = None
    for pos, (attrs, src, t, line) in enumerate(st.select("attrs", "_src", "_t", "line").iter_rows()):
        try:
            a = json.loads(attrs or "{}")
        except ValueError:
            continue
        if not isinstance(a, dict):
            continue
        s = normalize_state(a.get("state"))
        tier = _tier(src, a.get("step"))
        if s is None or tier is None:
            continue
        # lowest tier first; within it the latest time (untimed first), then the later line / row
        key = (-tier, 0 if t is None else 1, t or 0, line or 0, pos)
        if best is None or key > best:
            best, state = key, s
    return state

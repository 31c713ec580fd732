"""Features of one analysed job for the cause classifier.

``extract(timeline, findings)`` turns a built :class:`~crashscope.timeline.Timeline` and the
rule engine's findings into a flat ``{name: float}`` dict whose keys are exactly
:data:`FEATURES` (fixed order; the shipped model stores the same list and refuses to load
when they differ). It only looks at frames already in memory: no file is re-read.

Feature families (``<c>`` is every cause label except ``none``):

* ``cause_w:<c>`` / ``symptom_w:<c>`` / ``context_w:<c>``: the highest weight of a stable
  finding of that cause and role (0 when none fired).
* ``cause_before:<c>``: 1 when that cause's earliest stable ``role: cause`` finding comes
  before the first symptom (first collective/watchdog/heartbeat timeout, else first symptom
  finding), or when there is no symptom at all. ``cause_lead_min:<c>``: how many minutes before the
  first symptom it came, clipped to +-:data:`LEAD_CLIP_MIN` (negative: after).
* ``n_cause`` / ``n_symptom`` / ``n_context`` (log1p of stable findings per role),
  ``n_cause_labels`` (distinct causes among cause findings), ``cause_host_spread`` /
  ``cause_rank_spread`` (distinct hosts/ranks named by cause findings over hosts/world size:
  one bad node gives a small spread, a job-wide event a large one).
* ``symptom_cover``: largest fraction of ranks in one symptom group; ``timeout_cover`` /
  ``timeout_missing_frac`` / ``timeout_missing_log``: fraction of ranks that reported / did
  not report the main collective timeout (the ranks that did not are usually the culprits).
* ``ver_components_differing`` / ``ver_max_distinct`` and ``ver_differs:<component>``:
  version diversity across hosts.
* ``temp_max`` (deg C / 100), ``temp_excess`` (hottest GPU's peak minus the median peak, /10),
  ``throttle_any`` (a ``gpu_throttle`` event or a non-zero telemetry reason mask),
  ``step_slowness`` (log of the slowest rank's median step time over the median rank's).
* coverage: ``kernel_coverage`` (hosts with kernel-log events / hosts),
  ``missing_ranks_frac``, ``silent_ranks_frac`` (ranks whose last event is more than
  :data:`SILENT_S` before the job's last rank event), ``log_world``, ``log_hosts``,
  ``log_duration_min`` (span of events that carry a rank).
* Slurm: ``slurm:<STATE>`` one-hot of the job's final state (plus ``slurm:other`` and
  ``slurm:missing``), ``cancel:<reason>`` (slurmstepd CANCELLED ... DUE TO ...),
  ``node_down`` (slurmctld node not responding/down).
* application: ``exception_first`` (an exception before the first symptom),
  ``exception_ranks_frac``, ``ckpt_unfinished`` (more checkpoint starts than ends).
* ``kind:<kind>``: log1p of the number of events of each key kind.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import polars as pl

from crashscope.engine.model import Finding
from crashscope.schema import CAUSES, Kind
from crashscope.slurm_state import final_state
from crashscope.timeline import TELEMETRY_KEYS, Timeline, attrs_fields

# Bump when the meaning of any feature changes (the list check alone catches renames only).
FEATURES_VERSION = 2  # 2: one final Slurm state (crashscope.slurm_state); trace and telemetry features

LEAD_CLIP_MIN = 30.0
SILENT_S = 120.0
NS_PER_MIN = 60_000_000_000

FEATURE_CAUSES: tuple[str, ...] = tuple(c for c in CAUSES if c != "none")
SLURM_STATES: tuple[str, ...] = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY")
CANCEL_REASONS: tuple[str, ...] = ("preemption", "time_limit", "node_failure", "other")
VERSION_COMPONENTS: tuple[str, ...] = ("driver", "cuda", "nccl", "torch", "ofed")
COUNT_KINDS: tuple[str, ...] = (
    Kind.XID.value,
    Kind.SXID.value,
    Kind.GPU_ECC.value,
    Kind.PCIE_ERROR.value,
    Kind.MCE.value,
    Kind.NETWORK_ERROR.value,
    Kind.LINK_EVENT.value,
    Kind.NCCL_ERROR.value,
    Kind.CUDA_ERROR.value,
    Kind.STORAGE_ERROR.value,
    Kind.STORAGE_RECOVERED.value,
    Kind.HUNG_TASK.value,
    Kind.HOST_OOM.value,
    Kind.CUDA_OOM.value,
    Kind.EXCEPTION.value,
    Kind.SEGFAULT.value,
    Kind.COLLECTIVE_TIMEOUT.value,
    Kind.WATCHDOG_ERROR.value,
    Kind.HEARTBEAT_TIMEOUT.value,
    Kind.DESYNC_REPORT.value,
    Kind.COLLECTIVE_MISMATCH.value,
    Kind.JOB_CANCEL.value,
    Kind.NODE_STATE.value,
    Kind.KERNEL_PANIC.value,
    Kind.BOOT.value,
    Kind.SIGNAL.value,
    Kind.PROCESS_EXIT.value,
    Kind.GPU_THROTTLE.value,
    Kind.CHECKPOINT.value,
    Kind.TRAIN_STEP.value,
    Kind.LOG_ERROR.value,
)
# First-symptom kinds: what every surviving rank prints once something else went wrong.
_SYMPTOM_EVENT_KINDS = (Kind.COLLECTIVE_TIMEOUT.value, Kind.WATCHDOG_ERROR.value, Kind.HEARTBEAT_TIMEOUT.value)


# From the Flight Recorder / watchdog / Nsight analyses and the GPU telemetry (see docs/classifier.md).
TRACE_FEATURES: tuple[str, ...] = (
    "fr_dumps", "fr_missing_frac", "coll_never_entered_frac", "coll_mismatch", "dump_signal_seen",
    "dump_signal_silent_frac", "throttle_gpus_frac", "clock_deficit",
)
SLOW_MASK = ~0x7  # clock-event reasons other than idle (0x1) and the application / software power cap (0x2, 0x4)
CLOCK_BUSY_UTIL = 50


def _names() -> tuple[str, ...]:
    names: list[str] = []
    for c in FEATURE_CAUSES:
        names += [f"cause_w:{c}", f"cause_before:{c}", f"cause_lead_min:{c}", f"symptom_w:{c}", f"context_w:{c}"]
    names += ["n_cause", "n_symptom", "n_context", "n_cause_labels", "cause_host_spread", "cause_rank_spread"]
    names += ["symptom_cover", "timeout_cover", "timeout_missing_frac", "timeout_missing_log"]
    names += ["ver_components_differing", "ver_max_distinct"] + [f"ver_differs:{c}" for c in VERSION_COMPONENTS]
    names += ["temp_max", "temp_excess", "throttle_any", "step_slowness"]
    names += ["kernel_coverage", "missing_ranks_frac", "silent_ranks_frac", "log_world", "log_hosts", "log_duration_min"]
    names += [f"slurm:{s}" for s in SLURM_STATES] + ["slurm:other", "slurm:missing"]
    names += [f"cancel:{r}" for r in CANCEL_REASONS] + ["node_down"]
    names += ["exception_first", "exception_ranks_frac", "ckpt_unfinished"]
    names += [f"kind:{k}" for k in COUNT_KINDS]
    names += list(TRACE_FEATURES)
    return tuple(names)


FEATURES: tuple[str, ...] = _names()


def extract(timeline: Timeline, findings: Sequence[Finding]) -> dict[str, float]:
    """Features of one job: every name of :data:`FEATURES`, as finite floats.

    Args:
        timeline: the built timeline (events frame, groups, world size).
        findings: the rule engine's findings for the same events (experimental ones and
            other statuses are ignored).

    Returns:
        ``{name: value}`` with exactly the keys of :data:`FEATURES`, in that order.
    """
    f: dict[str, float] = dict.fromkeys(FEATURES, 0.0)
    ev = timeline.events
    world = timeline.world_size or len(timeline.ranks_seen) or 0
    hosts = set(timeline.hosts)
    stable = [x for x in findings if x.status == "stable"]
    t_sym = _first_symptom(ev, stable)

    _findings(f, stable, t_sym, max(len(hosts), 1), max(world, 1))
    _symptoms(f, timeline, world)
    if ev.height:
        counts = kind_counts(ev)
        for k in COUNT_KINDS:
            f[f"kind:{k}"] = math.log1p(counts.get(k, 0))
        _versions(f, ev.filter(pl.col("kind") == Kind.VERSION.value))
        tel = telemetry_frame(ev)
        _telemetry(f, ev, tel, counts)
        _coverage(f, timeline, world)
        _slurm(f, ev, counts, timeline.job_id)
        _application(f, ev, t_sym, max(world, 1))
        _traces(f, ev, tel, stable, max(world, 1))
    else:
        f["slurm:missing"] = 1.0
    return {k: _finite(v) for k, v in f.items()}


def kind_counts(ev: pl.DataFrame) -> dict[str, int]:
    """Occurrences of each kind, not rows: identical events of a file are folded into one row
    with ``attrs.repeat``. Only the rows whose attrs name ``"repeat"`` are decoded (a JSON
    path per row of a million-event frame cost ~1.5 s); the others count 1 each."""
    has = pl.col("attrs").str.contains('"repeat"', literal=True).fill_null(False)
    rep = pl.col("attrs").str.json_path_match("$.repeat").cast(pl.Int64, strict=False).fill_null(1)
    rows = ev.group_by(pl.col("kind").alias("k")).agg(pl.len().alias("n"), has.sum().alias("r"))
    counts = {k: int(n) - int(r) for k, n, r in rows.iter_rows()}
    repeated = ev.filter(has)
    if repeated.height:
        for k, n in repeated.group_by(pl.col("kind").alias("k")).agg(rep.sum()).iter_rows():
            counts[k] += int(n)
    return counts


def telemetry_frame(ev: pl.DataFrame) -> pl.DataFrame | None:
    """The GPU telemetry rows as the features read them: ``g`` (host|gpu|index), ``t``
    (temperature), ``m`` (the clock-event reason mask), ``clk`` (SM clock), ``u`` (util).
    The attrs are decoded once for every stage that reads them (:func:`attrs_fields`)."""
    # the columns it reads first: filtering whole rows copied 393k messages at 16,384 ranks
    tel = ev.select("kind", "host", "gpu", "gpu_index", "attrs").filter(pl.col("kind") == Kind.GPU_TELEMETRY.value)
    if tel.height == 0:
        return None
    a = attrs_fields(tel["attrs"], TELEMETRY_KEYS)
    g = pl.concat_str([pl.col("host").fill_null("?"), pl.col("gpu").fill_null(""), pl.col("gpu_index").cast(pl.String).fill_null("")], separator="|")
    return tel.select(g.alias("g")).hstack(a).select(
        "g",
        pl.col("temperature").cast(pl.Float64, strict=False).alias("t"),
        pl.coalesce(pl.col("reasons_mask").cast(pl.Int64, strict=False), pl.col("mask").cast(pl.Int64, strict=False)).alias("m"),
        pl.col("sm_clock_mhz").cast(pl.Float64, strict=False).alias("clk"),
        pl.col("util").cast(pl.Float64, strict=False).alias("u"),
    )


def _finite(v: float) -> float:
    v = float(v)
    return v if math.isfinite(v) else 0.0


def _first_symptom(ev: pl.DataFrame, findings: Iterable[Finding]) -> int | None:
    """The first collective/watchdog/heartbeat timeout; without one, the first symptom finding.

    Symptom findings such as IB flush errors fire within a second of the fault itself, so
    they make a poor reference when a timeout exists."""
    if ev.height:
        t = ev.filter(pl.col("kind").is_in(_SYMPTOM_EVENT_KINDS) & pl.col("time").is_not_null())["time"]
        if t.len():
            return int(t.dt.epoch("ns").min())  # type: ignore[arg-type]
    times = [x.first_time for x in findings if x.role == "symptom" and x.first_time is not None]
    return min(times) if times else None


def _findings(f: dict[str, float], stable: list[Finding], t_sym: int | None, n_hosts: int, world: int) -> None:
    roles = {"cause": 0, "symptom": 0, "context": 0}
    cause_hosts: set[str] = set()
    cause_ranks: set[int] = set()
    cause_labels: set[str] = set()
    earliest: dict[str, int | None] = {}
    for x in stable:
        if x.role in roles:
            roles[x.role] += 1
        if x.cause not in FEATURE_CAUSES:
            continue
        if x.role == "cause":
            key = f"cause_w:{x.cause}"
            f[key] = max(f[key], x.weight)
            cause_labels.add(x.cause)
            cause_hosts.update(x.hosts)
            cause_ranks.update(x.ranks)
            prev = earliest.get(x.cause, None)
            if x.cause not in earliest or (x.first_time is not None and (prev is None or x.first_time < prev)):
                earliest[x.cause] = x.first_time
        elif x.role == "symptom":
            f[f"symptom_w:{x.cause}"] = max(f[f"symptom_w:{x.cause}"], x.weight)
        elif x.role == "context":
            f[f"context_w:{x.cause}"] = max(f[f"context_w:{x.cause}"], x.weight)
    for c, t in earliest.items():
        if t_sym is None:
            f[f"cause_before:{c}"] = 1.0
            f[f"cause_lead_min:{c}"] = LEAD_CLIP_MIN
        elif t is not None:
            lead = (t_sym - t) / NS_PER_MIN
            f[f"cause_before:{c}"] = 1.0 if t <= t_sym else 0.0
            f[f"cause_lead_min:{c}"] = max(-LEAD_CLIP_MIN, min(LEAD_CLIP_MIN, lead))
    f["n_cause"] = math.log1p(roles["cause"])
    f["n_symptom"] = math.log1p(roles["symptom"])
    f["n_context"] = math.log1p(roles["context"])
    f["n_cause_labels"] = float(len(cause_labels))
    f["cause_host_spread"] = min(1.0, len(cause_hosts) / n_hosts)
    f["cause_rank_spread"] = min(1.0, len(cause_ranks) / world)


def _symptoms(f: dict[str, float], tl: Timeline, world: int) -> None:
    if not world:
        return
    cover = [len(g.ranks) / world for g in tl.groups]
    f["symptom_cover"] = min(1.0, max(cover, default=0.0))
    timeouts = [g for g in tl.groups if g.kind == Kind.COLLECTIVE_TIMEOUT.value]
    if timeouts:
        main = max(timeouts, key=lambda g: (len(g.ranks), g.count))
        reported = len(set(main.ranks))
        missing = max(0, world - reported)
        f["timeout_cover"] = min(1.0, reported / world)
        f["timeout_missing_frac"] = missing / world
        f["timeout_missing_log"] = math.log1p(missing)


def _attr(key: str, dtype: Any = pl.String) -> pl.Expr:
    return pl.col("attrs").str.json_path_match(f"$.{key}").cast(dtype, strict=False)


def _versions(f: dict[str, float], ver: pl.DataFrame) -> None:
    if ver.height == 0:
        return
    # hosts repeat the same few version records: each distinct attrs text is read once
    vh = ver.filter(pl.col("host").is_not_null()).select("host", "attrs")
    u = vh.select("attrs").unique().with_columns(_attr("component").alias("c"), _attr("version").alias("v"))
    d = vh.join(u, on="attrs", how="left").select("c", "v", "host").drop_nulls()
    if d.height == 0:
        return
    # Per component: distinct values over hosts (a host printing two values counts once each).
    per = d.group_by("c").agg(pl.col("v").n_unique().alias("n"), pl.col("host").n_unique().alias("h"))
    per = per.filter(pl.col("h") >= 2)
    if per.height == 0:
        return
    differing = per.filter(pl.col("n") > 1)
    f["ver_components_differing"] = math.log1p(differing.height)
    f["ver_max_distinct"] = float(min(5, int(per["n"].max()))) - 1.0  # type: ignore[arg-type]
    names = set(differing["c"].to_list())
    for c in VERSION_COMPONENTS:
        f[f"ver_differs:{c}"] = 1.0 if c in names else 0.0


def _telemetry(f: dict[str, float], ev: pl.DataFrame, d: pl.DataFrame | None, counts: dict[str, int]) -> None:
    throttle = counts.get(Kind.GPU_THROTTLE.value, 0) > 0
    if d is not None:
        peaks = d.group_by("g").agg(pl.col("t").max().alias("p")).drop_nulls()["p"]
        if peaks.len():
            top = float(peaks.max())  # type: ignore[arg-type]
            f["temp_max"] = top / 100.0
            f["temp_excess"] = max(0.0, top - float(peaks.median())) / 10.0  # type: ignore[arg-type]
        if d.select((pl.col("m") & SLOW_MASK != 0).any()).item():
            throttle = True
    f["throttle_any"] = 1.0 if throttle else 0.0
    steps = ev.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("rank").is_not_null())
    if steps.height:
        per = (
            steps.select("rank", _attr("step_ms", pl.Float64).alias("v"))
            .drop_nulls()
            .group_by("rank")
            .agg(pl.col("v").median().alias("med"), pl.len().alias("n"))
            .filter(pl.col("n") >= 3)
        )
        if per.height >= 3:
            med = float(per["med"].median())  # type: ignore[arg-type]
            top = float(per["med"].max())  # type: ignore[arg-type]
            if med > 0:
                f["step_slowness"] = min(3.0, math.log(max(top, med) / med))


def _coverage(f: dict[str, float], tl: Timeline, world: int) -> None:
    ev = tl.events
    hosts = set(tl.hosts)
    if hosts:
        khosts = set(ev.select("source", "host").filter(pl.col("source") == "kernel")["host"].drop_nulls().unique().to_list())
        f["kernel_coverage"] = len(khosts & hosts) / len(hosts)
    if world:
        f["missing_ranks_frac"] = max(0.0, (world - len(tl.ranks_seen)) / world)
        last = (
            ev.select("rank", "time", "source").filter(pl.col("rank").is_not_null() & pl.col("time").is_not_null() & (pl.col("source") != "sacct"))
            .group_by("rank")
            .agg(pl.col("time").max().dt.epoch("ns").alias("t"))
        )
        if last.height:
            end = int(last["t"].max())  # type: ignore[arg-type]
            silent = int((last["t"] < end - int(SILENT_S * 1e9)).sum())
            f["silent_ranks_frac"] = min(1.0, silent / world)
    f["log_world"] = math.log1p(world)
    f["log_hosts"] = math.log1p(len(hosts))
    # The run's span from rank events (kernel boot lines and sacct records reach far outside it).
    span = ev.select("rank", "time").filter(pl.col("rank").is_not_null() & pl.col("time").is_not_null())["time"]
    if span.len() >= 2:
        f["log_duration_min"] = math.log1p((span.max() - span.min()).total_seconds() / 60.0)  # type: ignore[operator,union-attr]


def _slurm(f: dict[str, float], ev: pl.DataFrame, counts: dict[str, int], job_id: str | None = None) -> None:
    # the same final state the verdict reads (crashscope.slurm_state: sacct's job row, else another
    # job-level record, else the batch step; the latest of the first tier that has one)
    state = final_state(ev, job_id)
    if state is None:
        f["slurm:missing"] = 1.0
    elif state in SLURM_STATES:
        f[f"slurm:{state}"] = 1.0
    else:
        f["slurm:other"] = 1.0
    if counts.get(Kind.JOB_CANCEL.value):
        reasons = ev.filter(pl.col("kind") == Kind.JOB_CANCEL.value).select(_attr("reason").alias("r"))["r"].to_list()
        for r in reasons:  # no reason: a user scancel or srun --kill-on-bad-exit
            r = str(r or "").upper()
            key = "preemption" if "PREEMPT" in r else "time_limit" if "TIME LIMIT" in r else "node_failure" if "NODE FAIL" in r else "other"
            f[f"cancel:{key}"] = 1.0
    if counts.get(Kind.NODE_STATE.value):
        states = ev.filter(pl.col("kind") == Kind.NODE_STATE.value).select(_attr("state").alias("s"))["s"].drop_nulls().to_list()
        if any(str(s).lower() in ("not_responding", "down", "failed") for s in states):
            f["node_down"] = 1.0


def _traces(f: dict[str, float], ev: pl.DataFrame, d: pl.DataFrame | None, stable: Sequence[Finding], world: int) -> None:
    """Who never entered the collective (Flight Recorder, watchdog PG status, Nsight), whose dumps
    are missing, who never answered the dump signal, and how many GPUs ran slow."""
    from crashscope.analyses import collectives as col

    if ev.select((pl.col("kind") == Kind.TRACE_DUMP.value).any()).item():
        f["fr_dumps"] = 1.0
        f["fr_missing_frac"] = min(1.0, len(col.missing_dumps(ev, world)) / world)
    located = [x for x in stable if x.rule_id in (col.HANG_ID, col.WATCHDOG_ID, col.TRACE_HANG_ID)]
    if located:
        f["coll_never_entered_frac"] = min(1.0, max(len(x.ranks) for x in located) / world)
    if any(x.rule_id == col.MISMATCH_ID for x in stable):
        f["coll_mismatch"] = 1.0
    origin = col.dump_origin(ev)
    if origin.notified:  # the dump signal went round (torch >= 2.4, TORCH_NCCL_DUMP_ON_TIMEOUT): who never answered it
        f["dump_signal_seen"] = 1.0
        answered = set(origin.notified) | set(origin.self_fired) | ({origin.initiator} if origin.initiator is not None else set())
        f["dump_signal_silent_frac"] = max(0.0, min(1.0, (world - len(answered)) / world))
    if d is None:
        return
    per = d.group_by("g").agg((pl.col("m").fill_null(0) & SLOW_MASK).max().alias("slow"))
    if per.height:
        f["throttle_gpus_frac"] = float((per["slow"] > 0).sum()) / per.height
    busy = d.filter(pl.col("clk").is_not_null() & (pl.col("u") >= CLOCK_BUSY_UTIL)).group_by("g").agg(pl.col("clk").median().alias("med"))
    if busy.height >= 3:
        peers = float(busy["med"].median())  # type: ignore[arg-type]
        low = float(busy["med"].min())  # type: ignore[arg-type]
        if peers > 0:
            f["clock_deficit"] = max(0.0, min(1.0, 1.0 - low / peers))


def _application(f: dict[str, float], ev: pl.DataFrame, t_sym: int | None, world: int) -> None:
    exc = ev.filter(pl.col("kind") == Kind.EXCEPTION.value)
    if exc.height:
        t = exc["time"].drop_nulls()
        if t.len():
            first = int(t.dt.epoch("ns").min())  # type: ignore[arg-type]
            f["exception_first"] = 1.0 if t_sym is None or first < t_sym else 0.0
        f["exception_ranks_frac"] = min(1.0, exc["rank"].drop_nulls().n_unique() / world)
    ck = ev.filter(pl.col("kind") == Kind.CHECKPOINT.value)
    if ck.height:
        phases = ck.select(_attr("phase").alias("p"))["p"].to_list()
        if phases.count("start") > phases.count("end"):
            f["ckpt_unfinished"] = 1.0

"""Stragglers: the rank the others wait for, and the throttled GPU behind it.

In a synchronous job every collective ends when the slowest rank arrives. So in a trace the
straggler is the rank whose compute is slowest while its NCCL kernels are shortest: it
arrives last and finds its peers already inside the collective, whose kernels spin until it
comes (nsys ``trace_summary`` events: per-step compute and NCCL time from NVTX step ranges,
else per collective). Its GPU (the trace names it by PCI bus id) is where to look: a GPU in
HW slowdown or thermal slowdown (``gpu_throttle`` events from nvidia-smi, DCGM), or one
whose SM clock under load is far below its peers', ties the slowness to the hardware and so
to a node. Application logs that print per-rank step times (``train_step`` with ``step_ms``)
show the same rank as a step-time outlier.

Findings (cause ``gpu_throttle``, the taxonomy's "one GPU ran slow"):

* ``straggler-trace``: the trace straggler; 0.55 alone, 0.75 when its own GPU shows
  throttling (then the finding names the throttle line too).
* ``straggler-step-times``: one rank's own step times are an outlier (0.45).
* ``gpu-clock-outlier``: a GPU whose SM clock under load is far below its peers', with no
  clock-event reason recorded (0.5; with a reason the per-event rule ``gpu-hw-slowdown`` fires).
* ``straggler-arrival-order``: with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every rank logs
  ``[Rank N] Running collective: CollectiveFingerPrint(SequenceNumber=S, OpType=OP, ...)`` as it
  enters a collective, before ProcessGroupWrapper's monitored barrier waits for the others
  (``collective_enter`` events). In one merged output (a job's stdout) the lines of one
  collective appear in the order the ranks arrived, so the rank whose line comes last at far
  more collectives than chance is the one the others wait for (0.5). Training is synchronous,
  so step times, the same on every rank, cannot name it. Only the order within one file
  counts (one writer, lines in the order it got them); a launcher that forwards lines from
  several nodes can reorder ranks that arrive within a millisecond, so it takes at least
  ``ARRIVAL_MIN_COLLECTIVES`` complete collectives (every rank of the file, once each, its
  process-group rank its global one: the default group), a share of last arrivals of at least
  ``ARRIVAL_MIN_SHARE`` (more with fewer than four ranks), a binomial tail below
  ``ARRIVAL_MAX_P`` (Bonferroni over the ranks), and the rank's node-mates must not be late
  too (then the node's output path, not the rank, would explain it); a rank alone on its node
  (or on no known node) needs ``ARRIVAL_ALONE_SHARE`` (over the run, or over at least
  ``ARRIVAL_MIN_COLLECTIVES`` from the change point on: its node's path would be late from the
  start) and ``ARRIVAL_ALONE_P``. The finding's
  time is where the run of last arrivals starts (a CUSUM change point).

The straggler is named first in ``ranks``; its node and GPU follow from the trace.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

import polars as pl

from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind
from crashscope.timeline import TELEMETRY_KEYS, attrs_fields, attrs_of

TRACE_WEIGHT = 0.55
TRACE_THROTTLED_WEIGHT = 0.75  # the straggler's own GPU reports a slowdown: where and why
STEPS_WEIGHT = 0.45
CLOCK_WEIGHT = 0.5
COMPUTE_FACTOR = 1.15  # straggler's compute per step over the median of the others
NCCL_FACTOR = 0.8  # ... while its NCCL time per step is at most this share of theirs
STEP_FACTOR = 1.4  # a rank's median step time over the median of the others' medians
CLOCK_FACTOR = 0.75  # a GPU's median SM clock under load below this share of the peers' median
BUSY_UTIL = 50  # samples at or above this utilisation are "under load"
MIN_STEPS = 3
ARRIVAL_WEIGHT = 0.5
ARRIVAL_MIN_RANKS = 3  # two ranks' order is too easily the launcher's forwarding order
ARRIVAL_MIN_COLLECTIVES = 30
ARRIVAL_MIN_SHARE = 0.5  # of the complete collectives, the rank arrived last at this share at least
ARRIVAL_MAX_P = 1e-6  # binomial tail under "last is any rank, 1/k", times k
ARRIVAL_ALONE_SHARE = 0.75
ARRIVAL_ALONE_P = 1e-9
ARRIVAL_MATE_FACTOR = 3  # a node-mate last at more than 1/3 of the straggler's count: the node, not the rank
SLOW_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "thermal_violation", "power_violation")


def stragglers(events: pl.DataFrame, world: int | None) -> list[Finding]:
    out: list[Finding] = []
    ident = _LazyIdentity(events)  # read only when a straggler is found (~0.3 s at 16,384 ranks)
    throttled = _throttle_events(events)
    f = _trace_straggler(events, ident, throttled)
    if f is not None:
        out.append(f)
    f = _step_time_outlier(events)
    if f is not None:
        out.append(f)
    out.extend(_clock_outliers(events, ident, throttled))
    f = _arrival_order(events)
    if f is not None:
        out.append(f)
    return out


# -- identity ------------------------------------------------------------------------------------------

class _LazyIdentity(dict):  # type: ignore[type-arg]
    """:func:`_identity` of ``ev``, made on the first key read."""

    def __init__(self, ev: pl.DataFrame) -> None:
        super().__init__()
        self._ev = ev

    def __missing__(self, key: str) -> Any:
        self.update(_identity(self._ev))
        return dict.__getitem__(self, key)


def _identity(ev: pl.DataFrame) -> dict[str, Any]:
    """(host, gpu pci) <-> rank, from every event that names all three (traces, NCCL init)."""
    # the three columns first: filtering whole rows copied every message and attrs text
    d = ev.select("host", "gpu", "rank").filter(pl.col("host").is_not_null() & pl.col("gpu").is_not_null() & pl.col("rank").is_not_null())
    gpu_rank: dict[tuple[str, str], int] = {}
    rank_gpu: dict[int, tuple[str, str]] = {}
    if d.height:
        for h, g, r in d.group_by(["host", "gpu"]).agg(pl.col("rank").mode().first()).iter_rows():
            gpu_rank[(h, g)] = int(r)
        for r, h, g in d.group_by("rank").agg(pl.col("host").mode().first(), pl.col("gpu").mode().first()).iter_rows():
            rank_gpu[int(r)] = (h, g)
    return {"gpu_rank": gpu_rank, "rank_gpu": rank_gpu}




def _ns(t: Any) -> int | None:
    return None if t is None else int(t.timestamp() * 1_000_000_000)


def _evidence(r: dict[str, Any], rank: int | None = None) -> Evidence:
    return Evidence(
        time=_ns(r["time"]), host=r["host"], rank=r["rank"] if r["rank"] is not None else rank, gpu=r["gpu"],
        gpu_index=r["gpu_index"], file=r["file"] or "", line=r["line"], source=str(r["source"]), kind=str(r["kind"]),
        message=r["message"] or "",
    )


def _throttle_events(ev: pl.DataFrame) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """gpu_throttle events with a slowing reason, by (host, gpu pci). Telemetry that names a
    GPU by its index only (``dcgmi dmon``, ``dcgmi health``) gets the PCI id the node's
    nvidia-smi / DCGM inventory gives that index (NVML indices, not CUDA ordinals)."""
    d = ev.filter((pl.col("kind") == Kind.GPU_THROTTLE.value) & pl.col("host").is_not_null())
    pci_of: dict[tuple[str, int], str] = {}
    # the inventory's index -> PCI id, only when some throttle row names its GPU by index alone
    # (a mode per (host, index) over every telemetry row: ~0.1 s at 16,384 ranks)
    if d.select(((pl.col("gpu").is_null() | (pl.col("gpu") == "")) & pl.col("gpu_index").is_not_null()).any()).item():
        inv = ev.select("host", "gpu", "gpu_index", "source").filter(
            pl.col("host").is_not_null() & pl.col("gpu").is_not_null() & pl.col("gpu_index").is_not_null()
            & pl.col("source").is_in(["nvidia_smi", "gpu_csv", "dcgm"]))
        pci_of = {(h, int(i)): g for h, i, g in inv.group_by(["host", "gpu_index"]).agg(pl.col("gpu").mode().first()).iter_rows()}
    out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in d.sort("time", nulls_last=True).iter_rows(named=True):
        reasons = attrs_of(r["attrs"]).get("reasons") or []
        gpu = r["gpu"] or (pci_of.get((r["host"], r["gpu_index"])) if r["gpu_index"] is not None else None)
        if gpu and any(x in SLOW_REASONS for x in reasons if isinstance(x, str)):
            out[(r["host"], gpu)].append(dict(r, gpu=gpu))
    return out


# -- traces ---------------------------------------------------------------------------------------------

def _trace_straggler(ev: pl.DataFrame, ident: dict[str, Any], throttled: dict[tuple[str, str], list[dict[str, Any]]]) -> Finding | None:
    d = ev.filter(pl.col("kind") == Kind.TRACE_SUMMARY.value)
    if d.height < 2:
        return None
    per: dict[Any, dict[str, Any]] = {}
    for r in d.iter_rows(named=True):
        a = attrs_of(r["attrs"])
        if a.get("report") == "nvtx_sum":
            continue
        key = r["rank"] if r["rank"] is not None else (r["host"], r["gpu"] or r["gpu_index"], r["pid"])
        steps = a.get("steps") or 0
        if steps >= MIN_STEPS and a.get("step_compute_ms_median") is not None and a.get("step_nccl_ms_median") is not None:
            m = {"compute": float(a["step_compute_ms_median"]), "nccl": float(a["step_nccl_ms_median"]), "per": "step"}
        elif a.get("nccl_kernels") and a.get("compute_ms") is not None and a.get("nccl_ms") is not None:
            n = float(a["nccl_kernels"])
            m = {"compute": float(a["compute_ms"]) / n, "nccl": float(a["nccl_ms"]) / n, "per": "collective"}
        else:
            continue
        if key in per:
            continue  # one trace per rank (a stats CSV beside its export says the same)
        per[key] = {**m, "row": r, "ops": frozenset((a.get("ops") or {}).keys())}
    # Ranks with different collectives do different work by design (pipeline stages talk
    # by SendRecv, the data-parallel group by AllReduce): compare the largest like group.
    groups: dict[frozenset, list[Any]] = defaultdict(list)
    for k, p in per.items():
        groups[p["ops"]].append(k)
    if len(groups) > 1:
        largest: list[Any] = max(groups.values(), key=len)  # type: ignore[arg-type]
        keep = set(largest)
        per = {k: p for k, p in per.items() if k in keep}
    # compare like with like: per-step figures when most traces have them
    basis = "step" if sum(p["per"] == "step" for p in per.values()) * 2 >= len(per) else "collective"
    per = {k: p for k, p in per.items() if p["per"] == basis}
    if len(per) < 2:
        return None
    keys = list(per)

    def ratio(k: Any, what: str) -> float:
        others = [per[o][what] for o in keys if o != k]
        med = statistics.median(others)
        return per[k][what] / med if med > 0 else float("inf") if per[k][what] > 0 else 1.0

    ranked = sorted(keys, key=lambda k: (-ratio(k, "compute"), ratio(k, "nccl")))
    top = ranked[0]
    c, n = ratio(top, "compute"), ratio(top, "nccl")
    if c < COMPUTE_FACTOR or n > NCCL_FACTOR:
        return None
    row = per[top]["row"]
    rank = row["rank"]
    host, gpu = row["host"], row["gpu"]
    if (host is None or gpu is None) and rank is not None and rank in ident["rank_gpu"]:
        host, gpu = host or ident["rank_gpu"][rank][0], gpu or ident["rank_gpu"][rank][1]
    peers_c = statistics.median(per[o]["compute"] for o in keys if o != top)
    peers_n = statistics.median(per[o]["nccl"] for o in keys if o != top)
    who = f"Rank {rank}" if rank is not None else f"The process on {host or '?'} GPU {gpu or row['gpu_index']}"
    title = (f"{who} is the straggler: its compute took {per[top]['compute']:.0f} ms per {basis} against its peers' "
             f"{peers_c:.0f} ms ({c:.2f}x) while its NCCL kernels took {per[top]['nccl']:.0f} ms against their "
             f"{peers_n:.0f} ms: the others waited for it in every collective")
    evidence = [_evidence(row)]
    last = ev.filter((pl.col("kind") == Kind.COLLECTIVE_TRACE.value) & (pl.col("file") == row["file"]))
    if last.height:
        evidence.append(_evidence(last.row(0, named=True), rank))
    thr = throttled.get((host, gpu), []) if host and gpu else []
    weight = TRACE_WEIGHT
    if thr:
        weight = TRACE_THROTTLED_WEIGHT
        reasons = attrs_of(thr[0]["attrs"]).get("reasons") or []
        title += f"; its GPU {gpu} reports {', '.join(r for r in reasons if isinstance(r, str))}"
        evidence = [_evidence(thr[0], rank)] + evidence
    times = [e.time for e in evidence if e.time is not None]
    return Finding(
        rule_id="straggler-trace", title=title, cause="gpu_throttle", role="cause", status="stable", weight=weight,
        first_time=min(times) if times else None, count=len(per), hosts=(host,) if host else (),
        ranks=(int(rank),) if rank is not None else (), gpus=((host, gpu, row["gpu_index"]),) if host else (),
        evidence=tuple(evidence),
        explanation=(
            "Collectives end when the last rank arrives, so the rank that computes slowest spends the least time "
            "in NCCL kernels and every other rank the most: that rank sets the job's pace. A GPU that throttles "
            "(HW or thermal slowdown, power brake) or runs at low clocks is the usual reason; a CPU-starved host "
            "or a slow data loader on that rank are the others."
        ),
        actions=(
            "Check that GPU's clocks and clock-event reasons (nvidia-smi -q -d PERFORMANCE,TEMPERATURE on its node, or DCGM field 112) and the node's cooling and power; drain the node if it throttles when idle.",
            "If the GPU is not throttled, check the rank's host: CPU load, data-loader workers, NUMA binding.",
        ),
    )


# -- application step times --------------------------------------------------------------------------------

def _step_time_outlier(ev: pl.DataFrame) -> Finding | None:
    d = ev.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("rank").is_not_null())
    if d.height < 2 * MIN_STEPS:
        return None
    d = d.with_columns(pl.col("attrs").str.json_path_match("$.step_ms").cast(pl.Float64, strict=False).alias("_ms")).filter(
        pl.col("_ms").is_not_null() & (pl.col("_ms") > 0))
    per = d.group_by("rank").agg(pl.col("_ms").median().alias("med"), pl.len().alias("n")).filter(pl.col("n") >= MIN_STEPS)
    if per.height < 2:
        return None
    meds = {int(r): float(m) for r, m in per.select("rank", "med").iter_rows()}
    top = max(meds, key=lambda r: meds[r])
    others = statistics.median(m for r, m in meds.items() if r != top)
    if others <= 0 or meds[top] / others < STEP_FACTOR:
        return None
    rows = d.filter(pl.col("rank") == top).sort("time", nulls_last=True)
    first = rows.row(0, named=True)
    return Finding(
        rule_id="straggler-step-times",
        title=f"Rank {top}'s own step times ({meds[top]:.0f} ms median) are {meds[top] / others:.1f}x its peers' ({others:.0f} ms)",
        cause="gpu_throttle", role="cause", status="stable", weight=STEPS_WEIGHT, first_time=_ns(first["time"]),
        count=rows.height, hosts=(first["host"],) if first["host"] else (), ranks=(top,), gpus=(),
        evidence=tuple(_evidence(r) for r in rows.head(3).iter_rows(named=True)),
        explanation=("A rank whose own step times stand out computes slower than its peers: a throttled or failing "
                     "GPU, or a starved host. (Most trainers print the job's step time, which is the same on every rank; "
                     "only per-rank timers show this.)"),
        actions=("Check that rank's GPU clocks and temperature and its host's load.",),
    )


# -- telemetry: clocks far below the peers' ----------------------------------------------------------------

def _clock_outliers(ev: pl.DataFrame, ident: dict[str, Any], throttled: dict[tuple[str, str], list[dict[str, Any]]]) -> list[Finding]:
    # The columns it reads and each row's position: the evidence rows are taken whole from
    # ``ev`` at the end (filtering whole rows copied 393k messages at 16,384 ranks).
    tel = ev.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"), "kind", "host", "gpu", "time", "attrs").filter(
        pl.col("kind") == Kind.GPU_TELEMETRY.value)
    if tel.filter(pl.col("host").is_not_null() & pl.col("gpu").is_not_null()).height == 0:
        return []
    # every telemetry row's attrs decoded once, shared with the classifier's telemetry features
    a = attrs_fields(tel["attrs"], TELEMETRY_KEYS)
    d = tel.select("_p", "host", "gpu", "time").with_columns(
        a["sm_clock_mhz"].cast(pl.Float64, strict=False).alias("_clk"),
        a["util"].cast(pl.Float64, strict=False).alias("_util"),
    ).filter(pl.col("host").is_not_null() & pl.col("gpu").is_not_null() & pl.col("_clk").is_not_null() & (pl.col("_util") >= BUSY_UTIL))
    per = d.group_by(["host", "gpu"]).agg(pl.col("_clk").median().alias("med"), pl.len().alias("n"))  # sources thin series to ~1/min
    if per.height < 3:
        return []
    peers = float(per["med"].median())  # type: ignore[arg-type]
    slow = [(h, g, float(m)) for h, g, m, _ in per.iter_rows() if m < CLOCK_FACTOR * peers]
    if not slow or len(slow) > per.height // 2:
        return []
    out = []
    for host, gpu, med in slow:
        if (host, gpu) in throttled:
            continue  # the reason is on record: gpu-hw-slowdown (a per-event rule) names it
        slow_rows = d.filter((pl.col("host") == host) & (pl.col("gpu") == gpu) & (pl.col("_clk") < CLOCK_FACTOR * peers))
        if slow_rows.height == 0:
            continue
        rows = ev[slow_rows.sort("time", nulls_last=True, maintain_order=True)["_p"].head(3)]  # its earliest, whole
        rank = ident["gpu_rank"].get((host, gpu))
        first = rows.row(0, named=True)
        who = f" (rank {rank})" if rank is not None else ""
        out.append(Finding(
            rule_id="gpu-clock-outlier",
            title=f"GPU {gpu} on {host}{who} ran at {med:.0f} MHz under load while its peers ran at {peers:.0f} MHz",
            cause="gpu_throttle", role="cause", status="stable", weight=CLOCK_WEIGHT, first_time=_ns(first["time"]),
            count=slow_rows.height, hosts=(host,), ranks=(rank,) if rank is not None else (), gpus=((host, gpu, first["gpu_index"]),),
            evidence=tuple(_evidence(r, rank) for r in rows.iter_rows(named=True)),
            explanation=("A GPU whose SM clock stays far below its peers' while it is busy is being held back (thermal or "
                         "power limits, a firmware clock cap) even when no clock-event reason was recorded; its rank "
                         "paces every collective."),
            actions=("Read that GPU's clock-event reasons and temperature (nvidia-smi -q -d PERFORMANCE,TEMPERATURE) and compare its application clocks with its peers'.",),
        ))
    return out


# -- arrival order at the collectives (TORCH_DISTRIBUTED_DEBUG=DETAIL) ----------------------------------------

def _binom_tail(n: int, c: int, p: float) -> float:
    """P(X >= c) for X ~ Binomial(n, p), summed in log space (n up to tens of thousands)."""
    if c <= 0:
        return 1.0
    if c > n:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq for i in range(c, n + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def _arrival_order(ev: pl.DataFrame) -> Finding | None:
    d = ev.filter((pl.col("kind") == Kind.COLLECTIVE_ENTER.value) & pl.col("rank").is_not_null() & pl.col("file").is_not_null())
    if d.height < ARRIVAL_MIN_RANKS * ARRIVAL_MIN_COLLECTIVES:
        return None
    # Per-rank logs (one rank each) hold no order: only files with several ranks are read further.
    files = d.group_by("file").agg(pl.col("rank").n_unique().alias("k"), pl.len().alias("n")).filter(
        (pl.col("k") >= ARRIVAL_MIN_RANKS) & (pl.col("n") >= pl.col("k") * ARRIVAL_MIN_COLLECTIVES))["file"]
    if files.len() == 0:
        return None
    d = d.filter(pl.col("file").is_in(files.implode()) & pl.col("line").is_not_null())
    fp = pl.col("attrs").str.json_decode(pl.Struct({"seq": pl.Int64, "op": pl.String, "shape": pl.String, "pg_rank": pl.Int64}))
    d = d.with_columns(fp.alias("_fp")).with_columns(
        pl.col("_fp").struct.field("seq").alias("_seq"), pl.col("_fp").struct.field("op").alias("_op"),
        pl.col("_fp").struct.field("shape").fill_null("").alias("_shape"), pl.col("_fp").struct.field("pg_rank").alias("_pg"),
    ).drop("_fp").filter(pl.col("_seq").is_not_null())
    best: tuple[float, Finding] | None = None
    for (file,), part in d.sort("line").group_by(["file"], maintain_order=True):
        f = _arrival_in_file(str(file), part)
        if f is not None and (best is None or f[0] < best[0]):
            best = f
    return best[1] if best else None


def _arrival_in_file(file: str, part: pl.DataFrame) -> tuple[float, Finding] | None:
    rows = list(part.iter_rows(named=True))
    ranks = {int(r["rank"]) for r in rows}
    k = len(ranks)
    if k < ARRIVAL_MIN_RANKS:
        return None
    inst: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        inst[(r["_seq"], r["_op"], r["_shape"])].append(r)
    complete = []
    for lines in inst.values():
        rs = [int(r["rank"]) for r in lines]
        # one line per rank of the file, each from the default group (group rank == global rank):
        # a subgroup's collective, or two groups' collectives with the same fingerprint, is left out
        if len(rs) == k and set(rs) == ranks and all(r["_pg"] is None or int(r["_pg"]) == int(r["rank"]) for r in lines):
            complete.append(lines)
    n = len(complete)
    if n < ARRIVAL_MIN_COLLECTIVES:
        return None
    complete.sort(key=lambda lines: lines[0]["line"])
    last = [max(lines, key=lambda r: r["line"]) for lines in complete]
    counts: dict[int, int] = defaultdict(int)
    for r in last:
        counts[int(r["rank"])] += 1
    top = max(counts, key=lambda r: (counts[r], -r))
    c = counts[top]
    share = c / n
    p = min(1.0, k * _binom_tail(n, c, 1.0 / k))
    host_of: dict[int, str] = {}
    for r in rows:
        if r["host"] and int(r["rank"]) not in host_of:
            host_of[int(r["rank"])] = r["host"]
    host = host_of.get(top)
    mates = [m for m in ranks if m != top and host is not None and host_of.get(m) == host]
    need_share = max(ARRIVAL_MIN_SHARE, min(0.75, 2.0 / k))
    need_p = ARRIVAL_MAX_P
    # Where the run of last arrivals starts: the CUSUM minimum of (last? - midpoint).
    mid = (1.0 / k + share) / 2
    acc, low, onset = 0.0, 0.0, 0
    for i, r in enumerate(last):
        acc += (1.0 if int(r["rank"]) == top else 0.0) - mid
        if acc < low:
            low, onset = acc, i + 1
    onset = min(onset, n - 1)
    after = last[onset:]
    after_share = sum(1 for r in after if int(r["rank"]) == top) / len(after)
    if not mates:
        # No node-mate to compare with, so the lines' path from its node could be what is late. A path is
        # late from the start, so a rank alone needs the larger share over the run, or over the part of the
        # run from where it began to be last (at least ARRIVAL_MIN_COLLECTIVES collectives): a rank that
        # slowed part-way (cpu_starve_mild_rank2_w3_srun: last at 4 of 26 before, 58 of 63 after).
        need_p = ARRIVAL_ALONE_P
        need_share = max(need_share, ARRIVAL_ALONE_SHARE) if len(after) < ARRIVAL_MIN_COLLECTIVES or after_share < ARRIVAL_ALONE_SHARE else need_share
    if share < need_share or p > need_p:
        return None
    if any(counts.get(m, 0) * ARRIVAL_MATE_FACTOR > c for m in mates):
        return None  # its node-mates are late as often: the node's output path, not this rank
    first_rows = [r for r in after if int(r["rank"]) == top][:3]
    on = first_rows[0]
    title = (
        f"Rank {top} arrived last at {c} of {n} collectives ({share:.0%}; {1 / k:.0%} by chance among {k} ranks), "
        f"{after_share:.0%} of them from collective #{on['_seq']} ({on['_op']}) on, in the order of {file}'s "
        f"'Running collective' lines: the others waited for it"
    )
    if mates:
        title += f" (its node-mate{'s' if len(mates) > 1 else ''} on {host} arrived in time)"
    evidence = tuple(_evidence(r) for r in first_rows)
    finding = Finding(
        rule_id="straggler-arrival-order", title=title, cause="gpu_throttle", role="cause", status="stable",
        weight=ARRIVAL_WEIGHT, first_time=_ns(on["time"]), count=c, hosts=(host,) if host else (), ranks=(top,), gpus=(),
        evidence=evidence,
        explanation=(
            "With TORCH_DISTRIBUTED_DEBUG=DETAIL each rank logs 'Running collective' as it enters a collective and "
            "then waits in a monitored barrier for the rest, so in one merged output the rank whose line comes last "
            "is the one the others waited for. This order is only meaningful within one file written by one "
            "writer (the job's stdout, lines in the order the launcher received them); lines of ranks that arrive "
            "within a millisecond may be reordered in forwarding, which is why only a rank that is last far more "
            "often than chance is named. A rank that is consistently last computes slower than its peers: a "
            "throttled GPU, or a CPU-starved or overloaded host (data loader, other processes on its cores)."
        ),
        actions=(
            "Check that rank's GPU clocks and clock-event reasons (nvidia-smi -q -d PERFORMANCE) and its host's CPU load, cgroup CPU quota and data-loader workers.",
            "Compare the rank's step compute time with its peers' in a short Nsight Systems or Flight Recorder trace.",
        ),
    )
    return p, finding
